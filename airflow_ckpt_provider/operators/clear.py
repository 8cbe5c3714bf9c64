"""``ClearCheckpointsOperator``: reset a checkpoint store from a DAG."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook
from airflow_ckpt_provider.hooks.store_location import resolve_store_uri
from airflow_ckpt_provider.operators import metrics

if TYPE_CHECKING:
    from airflow.sdk import Context


class ClearCheckpointsOperator(BaseOperator):
    """Reset a store so that the next run reprocesses every key.

    Opens a new epoch with an empty base (fencing any writer still running), then
    deletes every checkpoint, snapshot and uncommitted output file the store
    recorded. Committed output is never deleted. Idempotent.

    :param checkpoint_uri: the store (templated). Default: the store of ``spark_task_id``
        in this DAG run.
    :param spark_task_id: the ``CheckpointedSparkSubmitOperator`` whose store to clear.
    :param aws_conn_id: ``aws`` connection for ``s3://`` stores.
    """

    template_fields: Sequence[str] = ("checkpoint_uri",)
    ui_color = "#e8a4a4"

    def __init__(
        self,
        *,
        checkpoint_uri: str | None = None,
        spark_task_id: str | None = None,
        aws_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.checkpoint_uri = checkpoint_uri
        self.spark_task_id = spark_task_id
        self.aws_conn_id = aws_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        uri = resolve_store_uri(context, self.checkpoint_uri, self.spark_task_id)
        result = CheckpointHook(uri, aws_conn_id=self.aws_conn_id).clear()
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
