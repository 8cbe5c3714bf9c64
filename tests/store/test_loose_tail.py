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
from airflow_ckpt_provider.store.errors import EpochConflictError, InvalidArgumentError
from tests.store.conftest import Backend
from tests.store.helpers import begin, done_keys, wait_for_hit, write_task
from tests.support.errors import raises_reason

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
    with store.housekeeping.background_compaction(interval=0.01, min_loose=1):
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
    """Eight threads seal 240 checkpoints (120 on the S3 server, where each seal is a few round trips)
    while the driver's compaction is paused, then the driver is killed: the sealers folded batches
    themselves, so the loose manifests never passed the bound (a tenth of them), and the resumed
    submit and key read cost requests in proportion to the bound, not to the checkpoints (with only
    the driver compacting: about five and one per checkpoint).

    ``CKPT_TAIL_TEST_CHECKPOINTS=20000`` runs the same case at size (the bound is then the default, 2,000;
    about 5 minutes on local disk on 2 cores), too long for every CI run."""
    count = int(os.environ.get("CKPT_TAIL_TEST_CHECKPOINTS") or 0) or (240 if backend.name == "local" else 120)
    bound = count // 10
    writer = backend.store(max_loose_manifests=bound)
    epoch = begin(writer, backend).number
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        # A listing every 20 ms (longer for a bigger tail): a busy loop of listings starved the sealers on 2
        # cores (minutes on S3).
        while not stop.wait(max(0.02, count / 100_000)):
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
    # Folding what is loose (at most the bound) and merging the sealers' small segments: about one request
    # per sealed checkpoint (288 for 240 of them), where compacting them would take five or six each.
    assert begin_requests <= count + 10 * bound, begin_requests
    assert key_requests <= 2 * bound + 30, key_requests


def test_begin_epoch_folds_a_bounded_batch_and_leaves_the_rest(backend: Backend) -> None:
    """A tail over the bound of the client that resumes (sealed by clients with a larger bound, the driver
    killed): the resumed ``epochs.begin`` folds at most
    ``submit_fold_limit`` loose manifests and reads the rest, instead of compacting all of them on the
    submit's critical path (about six requests each); the epoch's base and the done keys are exactly the
    sealed checkpoints."""
    count, limit = 240, 30
    writer = backend.store()  # the default bound: 240 seals never reach its trigger
    epoch = begin(writer, backend).number
    with killed_driver(backend):
        ids = seal_tasks(writer, backend, epoch, count, threads=4)
    assert loose_count(backend) == count

    resumed = backend.store(max_loose_manifests=200)  # 240 loose: over its bound
    resumed.epochs.submit_fold_limit = limit
    epoch2, begin_requests = requests_of(resumed, lambda: begin(resumed, backend, takeover=True))
    assert sorted(epoch2.base) == sorted(ids)
    assert loose_count(backend) == count - limit  # the rest is the next driver's to fold
    # Reading each loose manifest once, plus the batch folded (about eight requests each).
    assert begin_requests <= count + 8 * limit + 40, begin_requests
    assert done_keys(backend.store()) == list(range(count * KEYS_PER_TASK))
    # The next driver folds the rest; readers see the same.
    assert backend.store().housekeeping.compact().checkpoints == count - limit
    assert loose_count(backend) == 0
    assert done_keys(backend.store()) == list(range(count * KEYS_PER_TASK))


def test_begin_epoch_only_reads_a_tail_under_its_bound(backend: Backend) -> None:
    """A tail the sealers kept under its bound is read by the resumed ``epochs.begin``, not folded: folding
    costs about as many requests again as reading (on S3, 500 folded at the submit cost seconds), and
    the job's driver folds in the background. Folding starts once the tail reached the bound."""
    count, bound = 60, 80
    writer = backend.store()
    epoch = begin(writer, backend).number
    with killed_driver(backend):
        ids = seal_tasks(writer, backend, epoch, count, threads=4)

    resumed = backend.store(max_loose_manifests=bound)
    epoch2, begin_requests = requests_of(resumed, lambda: begin(resumed, backend, takeover=True))
    assert sorted(epoch2.base) == sorted(ids)
    assert loose_count(backend) == count  # nothing folded
    assert begin_requests <= count + 20, begin_requests  # one read per loose manifest, a few listings
    assert done_keys(backend.store()) == list(range(count * KEYS_PER_TASK))

    # At the bound, the submit folds (at most its limit).
    more = seal_tasks(backend.store(), backend, epoch2.number, bound - count)
    resumed = backend.store(max_loose_manifests=bound)
    resumed.epochs.submit_fold_limit = 25
    epoch3 = begin(resumed, backend, takeover=True)
    assert sorted(epoch3.base) == sorted([*ids, *more])
    assert loose_count(backend) == bound - 25


