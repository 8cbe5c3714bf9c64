"""``CheckpointedSparkSubmitOperator``: ``SparkSubmitOperator`` plus a checkpoint store.

Each real submit opens a new epoch of the store (fencing every older writer),
tells the job where the store is and which epoch it runs in, and records how the
submit ended. A retry that re-attaches to a still-running (or finished) driver —
``SparkSubmitOperator``'s durable mode in cluster deploy modes — keeps the epoch of
that driver: opening a new one would turn the live job into its own zombie.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_ckpt_provider.contract import (
    EPOCH_STATE_KEY,
    PLAN_XCOM_KEY,
    RESULT_LINE_PREFIX,
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
from airflow_ckpt_provider.hooks.default_location import JobIdentity
from airflow_ckpt_provider.operators import metrics
from airflow_ckpt_provider.operators.takeover import takeover_of_ended_owner
from airflow_ckpt_provider.store import CheckpointStore, Epoch, EpochFencedError, EpochStatus
from airflow_ckpt_provider.store.owner import OWNER_METADATA_KEY, EpochOwner, MappedInstanceConflictError
from airflow_ckpt_provider.store.rerun import JOB_METADATA_KEY, OnRerun, RerunAction, RerunPlan
from airflow_ckpt_provider.triggers.driver import DriverRef

if TYPE_CHECKING:
    from airflow.sdk import Context


class _CheckpointedSubmitHook(SparkSubmitHook):
    """Calls back into the operator right before every real ``spark-submit`` run.

    Every deploy mode (client, standalone cluster, YARN, Kubernetes) submits through
    ``SparkSubmitHook.submit``; a durable re-attach never does. So this is the one
    place where "a new submit really happens" is known for sure.
    """

    _before_submit: Callable[[], Handoff] | None = None
    #: The driver's ``CKPT_RESULT`` line, when its stdout reaches spark-submit (client mode).
    result_line: str | None = None

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        def tap() -> Iterator[Any]:
            for line in itr:
                text = str(line).strip()
                if RESULT_LINE_PREFIX in text:
                    self.result_line = text
                yield line

        super()._process_spark_submit_log(tap())

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        if self._before_submit is None:  # pragma: no cover - the operator always sets it
            raise RuntimeError("a checkpointed submit needs its operator's before_submit callback")
        handoff = self._before_submit()
        self._conf = {**self._conf, **handoff.spark_conf()}
        secret_env = handoff.secret_env()
        if secret_env:
            if self._is_yarn or self._is_kubernetes:
                # The provider turns env_vars into --conf spark.yarn.appMasterEnv.* /
                # spark.kubernetes.driverEnv.* flags: visible in `ps`. Refuse to ship keys that way.
                self.log.warning(
                    "Not passing store credentials to a %s driver (they would be on the spark-submit "
                    "command line): give the cluster its own S3 credentials (instance role, IRSA, ...)",
                    "YARN" if self._is_yarn else "Kubernetes",
                )
            elif self._env_vars:
                # With env_vars the provider builds the child environment from _env_vars itself.
                self._env_vars = {**self._env_vars, **secret_env}
            else:
                kwargs["env"] = {**os.environ, **(kwargs.get("env") or {}), **secret_env}
        return super().submit(application, **kwargs)


class CheckpointedSparkSubmitOperator(SparkSubmitOperator):
    """Submit a Spark job that checkpoints its progress, so that a retry skips finished keys.

    Takes every ``SparkSubmitOperator`` parameter (cluster modes, durable re-attach,
    ``env_vars``, ...) plus:

    :param checkpoint_uri: the store (``file:///…``, ``/abs/path`` or ``s3://bucket/prefix``).
        Templated. Default: one store per job, shared by every run of the same output:
        ``{[ckpt] base_uri}/{dag_id}/{task_id}/date={logical date}`` (``run={run_id}`` for a run
        without a logical date), or with no base URI under ``$AIRFLOW_HOME/checkpoints``; each
        mapped instance adds ``/map_index={i}`` (its own store, epochs, resume, plan and result).
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

    Before the submit, XCom ``checkpoint_plan`` holds what will be skipped. The return value
    (XCom ``return_value``) holds the store URI, the epoch, ``degraded`` and the job's counters.
    The job gets the store through the Spark confs ``spark.ckpt.*`` and credentials through
    the ``CKPT_STORE_SECRETS`` environment variable of the ``spark-submit`` process only.
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "checkpoint_uri",
        "aws_conn_id",
        "output_roots",
        "on_rerun",
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
        self._ckpt_hook: CheckpointHook | None = None
        self._submitted: Handoff | None = None
        self._reattached = False
        self._detached = False
        self._external_id: Any = None
        self._rerun: RerunPlan | None = None

    # ------------------------------------------------------------------ helpers

    def _owner(self, context: Context) -> EpochOwner:
        map_index = getattr(context.get("ti"), "map_index", None)
        return EpochOwner(self.dag_id, self.task_id, context["run_id"], map_index if isinstance(map_index, int) else -1)

    def _job(self, context: Context) -> JobIdentity:
        return JobIdentity.from_context(context, self.task_id, self.dag_id)

    def checkpoint_hook(self, context: Context) -> CheckpointHook:
        if self._ckpt_hook is None:
            self._ckpt_hook = CheckpointHook.for_task_instance(
                self.checkpoint_uri, self._job(context), aws_conn_id=self.aws_conn_id
            ).with_trusted_output_roots(self._declared_output_roots())
        return self._ckpt_hook

    @staticmethod
    def _refuse_sibling(store: CheckpointStore, owner: EpochOwner, latest: Epoch | None) -> None:
        """Fail fast when another mapped instance of this task and run already uses the store."""
        other = None if latest is None else EpochOwner.from_epoch(latest)
        if latest is not None and owner.sibling_of(other):
            assert other is not None
            raise MappedInstanceConflictError(
                f"{store.uri} already holds the work of map index {other.map_index} of this task and run "
                f"(epoch {latest.number}, {latest.status.value}); map index {owner.map_index} would count "
                "those keys as done. Give each mapped instance its own store: leave checkpoint_uri unset (one "
                "store per map index), or put {{ ti.map_index }} in it. Nothing was changed"
            )

    def _get_hook(self) -> SparkSubmitHook:
        base = super()._get_hook()
        # Rebuild as our subclass with the same arguments: the base class builds its hook in
        # one place, and copying __dict__ keeps every resolved field (connection, deploy mode).
        hook = _CheckpointedSubmitHook.__new__(_CheckpointedSubmitHook)
        hook.__dict__.update(base.__dict__)
        hook._before_submit = self._open_epoch_for_submit
        return hook

    # ------------------------------------------------------------------ the submit

    def _declared_output_roots(self) -> list[str] | None:
        roots = self.output_roots
        if roots is None or roots == "" or roots == []:
            return None
        return [roots] if isinstance(roots, str) else [str(r) for r in roots]

    def _open_epoch_for_submit(self) -> Handoff:
        context = self._context
        if context is None:  # pragma: no cover - execute() always sets it
            raise RuntimeError("submit outside execute()")
        ckpt = self.checkpoint_hook(context)
        store = ckpt.get_store()
        ti = context.get("ti")
        owner = self._owner(context)
        latest = store.current_epoch()
        self._refuse_sibling(store, owner, latest)
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
        epoch = store.begin_epoch(
            owner=owner.key(),
            takeover=self.takeover_open_epoch,
            takeover_epoch=None if took_over is None else int(took_over["epoch"]),
            output_roots=self._declared_output_roots(),
            metadata={
                JOB_METADATA_KEY: self._job(context).key(),
                "dag_id": self.dag_id,
                "task_id": self.task_id,
                "run_id": context["run_id"],
                "map_index": owner.map_index,
                "try_number": getattr(ti, "try_number", None),
                OWNER_METADATA_KEY: owner.to_json(),
                **({"took_over": took_over} if took_over is not None else {}),
            },
        )
        plan = self._plan(store, epoch) | {XCOM_AWS_CONN_ID: self.aws_conn_id, "map_index": owner.map_index}
        if self._rerun is not None:
            plan["rerun"] = self._rerun.to_json()
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

        result_dir = os.path.join(tempfile.gettempdir(), "airflow-ckpt-results")
        os.makedirs(result_dir, mode=0o700, exist_ok=True)
        handoff = Handoff(
            store_uri=store.uri,
            epoch=epoch.number,
            public_options=ckpt.public_store_options,
            secret_options=ckpt.secret_store_options,
            result_path=os.path.join(result_dir, f"{uuid.uuid4().hex}.json"),
        )
        task_state_store = context.get("task_state_store")
        if task_state_store is not None:
            # Read back by a retry that re-attaches to this driver instead of submitting.
            task_state_store.set(
                EPOCH_STATE_KEY,
                {"store_uri": store.uri, "epoch": epoch.number, "result_path": handoff.result_path},
            )
        self._submitted = handoff
        return handoff

    @staticmethod
    def _plan(store: CheckpointStore, epoch: Epoch) -> dict[str, Any]:
        if epoch.base_keys is not None and epoch.base_rows is not None:
            # Counted by begin_epoch from the state it just read: no second pass over every manifest.
            keys, rows = epoch.base_keys, epoch.base_rows
        else:
            progress = store.progress()
            keys, rows = progress.keys_done, progress.rows
        return {
            XCOM_STORE_URI: store.uri,
            "epoch": epoch.number,
            "checkpoints_skipped": len(epoch.base),
            "keys_skipped": keys,
            "rows_skipped": rows,
            "snapshot": epoch.base_snapshot,
        }

    def _reattached_handoff(self, context: Context, store: CheckpointStore) -> Handoff | None:
        """The epoch of the driver a durable retry re-attached to (no submit happened)."""
        recorded: Any = None
        task_state_store = context.get("task_state_store")
        if task_state_store is not None:
            recorded = task_state_store.get(EPOCH_STATE_KEY)
        if isinstance(recorded, Mapping) and recorded.get("store_uri") == store.uri:
            return Handoff(store.uri, int(recorded["epoch"]), {}, {}, str(recorded.get("result_path") or ""))
        current = store.current_epoch()
        if current is not None and current.owner == self._owner(context).key():
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
        status = str(getattr(self._hook, "_driver_status", None) or "").upper()
        return status not in ("FINISHED", "FAILED", "KILLED", "ERROR", "SUCCEEDED")

    def execute(self, context: Context) -> Any:  # the job summary (a dict), pushed as return_value
        self._context = context
        self._submitted = None
        self._reattached = False
        self._detached = False
        self._external_id = None
        started = time.monotonic()
        store = self.checkpoint_hook(context).get_store()
        rerun = store.rerun_plan(self._job(context).key(), OnRerun(str(self.on_rerun).strip().lower()))
        self.log.info("Job %s on %s: %s", self._job(context).key(), store.uri, rerun.describe())
        self._rerun = rerun
        if rerun.action is RerunAction.SKIP:
            return self._skipped(context, store, rerun)
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
                self._end_epoch(store, handoff, EpochStatus.FAILED, read_job_result(handoff.result_path))
            raise
        handoff = self._submitted
        if handoff is None:
            handoff = self._reattached_handoff(context, store)
            metrics.count(metrics.REATTACHES, 1, metrics.task_tags(context))
            if handoff is None:
                raise EpochFencedError(
                    f"the job finished but no epoch of {store.uri} belongs to {self._owner(context).describe()}: "
                    "it was taken over by another submit, so its output is not this task's to commit; "
                    "run the task again"
                )
            self.log.info("Re-attached to the driver of epoch %d: no new epoch was opened", handoff.epoch)
        if self._detached:
            return {
                XCOM_STORE_URI: store.uri,
                XCOM_AWS_CONN_ID: self.aws_conn_id,
                "map_index": self._owner(context).map_index,
                "epoch": handoff.epoch,
                "driver_id": self._external_id,
                # How a sensor asks the cluster whether this driver is still there (triggers/driver.py).
                "driver": DriverRef(
                    conn_id=self._conn_id,
                    external_id=str(self._external_id),
                    deploy_mode=self._deploy_mode,
                    yarn_track_via_rm_api=bool(self._yarn_track_via_rm_api),
                    track_driver_via_k8s_api=bool(self._track_driver_via_k8s_api),
                ).to_json(),
                "detached": True,
                XCOM_DEGRADED: self._epoch_degraded(store, handoff.epoch),
            }
        job_result = read_job_result(handoff.result_path) or self._result_from_log() or {}
        degraded = bool(job_result.get("degraded")) or self._epoch_degraded(store, handoff.epoch)
        self._end_epoch(store, handoff, EpochStatus.SUCCEEDED, job_result)
        summary: dict[str, Any] = {
            **job_result,
            XCOM_STORE_URI: store.uri,
            XCOM_AWS_CONN_ID: self.aws_conn_id,  # not a secret: lets the UI open the same store
            "map_index": self._owner(context).map_index,
            "epoch": handoff.epoch,
            XCOM_DEGRADED: degraded,
            "reattached": self._submitted is None,
            "rerun": None if self._rerun is None else self._rerun.to_json(),
            "duration_seconds": round(time.monotonic() - started, 3),
        }
        tags = metrics.task_tags(context)
        metrics.count(metrics.CHECKPOINTS_SEALED, int(job_result.get("sealed_partitions") or 0), tags)
        metrics.count(metrics.ROWS_WRITTEN, int(job_result.get("rows") or 0), tags)
        if degraded:
            metrics.count(metrics.BREAKER_TRIPS, 1, tags)
            self.log.warning(
                "Epoch %d ran degraded (the store was unreachable for a while, checkpointing stopped): "
                "the job finished, and the commit will keep every file it cannot prove orphaned",
                handoff.epoch,
            )
        self.log.info("Checkpointed job finished: %s", summary)
        return summary

    def _skipped(self, context: Context, store: CheckpointStore, rerun: RerunPlan) -> dict[str, Any]:
        """on_rerun="skip" over committed output: no submit, no epoch; the commit finds it committed."""
        summary = {
            XCOM_STORE_URI: store.uri,
            XCOM_AWS_CONN_ID: self.aws_conn_id,
            "map_index": self._owner(context).map_index,
            "epoch": rerun.live_commit,
            XCOM_DEGRADED: False,
            "rerun": rerun.to_json(),
            "skipped": True,
        }
        self.log.info('on_rerun="skip": commit %s of %s is live; nothing submitted', rerun.live_commit, store.uri)
        return summary

    def _result_from_log(self) -> dict[str, Any] | None:
        hook = self._hook
        line = getattr(hook, "result_line", None)
        result = parse_result_line(line) if line else None
        return None if result is None else flatten_result(result)

    def _epoch_degraded(self, store: CheckpointStore, epoch: int) -> bool:
        try:
            return store.is_degraded(epoch)
        except Exception as exc:  # the store may be the thing that is down
            self.log.warning("Could not read the degraded state of epoch %d: %s", epoch, exc)
            return False

    def _end_epoch(
        self, store: CheckpointStore, handoff: Handoff, status: EpochStatus, result: Mapping[str, Any] | None
    ) -> None:
        try:
            store.end_epoch(handoff.epoch, status=status, summary=dict(result or {}))
        except Exception as exc:
            # An unrecorded end only costs the UI its status; a later epoch supersedes it.
            self.log.warning("Could not record the end of epoch %d (%s): %s", handoff.epoch, status, exc)
        if handoff.result_path and os.path.exists(handoff.result_path):
            os.unlink(handoff.result_path)
