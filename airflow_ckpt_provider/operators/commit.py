"""``CheckpointCommitOperator``: make a finished job's output authoritative and delete its orphans."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.contract import XCOM_DEGRADED
from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.locator import TaskStore
from airflow_ckpt_provider.hooks.store_location import store_template_fields
from airflow_ckpt_provider.operators import metrics
from airflow_ckpt_provider.operators.base import CheckpointStoreBaseOperator, as_bool, kept_output
from airflow_ckpt_provider.store import RetentionPolicy, UnknownFiles
from airflow_ckpt_provider.store.errors import RefusedError

if TYPE_CHECKING:
    from airflow.sdk import Context


def top_directories(paths: Iterable[str]) -> list[str]:
    """The directories holding ``paths``, without those inside another one of them."""
    parents = sorted({path.rsplit("/", 1)[0] for path in paths if "/" in path})
    tops: list[str] = []
    for parent in parents:
        if not any(parent.startswith(top.rstrip("/") + "/") for top in tops):
            tops.append(parent)
    return tops


def manual_trigger_hint(context: Context) -> str:
    """What to say beside unknown files when this run was triggered by hand at a time of day: its logical
    date is then the trigger time, so it is another job than the day's earlier runs, whose files are
    unknown to its store (docs/airflow.md, "Re-running a day"). Empty for every other run."""
    dag_run = context.get("dag_run")
    logical = getattr(dag_run, "logical_date", None)
    run_type = str(getattr(dag_run, "run_type", "") or "").rsplit(".", 1)[-1].lower()
    if run_type != "manual" or not isinstance(logical, dt.datetime):
        return ""
    utc = logical.astimezone(dt.UTC) if logical.tzinfo else logical
    if (utc.hour, utc.minute, utc.second, utc.microsecond) == (0, 0, 0, 0):
        return ""
    return (
        f" This run was triggered by hand with logical date {utc.isoformat()}: a manual trigger's logical date is "
        "its trigger time unless one is given, so it is another job than the runs of the same day before it, and "
        "files they wrote are unknown to its store. To re-run a day, clear that day's run, or trigger with the "
        "day's logical date."
    )


class CheckpointCommitOperator(CheckpointStoreBaseOperator):
    """Commit the latest epoch of a store, then apply the retention policy.

    Phase 1 writes the authoritative list of output files (every file of every valid
    checkpoint, after checking that their keys are disjoint) and marks the checkpoints
    committed; phase 2 deletes orphans: files this store's writers recorded that no
    valid checkpoint owns (failed, duplicate and zombie attempts) and unsealed
    checkpoint directories. Files under the output roots that no writer of the store
    recorded are never deleted: they fail the commit with ``RefusedError`` (``unknown_output_files``)
    before anything changes (a reader would see them beside the committed files),
    unless ``unknown_files="keep"``. Then
    ``delete_after_success`` deletes the checkpoint data, or ``retain`` compacts the
    committed keys into a snapshot for incremental runs. Idempotent: a retry after a
    crash finishes the job.

    :param checkpoint_uri: the store (templated). Default: the store ``spark_task_id`` used.
    :param spark_task_id: the ``CheckpointedSparkSubmitOperator`` of this DAG run whose output
        to commit; its XCom supplies the store and the ``degraded`` flag (templated). If that
        task is mapped, a commit mapped the same way commits the store of its own map index, an
        unmapped one the store of every mapped instance (one commit each; the summary lists them).
    :param aws_conn_id: ``aws`` connection for ``s3://`` stores (templated).
    :param output_roots: output directories to sweep for orphans (templated). Default: the
        roots the writers recorded, within the ``output_roots`` of ``spark_task_id``. Where
        neither task declares any (and ``[ckpt] trusted_output_roots`` is not set), no output
        file is deleted: the summary's ``output_files_kept`` lists the orphans kept.
    :param retention_policy: ``delete_after_success`` or ``retain`` (default ``[ckpt]
        retention_policy``).
    :param unknown_files: ``fail`` (default) or ``keep``: what to do with files under the output
        roots that no run of this store wrote, and with live output of earlier commits it cannot attribute
        (``earlier_output_live``, store/rerun.py) (templated). ``keep`` commits anyway and reports them.
    :param degraded: the run was degraded (checkpointing was off for a while): keep every
        file that cannot be proven orphaned. Templated. Default: the submit task's XCom.
        A degraded epoch recorded in the store counts as well.

    Pushes the commit summary (counts only). With ``outlets=[Asset(...)]`` the asset event
    carries that summary as its ``extra``, so downstream DAGs see what was committed. With
    ``apache-airflow-providers-openlineage`` installed, its events carry the output roots as
    output datasets and a ``checkpointCommit`` run facet (committed, skipped, deleted).
    """

    template_fields: Sequence[str] = store_template_fields(
        "output_roots", "retention_policy", "degraded", "unknown_files"
    )
    ui_color = "#a4d8a4"

    def __init__(
        self,
        *,
        output_roots: Sequence[str] | str | None = None,
        retention_policy: RetentionPolicy | str | None = None,
        degraded: bool | str | None = None,
        unknown_files: UnknownFiles | str = UnknownFiles.FAIL,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.unknown_files = unknown_files
        self.output_roots = output_roots
        self.retention_policy = retention_policy
        self.degraded = degraded
        self._store_summaries: list[dict[str, Any]] = []

    def _degraded(self, store: TaskStore) -> bool:
        if self.degraded is not None and self.degraded != "":
            return as_bool(self.degraded)
        return bool(store.submitted and store.submitted.get(XCOM_DEGRADED))

    def _output_roots(self) -> list[str] | None:
        if not self.output_roots:
            return None
        if isinstance(self.output_roots, str):
            return [self.output_roots]
        return [str(root) for root in self.output_roots]

    def execute(self, context: Context) -> dict[str, Any]:
        config = CheckpointConfig.load()
        policy = RetentionPolicy(self.retention_policy or config.retention_policy)
        stores = self.task_stores(context)
        self._store_summaries = []
        if len(stores) == 1:
            summary = self._commit(context, stores[0], config, policy)
        else:
            self.log.info(
                "%s is mapped: committing the stores of its %d instances, one after the other",
                self.spark_task_id,
                len(stores),
            )
            summary = self._combined([self._commit(context, store, config, policy) for store in stores])
        outlet_events = context.get("outlet_events")
        if outlet_events is not None:
            for outlet in self.outlets or []:
                outlet_events[outlet].extra = dict(summary)
        return summary

    @staticmethod
    def _combined(summaries: list[dict[str, Any]]) -> dict[str, Any]:
        """One summary for the stores of every mapped instance: totals, and each store's own."""
        totals = {
            name: sum(int(s.get(name) or 0) for s in summaries)
            for name in ("files_committed", "rows_committed", "orphans_deleted", "bytes_freed", "unknown_files")
        }
        return {**totals, "stores": summaries, "map_indexes": [s["map_index"] for s in summaries]}

    def _commit(
        self, context: Context, task_store: TaskStore, config: CheckpointConfig, policy: RetentionPolicy
    ) -> dict[str, Any]:
        uri = task_store.uri
        hook = self.store_hook(uri, context, config)
        store = hook.get_store()
        degraded = self._degraded(task_store)

        started = time.monotonic()
        try:
            result = store.commit(
                self._output_roots(),
                degraded=degraded,
                unknown_files=UnknownFiles(str(self.unknown_files).strip().lower()),
            )
        except RefusedError as exc:
            hint = manual_trigger_hint(context)
            if exc.reason != "unknown_output_files" or not hint:
                raise
            raise RefusedError(f"{exc}{hint}", reason=exc.reason, paths=exc.paths) from exc
        removed = store.housekeeping.cleanup(policy)
        elapsed = dt.timedelta(seconds=time.monotonic() - started)

        summary = {
            **result.summary(),
            "checkpoint_uri": uri,
            "aws_conn_id": self.aws_conn_id,
            "map_index": task_store.map_index,
            "output_roots": self._output_roots() or top_directories(f.path for f in result.committed_files),
            "keys_skipped_on_resume": int((task_store.plan or {}).get("keys_skipped") or 0),
            "retention_policy": policy.value,
            "checkpoints_removed_by_retention": len(removed),
            "duration_seconds": round(elapsed.total_seconds(), 3),
            **kept_output(hook, result.undeclared_output_files),
        }
        self._store_summaries.append(summary)
        self.log.info(
            "Committed epoch %d of %s%s%s: %d files (%d rows) authoritative, %d orphans deleted, %d bytes "
            "freed, %d unknown files kept, %d kept (degraded); %s removed %d checkpoints",
            result.epoch,
            uri,
            f" (map index {task_store.map_index})" if task_store.map_index >= 0 else "",
            " (already committed)" if result.already_committed else "",
            summary["files_committed"],
            summary["rows_committed"],
            summary["orphans_deleted"],
            summary["bytes_freed"],
            summary["unknown_files"],
            summary["kept_unprovable"],
            policy.value,
            len(removed),
        )
        if result.unknown_files:
            self.log.warning(
                "Files under the output roots that no writer of this store recorded (kept: %s): %s",
                "the run was degraded" if result.degraded else 'unknown_files="keep"',
                list(result.unknown_files)[:20],
            )

        tags = metrics.task_tags(context)
        metrics.duration(metrics.COMMIT_DURATION, elapsed, tags)
        metrics.count(metrics.ORPHANS_DELETED, summary["orphans_deleted"], tags)
        metrics.count(metrics.BYTES_FREED, summary["bytes_freed"], tags)
        metrics.count(metrics.FILES_COMMITTED, summary["files_committed"], tags)
        metrics.count(metrics.UNKNOWN_FILES, summary["unknown_files"], tags)
        return summary

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage (called by the provider's listener after ``execute``): the output roots
        as output datasets, and the ``checkpointCommit`` run facet. None without the provider."""
        try:
            from airflow_ckpt_provider.operators.openlineage import commit_lineage
        except ImportError:  # apache-airflow-providers-openlineage is not installed
            return None
        return commit_lineage(self._store_summaries)
