"""Opening, ending and reporting the epochs of one checkpointed Spark task, for every operator that runs one.

A checkpointed Spark task — ``CheckpointedSparkSubmitOperator`` (a ``spark-submit``) or
``CheckpointedPySparkOperator`` (a Spark session in the worker process) — does the same
around its job:

0. :meth:`EpochOpener.refuse_unshared_store`, before anything runs: a store on this host's disk that
   another process must read (another executor's workers, a Spark cluster) is refused
   (hooks/store_visibility.py);
1. :meth:`EpochOpener.rerun_plan`: what the job's committed output asks of this run
   (``on_rerun``: replace it, or skip and run nothing: :meth:`EpochOpener.skipped`);
2. :meth:`EpochOpener.open`, right before the job really starts: refuse a sibling map index
   on the same store, take over an open epoch whose task instance has ended, begin the
   epoch, push the ``checkpoint_plan`` XCom, count the metrics, record the epoch for a
   durable re-attach;
3. :meth:`EpochOpener.end` with the job's result, then :meth:`EpochOpener.summary`: the
   dict both operators push as XCom ``checkpoint_result`` (:func:`push_result`:
   what the commit, the clear and the sensor read).

It imports neither pyspark nor the Spark provider: the operators do.
"""

from __future__ import annotations

import logging
import os
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.contract import (
    EPOCH_STATE_KEY,
    PLAN_XCOM_KEY,
    RESULT_XCOM_KEY,
    XCOM_AWS_CONN_ID,
    XCOM_DEGRADED,
    XCOM_STORE_URI,
    Handoff,
)
from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook
from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.default_location import JobIdentity
from airflow_ckpt_provider.hooks.locator import store_uri
from airflow_ckpt_provider.hooks.store_visibility import SparkPlacement, refuse_unshared_default
from airflow_ckpt_provider.operators import metrics
from airflow_ckpt_provider.operators.takeover import takeover_of_ended_owner
from airflow_ckpt_provider.store import CheckpointStore, Epoch, EpochStatus
from airflow_ckpt_provider.store.errors import EpochConflictError
from airflow_ckpt_provider.store.owner import OWNER_METADATA_KEY, EpochOwner
from airflow_ckpt_provider.store.rerun import OnRerun, RerunPlan, on_rerun_of

if TYPE_CHECKING:
    from airflow.sdk import Context


#: The store parameters both checkpointed Spark operators take and template (besides their base's fields).
STORE_TEMPLATE_FIELDS = ("checkpoint_uri", "aws_conn_id", "output_roots", "on_rerun")


