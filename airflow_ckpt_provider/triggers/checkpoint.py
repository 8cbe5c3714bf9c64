"""``CheckpointTrigger``: waits in the triggerer until a store's job has sealed or committed.

The triggerer imports this module on its event loop (``create_triggers``), so it imports
neither the store (pyarrow) nor a hook at module level: 4.5 s of imports on a loaded 2-core
machine blocked every other trigger. Both are imported by the first poll, in a thread.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_ckpt_provider.triggers.driver import DriverRef, DriverState, driver_state

if TYPE_CHECKING:
    from airflow_ckpt_provider.store import Progress


class WaitFor(enum.StrEnum):
    """What "done" means for a sensor or trigger.

    ``PARTITIONS``: the current epoch sealed every partition its job expects (or the
    submit ended successfully). ``COMMITTED``: the current epoch is committed.
    """

    PARTITIONS = "partitions"
    COMMITTED = "committed"


def progress_summary(progress: Progress) -> dict[str, Any]:
    """What the sensor logs and returns: counts and states only."""
    epoch = progress.epoch
    return {
        "checkpoint_uri": progress.store_uri,
        "epoch": None if epoch is None else epoch.number,
        "epoch_status": None if epoch is None else epoch.status.value,
        "sealed_partitions": progress.sealed_partitions,
        "expected_partitions": progress.expected_partitions,
        "keys_done": progress.keys_done,
        "committed": progress.committed,
        "degraded": bool(epoch is not None and epoch.number in progress.degraded_epochs),
    }


def is_done(progress: Progress, wait_for: WaitFor) -> bool:
    from airflow_ckpt_provider.store import EpochStatus  # loaded already: by the poll that read ``progress``

    epoch = progress.epoch
    if epoch is None:
        return False  # nothing submitted to this store yet
    if wait_for is WaitFor.COMMITTED:
        return progress.committed
    if epoch.status in (EpochStatus.SUCCEEDED, EpochStatus.COMMITTED):
        return True
    expected = progress.expected_partitions
    return expected is not None and progress.sealed_partitions >= expected


class ProgressWatch:
    """Decides, poll after poll, whether waiting for the store still makes sense.

    Two reasons to stop before the condition holds: the driver is gone (its launcher says it
    ended without success, or, when waiting for partitions, that it finished while they are
    not all sealed: nothing more will reach the store), and no progress (the store's counts
    did not move for ``no_progress_timeout`` seconds: for launchers that cannot tell).
    Shared by the sensor's poke and the trigger, so both give up for the same reasons.
    """

    def __init__(
        self, wait_for: WaitFor, no_progress_timeout: float | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.wait_for = wait_for
        self.no_progress_timeout = no_progress_timeout
        self._clock = clock
        self._last: tuple[Any, ...] | None = None
        self._since = clock()

    def reason_to_stop(self, summary: dict[str, Any], driver: DriverState | None, driver_id: str = "") -> str | None:
        """Why waiting should end now (the message of the failure), or None to keep waiting."""
        moved = (summary["epoch"], summary["epoch_status"], summary["sealed_partitions"], summary["keys_done"])
        if moved != self._last:
            self._last, self._since = moved, self._clock()
        return self._reason(summary, driver, driver_id)

    def final_reason(self, summary: dict[str, Any], driver: DriverState | None, driver_id: str = "") -> str:
        """The failure's message once :meth:`reason_to_stop` said stop, with the store read again."""
        return self._reason(summary, driver, driver_id, force=True) or describe(summary)

    def _reason(
        self, summary: dict[str, Any], driver: DriverState | None, driver_id: str, force: bool = False
    ) -> str | None:
        now = self._clock()
        if driver is not None and (driver.gone or (driver.succeeded and self.wait_for is WaitFor.PARTITIONS)):
            ended = "ended" if driver.gone else "finished"
            return (
                f"the Spark driver {driver_id} {ended} with state {driver.status} before the store was done: "
                f"{describe(summary)}. Nothing more will reach the store: retry the submit task (it resumes "
                "from the sealed partitions), then this task"
            )
        if self.no_progress_timeout is not None and (force or now - self._since >= self.no_progress_timeout):
            return (
                f"no progress for {now - self._since:.0f} s (no_progress_timeout={self.no_progress_timeout:g} s): "
                f"{describe(summary)}. Check the job's driver; a retry of the submit task resumes from the "
                "sealed partitions"
            )
        return None


