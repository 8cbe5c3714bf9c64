"""``ClearCheckpointsOperator``: reset a checkpoint store from a DAG."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.hooks.locator import TaskStore
from airflow_ckpt_provider.hooks.store_location import store_template_fields
from airflow_ckpt_provider.operators import metrics
from airflow_ckpt_provider.operators.base import CheckpointStoreBaseOperator, kept_output

if TYPE_CHECKING:
    from airflow.sdk import Context


class ClearCheckpointsOperator(CheckpointStoreBaseOperator):
    """Reset a store so that the next run reprocesses every key.

    Opens a new epoch with an empty base (fencing any writer still running), then
    deletes every checkpoint, snapshot and uncommitted output file the store
    recorded. Committed output is never deleted. Idempotent.

    :param checkpoint_uri: the store (templated). Default: the store of ``spark_task_id``
        in this DAG run.
    :param spark_task_id: the ``CheckpointedSparkSubmitOperator`` whose store to clear (templated).
        If it is mapped, a clear mapped the same way clears the store of its own map index, an
        unmapped one the store of every mapped instance (the result lists them).
    :param aws_conn_id: ``aws`` connection for ``s3://`` stores (templated).
    :param output_roots: where uncommitted output may be deleted (templated), with those of
        ``spark_task_id``. Where neither declares any (and ``[ckpt] trusted_output_roots`` is not
        set), output files are kept: the result's ``output_files_kept`` lists them.
    """

    ui_color = "#e8a4a4"

    def execute(self, context: Context) -> dict[str, Any]:
        stores = self.task_stores(context)
        if len(stores) == 1:
            return self._clear(context, stores[0])
        self.log.info("%s is mapped: clearing the stores of its %d instances", self.spark_task_id, len(stores))
        cleared = [self._clear(context, store) for store in stores]
        totals = {
            name: sum(int(c[name]) for c in cleared)
            for name in ("checkpoints_deleted", "files_deleted", "snapshots_deleted", "bytes_freed")
        }
        return {**totals, "stores": cleared, "map_indexes": [c["map_index"] for c in cleared]}

    template_fields: Sequence[str] = store_template_fields("output_roots")

    def __init__(self, *, output_roots: Sequence[str] | str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.output_roots = output_roots

    def _clear(self, context: Context, store: TaskStore) -> dict[str, Any]:
        uri = store.uri
        hook = self.store_hook(uri, context)
        result = hook.clear()
        metrics.count(metrics.CLEARS, 1, metrics.task_tags(context))
        return {
            "checkpoint_uri": uri,
            "aws_conn_id": self.aws_conn_id,
            "map_index": store.map_index,
            "epoch": result.epoch,
            "checkpoints_deleted": len(result.deleted_checkpoints),
            "files_deleted": len(result.deleted_files),
            "snapshots_deleted": len(result.deleted_snapshots),
            "bytes_freed": result.bytes_freed,
            **kept_output(hook, result.undeclared_output_files),
        }
