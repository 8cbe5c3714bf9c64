"""CheckpointTrigger's own loop, on a real local store written while it waits.

Run in an asyncio loop in this process, as the triggerer runs it: ``no_progress_timeout``
ends a wait whose store stopped moving (with the progress in the message), and progress
keeps the wait going; the trigger never holds the event loop (store reads run in a thread,
and loading the trigger imports no store).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.store import CheckpointStore, new_checkpoint_id, open_store
from airflow_ckpt_provider.triggers.checkpoint import CheckpointTrigger

pytestmark = pytest.mark.airflow


def _seal(store: CheckpointStore, epoch: int, partition: int) -> None:
    cid = new_checkpoint_id()
    store.stage_keys(cid, [partition * 10 + i for i in range(10)])
    store.checkpoint(cid, epoch=epoch, partition=partition)


def _store(tmp_path: Path, expected: int, sealed: int) -> tuple[CheckpointStore, int]:
    store = open_store(f"file://{tmp_path / 'store'}")
    epoch = store.epochs.begin(owner="a detached job").number
    store.epochs.set_expected_partitions(epoch, expected)
    for partition in range(sealed):
        _seal(store, epoch, partition)
    return store, epoch


async def _first_event(trigger: CheckpointTrigger, timeout: float) -> dict[str, Any]:
    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    return await asyncio.wait_for(first(), timeout)


def test_no_progress_timeout_ends_the_wait_with_the_progress(tmp_path: Path) -> None:
    store, _ = _store(tmp_path, expected=3, sealed=1)
    trigger = CheckpointTrigger(store.uri, poll_interval=0.2, no_progress_timeout=1.0)
    started = time.monotonic()
    event = asyncio.run(_first_event(trigger, timeout=30))
    assert event["status"] == "error", event
    assert "no progress for" in event["message"] and "1/3 partitions sealed" in event["message"]
    assert event["progress"]["sealed_partitions"] == 1 and event["driver_status"] is None
    assert 1.0 <= time.monotonic() - started < 10
    assert CheckpointTrigger(**trigger.serialize()[1]).no_progress_timeout == 1.0  # survives the triggerer's DB


def test_progress_keeps_the_wait_going_past_no_progress_timeout(tmp_path: Path) -> None:
    store, epoch = _store(tmp_path, expected=4, sealed=0)
    trigger = CheckpointTrigger(store.uri, poll_interval=0.1, no_progress_timeout=1.5)

    def seal_slowly() -> None:  # 4 partitions over ~3 s: longer than the timeout, never idle that long
        for partition in range(4):
            time.sleep(0.75)
            _seal(store, epoch, partition)

    writer = threading.Thread(target=seal_slowly)
    writer.start()
    event = asyncio.run(_first_event(trigger, timeout=60))
    writer.join()
    assert event["status"] == "done", event
    assert event["progress"]["sealed_partitions"] == 4


def test_loading_the_trigger_imports_no_store_on_the_event_loop() -> None:
    """The triggerer imports a trigger's module on its event loop: ours must not pull in the
    store (pyarrow) or a hook there (4.5 s on a loaded machine blocked every other trigger)."""
    probe = (
        "import sys, airflow.triggers.base\n"
        "before = set(sys.modules)\n"
        "import airflow_ckpt_provider.triggers.checkpoint\n"
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in "
        "('pyarrow', 'boto3', 'botocore', 'pandas') or m.startswith('airflow_ckpt_provider.store') "
        "or m.startswith('airflow_ckpt_provider.hooks')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_the_event_loop_stays_responsive_while_the_trigger_reads_a_large_store(tmp_path: Path) -> None:
    """Every store read runs in a thread: a heartbeat on the loop never waits for a whole poll."""
    store = open_store(f"file://{tmp_path / 'store'}")
    epoch = store.epochs.begin(owner="a detached job").number
    store.epochs.set_expected_partitions(epoch, 10_000)
    for partition in range(300):  # a poll then reads 300 manifests: long enough to see a blocked loop
        _seal(store, epoch, partition)
    trigger = CheckpointTrigger(store.uri, poll_interval=0.0, no_progress_timeout=None)
    polls: list[float] = []
    poll = trigger._poll

    def timed_poll() -> Any:
        started = time.monotonic()
        try:
            return poll()
        finally:
            polls.append(time.monotonic() - started)

    trigger._poll = timed_poll  # type: ignore[method-assign]

    async def main() -> float:
        longest_gap = 0.0

        async def heartbeat() -> None:
            nonlocal longest_gap
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.01)
                now = time.monotonic()
                longest_gap = max(longest_gap, now - last)
                last = now

        async def wait() -> None:
            async for _ in trigger.run():
                return

        beat = asyncio.create_task(heartbeat())
        waiting = asyncio.create_task(wait())
        while len(polls) < 3:
            await asyncio.sleep(0.05)
        waiting.cancel()
        beat.cancel()
        return longest_gap

    longest_gap = asyncio.run(main())
    # Were a poll run on the loop, the heartbeat would wait for all of it.
    assert longest_gap < 0.5 * max(polls), (longest_gap, polls)
