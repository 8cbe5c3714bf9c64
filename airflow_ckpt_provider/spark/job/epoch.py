"""The job's epoch: a new one the job opens and owns (after asking the store's rerun plan), or the operator's,
checked to be the latest."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from airflow_ckpt_provider.spark.backend import SparkBackend
from airflow_ckpt_provider.store import CheckpointStore
from airflow_ckpt_provider.store.errors import EpochConflictError, InvalidArgumentError
from airflow_ckpt_provider.store.rerun import OnRerun, RerunAction, RerunPlan, on_rerun_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobEpoch:
    """The epoch a job runs in. ``rerun``: the store's plan when the job opened its own epoch (None: the
    operator's epoch, whose plan the operator asked). ``skipped``: ``on_rerun="skip"`` over committed
    output: no epoch was opened, ``number`` is the live commit's and nothing may be written."""

    number: int
    rerun: RerunPlan | None = None
    skipped: bool = False


def job_epoch(
    store: CheckpointStore,
    backend: SparkBackend,
    epoch: int | None,
    owner: str | None,
    *,
    job: str | None = None,
    on_rerun: OnRerun | str = OnRerun.REPLACE,
) -> JobEpoch:
    """``epoch`` if it is the store's latest; with ``epoch=None`` the next epoch of ``job`` (None: the store's
    one output), opened here after the store's rerun plan said what it does (owner: ``owner`` or
    ``spark-app:<app name>``, so a rerun of the same application takes over its own unfinished epoch), or
    none when the plan is ``skip``.

    Raises :class:`InvalidArgumentError` (``no_epoch``; ``job``: a job or ``on_rerun`` given with the operator's
    epoch, whose opener named the job), :class:`EpochConflictError` (``epoch_fenced``: a newer submit owns the
    store; another owner's epoch is open)."""
    if epoch is None:
        plan = store.inspection.rerun_plan(job, on_rerun_of(on_rerun))
        log.info("Job %s on %s: %s", plan.job, store.uri, plan.describe())
        if plan.action is RerunAction.SKIP:
            assert plan.live_commit is not None  # skip is planned only over a commit
            log.info('on_rerun="skip": commit %d of %s is live; this job writes nothing', plan.live_commit, store.uri)
            return JobEpoch(plan.live_commit, plan, skipped=True)
        opened = store.epochs.begin(
            job=job,
            owner=owner or f"spark-app:{backend.app_name()}",
            metadata={"opened_by": "CheckpointedJob", **backend.epoch_metadata()},
        )
        return JobEpoch(opened.number, plan)
    if job is not None or on_rerun_of(on_rerun) is not OnRerun.REPLACE:
        raise InvalidArgumentError(
            f"job= and on_rerun= are for a job that opens its own epoch: epoch {epoch} of {store.uri} was opened "
            "by its operator, which named the job and asked the plan. Leave them out, or leave epoch=None",
            reason="job",
        )
    current = store.epochs.current()
    if current is None or current.number < epoch:
        raise InvalidArgumentError(
            f"epoch {epoch} does not exist in {store.uri}: the operator opens it before submitting; "
            "without Airflow, leave epoch=None so the job opens its own",
            reason="no_epoch",
        )
    if current.number != epoch:
        raise EpochConflictError(
            f"epoch {epoch} of {store.uri} was superseded by epoch {current.number}: a newer submit "
            "owns the store, so this driver stops before reading or writing anything",
            reason="epoch_fenced",
        )
    return JobEpoch(epoch)