def describe(summary: dict[str, Any]) -> str:
    if summary["epoch"] is None:
        return f"{summary['checkpoint_uri']}: no epoch yet (the job has not started)"
    expected = summary["expected_partitions"]
    return (
        f"{summary['checkpoint_uri']}: epoch {summary['epoch']} ({summary['epoch_status']}), "
        f"{summary['sealed_partitions']}/{'?' if expected is None else expected} partitions sealed, "
        f"{summary['keys_done']} keys done, {'committed' if summary['committed'] else 'not committed'}"
    )


class CheckpointTrigger(BaseTrigger):
    """Polls a checkpoint store until ``wait_for`` holds, then fires one event.

    The store API is synchronous, so every poll runs in a worker thread
    (``asyncio.to_thread``) and never blocks the triggerer's event loop. Credentials are
    not among the serialized kwargs (they would be stored in the metadata DB): the
    trigger resolves ``aws_conn_id`` itself.

    With ``driver`` (a :class:`DriverRef` as JSON, recorded by a detached submit) each poll
    that finds the store not done also asks the launcher for the driver's state, and fails
    fast when the driver is gone; ``no_progress_timeout`` (seconds) fails when the store's
    counts stop moving that long (see :class:`ProgressWatch`).

    Events: ``{"status": "done", "progress": {...}}`` or ``{"status": "error", "message": ...}``
    (with ``progress`` and ``driver_status`` when known).
    """

    def __init__(
        self,
        checkpoint_uri: str,
        wait_for: str = WaitFor.PARTITIONS.value,
        aws_conn_id: str | None = None,
        poll_interval: float = 30.0,
        driver: dict[str, Any] | None = None,
        no_progress_timeout: float | None = None,
    ) -> None:
        super().__init__()
        self.checkpoint_uri = checkpoint_uri
        self.wait_for = WaitFor(wait_for)
        self.aws_conn_id = aws_conn_id
        self.poll_interval = poll_interval
        self.driver = driver
        self.no_progress_timeout = no_progress_timeout

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "checkpoint_uri": self.checkpoint_uri,
                "wait_for": self.wait_for.value,
                "aws_conn_id": self.aws_conn_id,
                "poll_interval": self.poll_interval,
                "driver": self.driver,
                "no_progress_timeout": self.no_progress_timeout,
            },
        )

    def _poll(self) -> Progress:
        # Imported here: hooks pull in the Airflow config, which the triggerer has loaded anyway.
        from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook

        return CheckpointHook(self.checkpoint_uri, aws_conn_id=self.aws_conn_id).get_progress()

    def _driver_state(self, driver: DriverRef) -> DriverState | None:
        try:
            return driver_state(driver)
        except Exception as exc:  # the launcher is unreachable: keep waiting, no_progress_timeout still holds
            self.log.warning("Could not read the state of driver %s: %s", driver.external_id, exc)
            return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        last = ""
        driver = DriverRef.from_json(self.driver)
        watch = ProgressWatch(self.wait_for, self.no_progress_timeout)
        while True:
            try:
                progress = await asyncio.to_thread(self._poll)
            except Exception as exc:
                yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
                return
            summary = progress_summary(progress)
            line = describe(summary)
            if line != last:
                self.log.info("%s", line)
                last = line
            if is_done(progress, self.wait_for):
                yield TriggerEvent({"status": "done", "progress": summary})
                return
            state = None if driver is None else await asyncio.to_thread(self._driver_state, driver)
            driver_id = "" if driver is None else driver.external_id
            if watch.reason_to_stop(summary, state, driver_id) is not None:
                # The driver may have sealed its last partitions right before it ended: read once more.
                progress = await asyncio.to_thread(self._poll)
                if is_done(progress, self.wait_for):
                    yield TriggerEvent({"status": "done", "progress": progress_summary(progress)})
                    return
                reason = watch.final_reason(progress_summary(progress), state, driver_id)
                yield TriggerEvent(
                    {
                        "status": "error",
                        "message": reason,
                        "progress": progress_summary(progress),
                        "driver_status": None if state is None else state.status,
                    }
                )
                return
            await asyncio.sleep(self.poll_interval)