class EpochOpener:
    """The epoch side of one checkpointed Spark task instance (its operator's rendered fields).

    :param output_roots: as the operators take it (a string, a list, or None/empty: undeclared).
    :param log: the operator's logger, so that its task log says what the store did.
    """

    def __init__(
        self,
        *,
        dag_id: str,
        task_id: str,
        checkpoint_uri: str | None,
        aws_conn_id: str | None,
        output_roots: Sequence[str] | str | None,
        takeover_open_epoch: bool,
        on_rerun: OnRerun | str,
        log: logging.Logger | Any,
    ) -> None:
        self.dag_id = dag_id
        self.task_id = task_id
        self.checkpoint_uri = checkpoint_uri
        self.aws_conn_id = aws_conn_id
        self.output_roots = output_roots
        self.takeover_open_epoch = takeover_open_epoch
        self.on_rerun = on_rerun
        self.log = log
        self._hook: CheckpointHook | None = None
        #: The rerun plan of this run (set by :meth:`rerun_plan`).
        self.rerun: RerunPlan | None = None

    @classmethod
    def of(cls, task: Any) -> EpochOpener:
        """The opener of an operator carrying the store parameters, from its rendered fields."""
        return cls(
            dag_id=task.dag_id,
            task_id=task.task_id,
            checkpoint_uri=task.checkpoint_uri,
            aws_conn_id=task.aws_conn_id,
            output_roots=task.output_roots,
            takeover_open_epoch=task.takeover_open_epoch,
            on_rerun=task.on_rerun,
            log=task.log,
        )

    # ------------------------------------------------------------------ who and where

    def owner(self, context: Context) -> EpochOwner:
        map_index = getattr(context.get("ti"), "map_index", None)
        return EpochOwner(self.dag_id, self.task_id, context["run_id"], map_index if isinstance(map_index, int) else -1)

    def job(self, context: Context) -> JobIdentity:
        return JobIdentity.from_context(context, self.task_id, self.dag_id)

    def declared_output_roots(self) -> list[str] | None:
        roots = self.output_roots
        if roots is None or roots == "" or roots == []:
            return None
        return [roots] if isinstance(roots, str) else [str(r) for r in roots]

    def hook(self, context: Context) -> CheckpointHook:
        if self._hook is None:
            config = CheckpointConfig.load()
            uri = store_uri(self.checkpoint_uri, self.job(context), config)
            hook = CheckpointHook(uri, aws_conn_id=self.aws_conn_id, config=config)
            self._hook = hook.with_trusted_output_roots(self.declared_output_roots())
        return self._hook

    # ------------------------------------------------------------------ before the job

    def refuse_unshared_store(self, task: Any, context: Context, placement: SparkPlacement | None) -> None:
        """:class:`InvalidArgumentError` (``store_not_shared``) when the store is the embedded default on this
        host's disk and a process elsewhere must read it: this task's other tries or the tasks working on its
        store on another executor's workers, or Spark's driver or executors (``placement``) on other hosts.
        Opens no store (hooks/store_visibility.py)."""
        hook = self.hook(context)
        refuse_unshared_default(task, context, hook.uri, placement, hook.config)

    def rerun_plan(self, context: Context, store: CheckpointStore) -> RerunPlan:
        """What the job's committed output asks of this run (logged, and kept for the plan XCom)."""
        rerun = store.inspection.rerun_plan(self.job(context).key(), on_rerun_of(self.on_rerun))
        self.log.info("Job %s on %s: %s", self.job(context).key(), store.uri, rerun.describe())
        self.rerun = rerun
        return rerun

    def open(self, context: Context, *, result_file: bool = True) -> Handoff:
        """Begin the next epoch for a job that starts now; the :class:`Handoff` says where and which.

        ``result_file``: give the job a local file to write its result to, and ask it to print the
        result line, which the submit operator reads from spark-submit's log where the file is not
        on this machine (a ``spark-submit``'s driver; a job in this process hands its result back
        directly and prints nothing).
        """
        ckpt = self.hook(context)
        store = ckpt.get_store()
        ti = context.get("ti")
        owner = self.owner(context)
        latest = store.epochs.current()
        refuse_sibling(store, owner, latest)
        # A run of this job killed earlier left its epoch open: taken over if its task instance has ended.
        took_over = None if self.takeover_open_epoch else takeover_of_ended_owner(latest, owner, ti)
        if took_over is not None:
            self.log.warning(
                "Taking over epoch %d of %s, left open by %s: %s. Its sealed keys are skipped; the commit "
                "deletes its unsealed files",
                took_over["epoch"],
                store.uri,
                took_over["owner"],
                took_over["reason"],
            )
        epoch = store.epochs.begin(
            job=self.job(context).key(),
            owner=owner.key(),
            takeover=self.takeover_open_epoch,
            takeover_epoch=None if took_over is None else int(took_over["epoch"]),
            output_roots=self.declared_output_roots(),
            metadata={
                "dag_id": self.dag_id,
                "task_id": self.task_id,
                "run_id": context["run_id"],
                "map_index": owner.map_index,
                "try_number": getattr(ti, "try_number", None),
                OWNER_METADATA_KEY: owner.to_json(),
                **({"took_over": took_over} if took_over is not None else {}),
            },
        )
        plan = epoch_plan(store, epoch) | {XCOM_AWS_CONN_ID: self.aws_conn_id, "map_index": owner.map_index}
        if self.rerun is not None:
            plan["rerun"] = self.rerun.to_json()
        if took_over is not None:
            plan["took_over"] = took_over
        self.log.info(
            "Opened epoch %d of %s: skipping %d keys already done in %d valid checkpoints%s",
            epoch.number,
            store.uri,
            plan["keys_skipped"],
            plan["checkpoints_skipped"],
            " (plus a snapshot of committed keys)" if epoch.base_snapshot is not None else "",
        )
        if ti is not None:
            ti.xcom_push(key=PLAN_XCOM_KEY, value=plan)
        tags = metrics.task_tags(context)
        metrics.count(metrics.SUBMITS, 1, tags)
        metrics.count(metrics.KEYS_SKIPPED, plan["keys_skipped"], tags)
        metrics.count(metrics.CHECKPOINTS_SKIPPED, plan["checkpoints_skipped"], tags)

        result_path = ""
        if result_file:
            result_dir = os.path.join(tempfile.gettempdir(), "airflow-ckpt-results")
            os.makedirs(result_dir, mode=0o700, exist_ok=True)
            result_path = os.path.join(result_dir, f"{uuid.uuid4().hex}.json")
        handoff = Handoff(
            store_uri=store.uri,
            epoch=epoch.number,
            public_options=ckpt.public_store_options,
            secret_options=ckpt.secret_store_options,
            result_path=result_path,
            result_line=result_file,
        )
        task_state_store = context.get("task_state_store")
        if task_state_store is not None:
            # Read back by a retry that re-attaches to this driver instead of submitting.
            task_state_store.set(
                EPOCH_STATE_KEY,
                {"store_uri": store.uri, "epoch": epoch.number, "result_path": handoff.result_path},
            )
        return handoff

    # ------------------------------------------------------------------ after the job

    def degraded(self, store: CheckpointStore, epoch: int) -> bool:
        try:
            return store.epochs.is_degraded(epoch)
        except Exception as exc:  # the store may be the thing that is down
            self.log.warning("Could not read the degraded state of epoch %d: %s", epoch, exc)
            return False

    def end(
        self, store: CheckpointStore, handoff: Handoff, status: EpochStatus, result: Mapping[str, Any] | None
    ) -> None:
        """Record how the job of ``handoff`` ended (best effort), and drop its result file."""
        try:
            store.epochs.end(handoff.epoch, status=status, summary=dict(result or {}))
        except Exception as exc:
            # An unrecorded end only costs the UI its status; a later epoch supersedes it.
            self.log.warning("Could not record the end of epoch %d (%s): %s", handoff.epoch, status, exc)
        if handoff.result_path and os.path.exists(handoff.result_path):
            os.unlink(handoff.result_path)

    def summary(
        self, context: Context, store: CheckpointStore, epoch: int, job_result: Mapping[str, Any], degraded: bool
    ) -> dict[str, Any]:
        """The finished job's summary (XCom ``checkpoint_result``); counts its metrics and warns if degraded."""
        summary: dict[str, Any] = {
            **job_result,
            XCOM_STORE_URI: store.uri,
            XCOM_AWS_CONN_ID: self.aws_conn_id,  # not a secret: lets the UI open the same store
            "map_index": self.owner(context).map_index,
            "epoch": epoch,
            XCOM_DEGRADED: degraded,
            "rerun": None if self.rerun is None else self.rerun.to_json(),
        }
        tags = metrics.task_tags(context)
        metrics.count(metrics.CHECKPOINTS_SEALED, int(job_result.get("sealed_partitions") or 0), tags)
        metrics.count(metrics.ROWS_WRITTEN, int(job_result.get("rows") or 0), tags)
        if degraded:
            metrics.count(metrics.BREAKER_TRIPS, 1, tags)
            self.log.warning(
                "Epoch %d ran degraded (the store was unreachable for a while, checkpointing stopped): "
                "the job finished, and the commit will keep every file it cannot prove orphaned",
                epoch,
            )
        return summary

    def skipped(self, context: Context, store: CheckpointStore, rerun: RerunPlan) -> dict[str, Any]:
        """on_rerun="skip" over committed output: no job, no epoch; the commit finds it committed."""
        summary = {
            XCOM_STORE_URI: store.uri,
            XCOM_AWS_CONN_ID: self.aws_conn_id,
            "map_index": self.owner(context).map_index,
            "epoch": rerun.live_commit,
            XCOM_DEGRADED: False,
            "rerun": rerun.to_json(),
            "skipped": True,
        }
        self.log.info('on_rerun="skip": commit %s of %s is live; nothing submitted', rerun.live_commit, store.uri)
        return summary