def test_a_fold_that_lost_the_race_to_a_merge_still_lands(backend: Backend) -> None:
    """A fold whose conditional write of ``state.json`` lost to a compaction that only moved rows (a merge)
    adds its segment to the newer state instead of throwing its work away: concurrent folds by sealers of
    several processes all count (store/compaction.py, ``_land``)."""
    store = backend.store()
    epoch = begin(store, backend).number
    for partition in range(2):
        write_task(store, backend, epoch=epoch, partition=partition, keys=[partition])
        store.housekeeping.compact()  # one segment each
    late = [write_task(store, backend, epoch=epoch, partition=p, keys=[p])[0] for p in (2, 3)]
    failpoints.enable("store.compact.after_segment", kind="block", seconds=120)
    slow: list[Any] = []
    thread = threading.Thread(target=lambda: slow.append(backend.store().housekeeping.compact()))
    thread.start()
    wait_for_hit("store.compact.after_segment")  # its segment of the two late ones is written, not yet named
    other = backend.store()
    state = other.parts.reader.segments.segment_state()
    assert other.parts.compactor.merger.merge(state, list(state.segments), level=1, delete_retired=True) is not None
    failpoints.release("store.compact.after_segment")
    thread.join()
    assert not slow[0].lost_race and slow[0].checkpoints == 2, slow[0]
    assert loose_count(backend) == 0
    reader = backend.store()
    assert len(reader.parts.reader.segments.segment_state().segments) == 2  # the merged one and the late fold's
    assert done_keys(reader) == [0, 1, 2, 3]
    assert set(late) <= {c.checkpoint_id for c in reader.inspection.valid_checkpoints()}


def test_a_fenced_sealer_may_fold_but_changes_nothing_a_reader_sees(backend: Backend) -> None:
    """A zombie (a task of an epoch a newer submit fenced) counts and folds before its seal is refused:
    folding moves rows, never validity, so the new epoch's base, its keys and progress stay as they were."""
    writer = backend.store(max_loose_manifests=4)
    old = begin(writer, backend).number
    seal_tasks(writer, backend, old, 3)
    resumed = backend.store()
    resumed.epochs.submit_fold_limit = 0  # leave the killed run's manifests loose for the zombie
    new = begin(resumed, backend, takeover=True)
    before = (done_keys(resumed), resumed.inspection.progress().valid_checkpoints)
    folds = writer.loose_tail.folds
    with raises_reason(EpochConflictError, "epoch_fenced"):
        write_task(writer, backend, epoch=old, partition=9, keys=[99])
    assert writer.loose_tail.folds > folds  # it folded the loose manifests of the killed run
    reader = backend.store()
    assert (done_keys(reader), reader.inspection.progress().valid_checkpoints) == before
    assert sorted(c.checkpoint_id for c in reader.inspection.valid_checkpoints()) == sorted(new.base)
    assert 99 not in done_keys(reader)


def test_the_bound_cannot_be_turned_off_or_raised(backend: Backend) -> None:
    """Every reader reads each loose manifest, so a store without a bound (or with a larger one) would
    give up what the bound is for: ``max_loose_manifests`` outside 1-2,000 is a typed error when the
    store is opened, and nothing is written."""
    for value in (0, -1, 2001, 10**6, "many", 1.5, True):
        with raises_reason(
            InvalidArgumentError, "out_of_range", match="max_loose_manifests must be an integer from 1 to 2000"
        ):
            backend.store(max_loose_manifests=value)
    assert backend.store_keys() == set()
    assert backend.store(max_loose_manifests=None).loose_tail.max_loose == 2000  # None: the default
    assert backend.store(max_loose_manifests="1").loose_tail.max_loose == 1  # JSON options may carry strings
