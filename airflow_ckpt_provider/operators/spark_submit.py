"""``CheckpointedSparkSubmitOperator``: ``SparkSubmitOperator`` plus a checkpoint store.

Each real submit opens a new epoch of the store (fencing every older writer),
tells the job where the store is and which epoch it runs in, and records how the
submit ended. A retry that re-attaches to a still-running (or finished) driver —
``SparkSubmitOperator``'s durable mode in cluster deploy modes — keeps the epoch of
that driver: opening a new one would turn the live job into its own zombie.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.contract import (
    EPOCH_STATE_KEY,
    XCOM_AWS_CONN_ID,
    XCOM_DEGRADED,
    XCOM_STORE_URI,
    Handoff,
    flatten_result,
    parse_result_line,
    read_job_result,
)
from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook
from airflow_ckpt_provider.operators import metrics
from airflow_ckpt_provider.operators.epoch_opening import STORE_TEMPLATE_FIELDS, EpochOpener, push_result
from airflow_ckpt_provider.operators.spark_provider import SubmitHookOperator
from airflow_ckpt_provider.store import CheckpointStore, EpochConflictError, EpochStatus
from airflow_ckpt_provider.store.rerun import OnRerun, RerunAction

if TYPE_CHECKING:
    from airflow.sdk import Context


class CheckpointedSparkSubmitOperator(SubmitHookOperator):
    """Submit a Spark job that checkpoints its progress, so that a retry skips finished keys.

    Takes every ``SparkSubmitOperator`` parameter (cluster modes, durable re-attach,
    ``env_vars``, ...) plus:

    :param checkpoint_uri: the store (``file:///…``, ``/abs/path`` or ``s3://bucket/prefix``).
        Templated. Default: one store per job, shared by every run of the same output:
        ``{[ckpt] base_uri}/{dag_id}/{task_id}/date={logical date}`` (``run={run_id}`` for a run
        without a logical date), or with no base URI under ``$AIRFLOW_HOME/checkpoints``; each
        mapped instance adds ``/map_index={i}`` (its own store, epochs, resume, plan and result).
        That local default is refused before the submit where another host must read it (an executor
        other than the LocalExecutor, a Spark cluster master or cluster deploy mode: InvalidArgumentError
        ``store_not_shared``, docs/deployment.md); a location named here or in ``[ckpt] base_uri`` is used as given.
    :param aws_conn_id: ``aws`` connection for ``s3://`` stores (templated; default ``[ckpt] aws_conn_id``).
    :param output_roots: the output directories the job writes under (templated; a string or a
        list). Recorded in the epoch the submit opens: commit, discard and clear delete output
        files only there, and the job may write only under them. Default: the job's driver
        declares each write's directory before writing (docs/design.md, section 7).
    :param takeover_open_epoch: take over an epoch that another owner holds open (use when
        that submit is known to be dead). Without it, an epoch whose task instance has ended (the
        metadata DB no longer has it, or says failed, upstream_failed, skipped or removed: a killed
        run) is taken over, and any other open epoch makes the submit fail fast with
        ``EpochConflictError``, nothing changed (operators/takeover.py).
    :param on_rerun: what a run does when its job's output is already committed and its keys were not
        kept (``delete_after_success``): ``replace`` (default: process every key again; the commit
        retracts the earlier commit's files, so a reader never sees both) or ``skip`` (submit nothing:
        the committed output stays, the commit finds it committed). A job is this task, its map index
        and the run's logical date (docs/airflow.md, "Re-running a day"); ``retain`` stores always run
        incrementally. Templated.
    :param wait_for_completion: in cluster deploy modes, ``False`` returns as soon as the
        driver is accepted and leaves the epoch open: a deferrable ``CheckpointSensor`` then
        waits for the partitions without holding a worker slot, and the commit closes the
        epoch. (In client mode spark-submit runs the driver itself, so the task always waits.)

    Before the submit, XCom ``checkpoint_plan`` holds what will be skipped. The job's summary
    (XCom ``checkpoint_result``, and the return value: XCom ``return_value``) holds the store
    URI, the epoch, ``degraded`` and the job's counters.
    The job gets the store through the Spark confs ``spark.ckpt.*`` and credentials through
    the ``CKPT_STORE_SECRETS`` environment variable of the ``spark-submit`` process only.
    Unless ``conf`` names one, the submit sets ``spark.python.daemon.module`` to this package's
    worker daemon, which makes each Python task cheaper (spark/worker_daemon.py;
    ``pyspark.daemon`` turns it off).
    """

    template_fields: Sequence[str] = (
        *SubmitHookOperator.template_fields,
        *STORE_TEMPLATE_FIELDS,
    )
    ui_color = "#f7c873"

    def __init__(
        self,
        *,
        checkpoint_uri: str | None = None,
        aws_conn_id: str | None = None,
        output_roots: Sequence[str] | str | None = None,
        takeover_open_epoch: bool = False,
        wait_for_completion: bool = True,
        on_rerun: OnRerun | str = OnRerun.REPLACE,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.on_rerun = on_rerun
        self.checkpoint_uri = checkpoint_uri
        self.aws_conn_id = aws_conn_id
        self.output_roots = output_roots
        self.takeover_open_epoch = takeover_open_epoch
        self.wait_for_completion = wait_for_completion
        self._context: Context | None = None
        self._epochs: EpochOpener | None = None
        self._submitted: Handoff | None = None
        self._reattached = False
        self._detached = False
        self._external_id: Any = None

    # ------------------------------------------------------------------ helpers

    def _opener(self) -> EpochOpener:
        """The epoch side of this task instance (built once per execute, from the rendered fields)."""
        if self._epochs is None:
            self._epochs = EpochOpener.of(self)
        return self._epochs

    def checkpoint_hook(self, context: Context) -> CheckpointHook:
        return self._opener().hook(context)

    # ------------------------------------------------------------------ the submit

    def before_submit(self) -> Handoff:
        context = self._context
        if context is None:  # pragma: no cover - execute() always sets it
            raise RuntimeError("submit outside execute()")
        handoff = self._opener().open(context)
        self._submitted = handoff
        return handoff

    def _reattached_handoff(self, context: Context, store: CheckpointStore) -> Handoff | None:
        """The epoch of the driver a durable retry re-attached to (no submit happened)."""
        recorded: Any = None
        task_state_store = context.get("task_state_store")
        if task_state_store is not None:
            recorded = task_state_store.get(EPOCH_STATE_KEY)
        if isinstance(recorded, Mapping) and recorded.get("store_uri") == store.uri:
            return Handoff(store.uri, int(recorded["epoch"]), {}, {}, str(recorded.get("result_path") or ""))
        current = store.epochs.current()
        if current is not None and current.owner == self._opener().owner(context).key():
            return Handoff(store.uri, current.number, {}, {}, "")
        return None

    def poll_until_complete(self, external_id: Any, context: Context) -> None:
        # Reached after a submit, or directly when a durable retry re-attaches to a live driver.
        self._reattached = self._submitted is None
        self._external_id = external_id
        if not self.wait_for_completion and not self._reattached:
            self._detached = True
            self.log.info(
                "Driver %s accepted; not waiting for it (wait_for_completion=False). "
                "A CheckpointSensor can wait for its partitions; the commit closes the epoch",
                external_id,
            )
            return
        failpoint("operator.spark.before_poll")  # fault injection: an attempt dies while its driver runs
        super().poll_until_complete(external_id, context)

    def _driver_may_be_running(self) -> bool:
        """After a failed attempt: could the cluster driver it submitted still be running?"""
        if self._external_id is None or not self.durable:
            return False  # client mode: the driver was spark-submit's child and died with the attempt
        return self.last_driver_status() not in ("FINISHED", "FAILED", "KILLED", "ERROR", "SUCCEEDED")

    def execute(self, context: Context) -> Any:  # the job summary (a dict), pushed as return_value
        self._context = context
        self._submitted = None
        self._reattached = False
        self._detached = False
        self._external_id = None
        self._epochs = None
        started = time.monotonic()
        epochs = self._opener()
        epochs.refuse_unshared_store(self, context, self.spark_placement())
        store = epochs.hook(context).get_store()
        rerun = epochs.rerun_plan(context, store)
        if rerun.action is RerunAction.SKIP:
            skipped = epochs.skipped(context, store, rerun)
            push_result(context, skipped)
            return skipped
        try:
            super().execute(context)
        except BaseException:
            handoff = self._submitted
            if handoff is None and self._reattached:
                handoff = self._reattached_handoff(context, store)
            if handoff is not None and self._driver_may_be_running():
                # Durable mode: a retry re-attaches to this driver and keeps its epoch; marking
                # the epoch failed now would make its (possibly successful) output uncommittable.
                self.log.warning(
                    "Epoch %d left open: driver %s may still be running; a retry re-attaches to it",
                    handoff.epoch,
                    self._external_id,
                )
            elif handoff is not None:
                epochs.end(store, handoff, EpochStatus.FAILED, read_job_result(handoff.result_path))
            raise
        handoff = self._submitted
        if handoff is None:
            handoff = self._reattached_handoff(context, store)
            metrics.count(metrics.REATTACHES, 1, metrics.task_tags(context))
            if handoff is None:
                raise EpochConflictError(
                    f"the job finished but no epoch of {store.uri} belongs to {epochs.owner(context).describe()}: "
                    "it was taken over by another submit, so its output is not this task's to commit; "
                    "run the task again",
                    reason="epoch_fenced",
                )
            self.log.info("Re-attached to the driver of epoch %d: no new epoch was opened", handoff.epoch)
        if self._detached:
            detached = {
                XCOM_STORE_URI: store.uri,
                XCOM_AWS_CONN_ID: self.aws_conn_id,
                "map_index": epochs.owner(context).map_index,
                "epoch": handoff.epoch,
                "driver_id": self._external_id,
                # How a sensor asks the cluster whether this driver is still there (triggers/driver.py).
                "driver": self.driver_ref(self._external_id).to_json(),
                "detached": True,
                XCOM_DEGRADED: epochs.degraded(store, handoff.epoch),
            }
            push_result(context, detached)
            return detached
        job_result = read_job_result(handoff.result_path) or self._result_from_log() or {}
        degraded = bool(job_result.get("degraded")) or epochs.degraded(store, handoff.epoch)
        epochs.end(store, handoff, EpochStatus.SUCCEEDED, job_result)
        summary = epochs.summary(context, store, handoff.epoch, job_result, degraded) | {
            "reattached": self._submitted is None,
            "duration_seconds": round(time.monotonic() - started, 3),
        }
        push_result(context, summary)
        self.log.info("Checkpointed job finished: %s", summary)
        return summary

    def _result_from_log(self) -> dict[str, Any] | None:
        line = self.driver_result_line()
        result = parse_result_line(line) if line else None
        return None if result is None else flatten_result(result)
