"""``CheckpointTrigger``: waits in the triggerer until a store's job has sealed or committed."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_ckpt_provider.store import EpochStatus, Progress


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
    epoch = progress.epoch
    if epoch is None:
        return False  # nothing submitted to this store yet
    if wait_for is WaitFor.COMMITTED:
        return progress.committed
    if epoch.status in (EpochStatus.SUCCEEDED, EpochStatus.COMMITTED):
        return True
    expected = progress.expected_partitions
    return expected is not None and progress.sealed_partitions >= expected


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

    Events: ``{"status": "done", "progress": {...}}`` or ``{"status": "error", "message": ...}``.
    """

    def __init__(
        self,
        checkpoint_uri: str,
        wait_for: str = WaitFor.PARTITIONS.value,
        aws_conn_id: str | None = None,
        poll_interval: float = 30.0,
    ) -> None:
        super().__init__()
        self.checkpoint_uri = checkpoint_uri
        self.wait_for = WaitFor(wait_for)
        self.aws_conn_id = aws_conn_id
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "checkpoint_uri": self.checkpoint_uri,
                "wait_for": self.wait_for.value,
                "aws_conn_id": self.aws_conn_id,
                "poll_interval": self.poll_interval,
            },
        )

    def _poll(self) -> Progress:
        # Imported here: hooks pull in the Airflow config, which the triggerer has loaded anyway.
        from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook

        return CheckpointHook(self.checkpoint_uri, aws_conn_id=self.aws_conn_id).get_progress()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        last = ""
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
            await asyncio.sleep(self.poll_interval)
