"""``CheckpointSensor``: wait until a checkpointed job has sealed every partition, or committed."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook
from airflow_ckpt_provider.sensors.base import CheckpointStoreBaseSensor
from airflow_ckpt_provider.store import CheckpointError
from airflow_ckpt_provider.triggers.checkpoint import (
    CheckpointTrigger,
    WaitFor,
    describe,
    is_done,
    progress_summary,
)

if TYPE_CHECKING:
    from airflow.sdk import Context


class CheckpointSensor(CheckpointStoreBaseSensor):
    """Wait for a checkpointed Spark job watched through its store.

    Useful for a job submitted in cluster mode, or by another DAG or system: the
    sensor reads only the store, never Spark. It pokes once first and defers to
    :class:`CheckpointTrigger` (freeing the worker slot) only if not done yet.
    Each poke logs the progress (sealed/expected partitions, keys done).

    :param checkpoint_uri: the store (templated). Default: the store of ``spark_task_id``.
    :param spark_task_id: a ``CheckpointedSparkSubmitOperator`` of this DAG run (templated; if it
        is mapped, map the sensor too: each instance watches the store of its map index).
    :param aws_conn_id: ``aws`` connection for ``s3://`` stores (templated).
    :param wait_for: ``"partitions"`` (every expected partition of the current epoch sealed)
        or ``"committed"``. Named ``wait_for`` because ``mode`` is the sensor mode
        (poke/reschedule) of every Airflow sensor.
    :param deferrable: wait in the triggerer instead of a worker slot (default True).

    Returns (XCom) the progress summary at the time the condition held.
    """

    ui_color = "#c8d8f0"

    def __init__(
        self,
        *,
        wait_for: WaitFor | str = WaitFor.PARTITIONS,
        deferrable: bool = True,
        poke_interval: dt.timedelta | float = 30,
        **kwargs: Any,
    ) -> None:
        super().__init__(poke_interval=poke_interval, **kwargs)
        self.wait_for = WaitFor(wait_for)
        self.deferrable = deferrable
        self._resolved_uri: str | None = None
        self._summary: dict[str, Any] | None = None

    def _uri(self, context: Context) -> str:
        if self._resolved_uri is None:
            self._resolved_uri = self.store_uri(context)
        return self._resolved_uri

    def poke(self, context: Context) -> bool:
        progress = CheckpointHook(self._uri(context), aws_conn_id=self.aws_conn_id).get_progress()
        summary = progress_summary(progress)
        self.log.info("Checkpoint progress: %s", describe(summary))
        self._summary = summary
        return is_done(progress, self.wait_for)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            super().execute(context)
            return self._summary
        if self.poke(context):
            return self._summary
        self.defer(
            trigger=CheckpointTrigger(
                checkpoint_uri=self._uri(context),
                wait_for=self.wait_for.value,
                aws_conn_id=self.aws_conn_id,
                poll_interval=self.poke_interval,
            ),
            method_name="execute_complete",
            timeout=dt.timedelta(seconds=self.timeout),
        )
        return None  # not reached: defer() raises

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        if not event or event.get("status") != "done":
            message = (event or {}).get("message", "the trigger ended without an event")
            raise CheckpointError(f"waiting for {self.checkpoint_uri or self.spark_task_id} failed: {message}")
        summary: dict[str, Any] = event["progress"]
        self.log.info("Checkpoint condition %r met: %s", self.wait_for.value, describe(summary))
        return summary
