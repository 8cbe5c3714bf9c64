"""When compaction fell behind (docs/store-api.md, "The loose tail"), on both backends.

The Spark driver folds sealed manifests into segments in the background; when it is killed,
its tasks' manifests stay loose and every reader pays one read each. These tests seal through
the public store API with the driver's compaction paused by a failpoint, drop the driver (a
SIGKILL leaves nothing behind but what it wrote), then resume: ``begin_epoch`` and the done
keys. Work is counted in requests through the object layer, never timed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider import failpoints
from airflow_ckpt_provider.store import CheckpointStore
from tests.store.conftest import Backend
from tests.store.helpers import begin, done_keys, write_task

ROOT = Path(__file__).resolve().parents[2]

KEYS_PER_TASK = 3
PAUSE = "store.compact.background"


@pytest.fixture(autouse=True)
def _no_failpoints() -> Iterator[None]:
    yield
    failpoints.disable_all()


def loose_count(backend: Backend) -> int:
    return len(backend.store_blobs().list_dirs("checkpoints/"))


def seal_tasks(store: CheckpointStore, backend: Backend, epoch: int, count: int, *, threads: int = 1) -> list[str]:
    """``count`` tasks sealed on ``threads`` threads; their checkpoint ids."""

    def one(index: int) -> str:
        keys = list(range(index * KEYS_PER_TASK, (index + 1) * KEYS_PER_TASK))
        return write_task(store, backend, epoch=epoch, partition=index, keys=keys)[0]

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, range(count)))


def requests_of(store: CheckpointStore, action: Any) -> tuple[Any, int]:
    before = store.blobs.request_count
    value = action()
    return value, store.blobs.request_count - before


DRIVER = textwrap.dedent(
    """
    import json, sys, time
    from airflow_ckpt_provider.store import open_store

    store = open_store(sys.argv[1], **json.loads(sys.argv[2]))
    with store.background_compaction(interval=0.01, min_loose=1):
        print("compacting", flush=True)
        time.sleep(600)
    """
)


@contextlib.contextmanager
def killed_driver(backend: Backend) -> Iterator[None]:
    """The job's driver: a process compacting in the background, its compaction paused by a
    failpoint for the whole block (it falls behind every seal), then SIGKILLed."""
    env = os.environ | {"CKPT_FAILPOINTS": f"{PAUSE}=sleep:600@*"}
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, backend.store_uri, json.dumps(backend.options)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        assert driver.stdout is not None and driver.stdout.readline().strip() == "compacting"
        yield
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=60)


def test_sealers_keep_the_loose_tail_under_its_bound_while_the_driver_cannot(backend: Backend) -> None:
    """Eight threads seal 480 checkpoints while the driver's compaction is paused, then the driver
    is killed: the sealers folded batches themselves, so the loose manifests never passed the
    bound, and the resumed submit and key read cost requests in proportion to the bound, not to
    the 480 checkpoints (with only the driver compacting: several thousand)."""
    bound, count = 48, 480
    writer = backend.store(max_loose_manifests=bound)
    epoch = begin(writer, backend).number
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(loose_count(backend))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with killed_driver(backend):
            ids = seal_tasks(writer, backend, epoch, count, threads=8)
    finally:
        stop.set()
        watcher.join()
    assert max([*seen, writer.loose_tail.max_seen]) <= bound, (max(seen), writer.loose_tail.max_seen)
    assert writer.loose_tail.folds >= count // bound
    assert loose_count(backend) <= bound

    resumed = backend.store()
    epoch2, begin_requests = requests_of(resumed, lambda: begin(resumed, backend, takeover=True))
    assert sorted(epoch2.base) == sorted(ids)  # every sealed checkpoint of the killed run is done
    keys, key_requests = requests_of(resumed, lambda: done_keys(resumed))
    assert keys == list(range(count * KEYS_PER_TASK))
    assert begin_requests <= 6 * bound + 60, begin_requests
    assert key_requests <= 2 * bound + 30, key_requests


def test_begin_epoch_folds_a_bounded_batch_and_leaves_the_rest(backend: Backend) -> None:
    """A store whose tail was never bounded (``max_loose_manifests=0``, the driver killed): the
    resumed ``begin_epoch`` folds at most ``submit_fold_limit`` loose manifests and reads the
    rest, instead of compacting all of them on the submit's critical path (about six requests
    each); the epoch's base and the done keys are exactly the sealed checkpoints."""
    count, limit = 240, 30
    writer = backend.store(max_loose_manifests=0)
    epoch = begin(writer, backend).number
    with killed_driver(backend):
        ids = seal_tasks(writer, backend, epoch, count, threads=4)
    assert loose_count(backend) == count

    resumed = backend.store()
    resumed.submit_fold_limit = limit
    epoch2, begin_requests = requests_of(resumed, lambda: begin(resumed, backend, takeover=True))
    assert sorted(epoch2.base) == sorted(ids)
    assert loose_count(backend) == count - limit  # the rest is the next driver's to fold
    # Reading each loose manifest once, plus the batch folded (about eight requests each).
    assert begin_requests <= count + 8 * limit + 40, begin_requests
    assert done_keys(backend.store()) == list(range(count * KEYS_PER_TASK))
    # The next driver folds the rest; readers see the same.
    assert backend.store().compact().checkpoints == count - limit
    assert loose_count(backend) == 0
    assert done_keys(backend.store()) == list(range(count * KEYS_PER_TASK))
