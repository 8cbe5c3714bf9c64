"""``CheckpointSensor``: wait until a checkpointed job has sealed every partition, or committed."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook
from airflow_ckpt_provider.sensors.base import CheckpointStoreBaseSensor
from airflow_ckpt_provider.store.errors import IncompleteRunError
from airflow_ckpt_provider.triggers.checkpoint import (
    CheckpointTrigger,
    ProgressWatch,
    WaitFor,
    describe,
    is_done,
    progress_summary,
)
from airflow_ckpt_provider.triggers.driver import DriverRef, driver_state

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
    :param watch_driver: when ``spark_task_id`` submitted detached (``wait_for_completion=False``),
        ask the cluster for its driver's state at every poll, as the Spark provider does (the
        standalone master's REST status, YARN's ResourceManager, the Kubernetes driver pod), and
        fail as soon as the driver ended without the store being done, with the driver's state and
        the store's progress (default True).
    :param no_progress_timeout: fail when the store's counts (epoch, sealed partitions, keys done)
        have not moved for this long (seconds or a timedelta; default None: wait up to ``timeout``).
        For launchers the sensor cannot ask (client mode, a job submitted elsewhere).

    Returns (XCom) the progress summary at the time the condition held.
    """

    ui_color = "#c8d8f0"

    def __init__(
        self,
        *,
        wait_for: WaitFor | str = WaitFor.PARTITIONS,
        deferrable: bool = True,
        poke_interval: dt.timedelta | float = 30,
        watch_driver: bool = True,
        no_progress_timeout: dt.timedelta | float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(poke_interval=poke_interval, **kwargs)
        self.wait_for = WaitFor(wait_for)
        self.deferrable = deferrable
        self.watch_driver = watch_driver
        self.no_progress_timeout = (
            no_progress_timeout.total_seconds()
            if isinstance(no_progress_timeout, dt.timedelta)
            else None
            if no_progress_timeout is None
            else float(no_progress_timeout)
        )
        self._resolved_uri: str | None = None
        self._summary: dict[str, Any] | None = None
        self._driver: DriverRef | None = None
        self._watch: ProgressWatch | None = None

    def _uri(self, context: Context) -> str:
        if self._resolved_uri is None:
            self._resolved_uri = self.store_uri(context)
        return self._resolved_uri

    def _driver_of_submit(self, context: Context) -> DriverRef | None:
        """The detached driver of ``spark_task_id`` (None: not detached, or not ours to watch)."""
        if not self.watch_driver or self.checkpoint_uri:
            return None
        result = self.submit_task_result(context)
        return DriverRef.from_json((result or {}).get("driver")) if result and result.get("detached") else None

    def poke(self, context: Context) -> bool:
        hook = CheckpointHook(self._uri(context), aws_conn_id=self.aws_conn_id)
        progress = hook.get_progress()
        summary = progress_summary(progress)
        self.log.info("Checkpoint progress: %s", describe(summary))
        self._summary = summary
        if is_done(progress, self.wait_for):
            return True
        if self._watch is None:
            self._watch = ProgressWatch(self.wait_for, self.no_progress_timeout)
        state = None
        if self._driver is not None:
            try:
                state = driver_state(self._driver)
                self.log.info("Driver %s: %s", self._driver.external_id, state.status)
            except Exception as exc:  # the launcher is unreachable: keep waiting
                self.log.warning("Could not read the state of driver %s: %s", self._driver.external_id, exc)
        driver_id = "" if self._driver is None else self._driver.external_id
        if self._watch.reason_to_stop(summary, state, driver_id) is not None:
            progress = hook.get_progress()  # the driver may have sealed its last partitions as it ended
            if is_done(progress, self.wait_for):
                self._summary = progress_summary(progress)
                return True
            raise IncompleteRunError(
                self._watch.final_reason(progress_summary(progress), state, driver_id), reason="job_failed"
            )
        return False

    def execute(self, context: Context) -> Any:
        self._driver = self._driver_of_submit(context)
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
                driver=None if self._driver is None else self._driver.to_json(),
                no_progress_timeout=self.no_progress_timeout,
            ),
            method_name="execute_complete",
            timeout=dt.timedelta(seconds=self.timeout),
        )
        return None  # not reached: defer() raises

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        if not event or event.get("status") != "done":
            message = (event or {}).get("message", "the trigger ended without an event")
            raise IncompleteRunError(
                f"waiting for {self.checkpoint_uri or self.spark_task_id} failed: {message}", reason="job_failed"
            )
        summary: dict[str, Any] = event["progress"]
        self.log.info("Checkpoint condition %r met: %s", self.wait_for.value, describe(summary))
        return summary