def refuse_sibling(store: CheckpointStore, owner: EpochOwner, latest: Epoch | None) -> None:
    """Fail fast when another mapped instance of this task and run already uses the store."""
    other = None if latest is None else EpochOwner.from_epoch(latest)
    if latest is not None and owner.sibling_of(other):
        assert other is not None
        raise EpochConflictError(
            f"{store.uri} already holds the work of map index {other.map_index} of this task and run "
            f"(epoch {latest.number}, {latest.status.value}); map index {owner.map_index} would count "
            "those keys as done. Give each mapped instance its own store: leave checkpoint_uri unset (one "
            "store per map index), or put {{ ti.map_index }} in it. Nothing was changed",
            reason="mapped_instance",
        )


def epoch_plan(store: CheckpointStore, epoch: Epoch) -> dict[str, Any]:
    """The plan XCom of a new epoch: what it skips (checkpoints, keys, rows) and where its store is."""
    if epoch.base_keys is not None and epoch.base_rows is not None:
        # Counted by begin_epoch from the state it just read: no second pass over every manifest.
        keys, rows = epoch.base_keys, epoch.base_rows
    else:
        progress = store.inspection.progress()
        keys, rows = progress.keys_done, progress.rows
    return {
        XCOM_STORE_URI: store.uri,
        "epoch": epoch.number,
        "checkpoints_skipped": len(epoch.base),
        "keys_skipped": keys,
        "rows_skipped": rows,
        "snapshot": epoch.base_snapshot,
    }


def push_result(context: Context, summary: Mapping[str, Any]) -> None:
    """Push the job's summary as XCom ``checkpoint_result`` (what store-facing tasks read first)."""
    ti = context.get("ti")
    if ti is not None:
        ti.xcom_push(key=RESULT_XCOM_KEY, value=dict(summary))
