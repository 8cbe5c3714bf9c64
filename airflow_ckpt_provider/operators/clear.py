"""``ClearCheckpointsOperator``: reset a checkpoint store from a DAG."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.operators import metrics
from airflow_ckpt_provider.operators.base import CheckpointStoreBaseOperator

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
    :param aws_conn_id: ``aws`` connection for ``s3://`` stores (templated).
    """

    ui_color = "#e8a4a4"

    def execute(self, context: Context) -> dict[str, Any]:
        hook = self.checkpoint_hook(context)
        uri = hook.uri
        result = hook.clear()
        metrics.count(metrics.CLEARS, 1, metrics.task_tags(context))
        return {
            "checkpoint_uri": uri,
            "aws_conn_id": self.aws_conn_id,
            "epoch": result.epoch,
            "checkpoints_deleted": len(result.deleted_checkpoints),
            "files_deleted": len(result.deleted_files),
            "snapshots_deleted": len(result.deleted_snapshots),
            "bytes_freed": result.bytes_freed,
        }
