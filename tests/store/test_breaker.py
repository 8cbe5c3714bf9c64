"""The circuit breaker against a real outage: the S3 server is stopped mid-run, then restarted.

The store lives on S3; the output on local disk (a store outage must not stop a
job whose output system is fine). Nothing here is mocked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_ckpt_provider.store import EpochStatus, FileMetadata, new_checkpoint_id, open_store
from ckpt_testkit.seaweed import SeaweedServer

pytestmark = pytest.mark.s3


def test_outage_degrades_the_run_and_the_commit_deletes_nothing_unprovable(
    s3_server_factory: Callable[[], SeaweedServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = s3_server_factory()
    bucket = server.create_bucket("breaker")
    uri = f"s3://{bucket}/store"
    out = tmp_path / "out"
    out.mkdir()
    options = server.options() | {"timeout_seconds": 1.0, "max_attempts": 1, "breaker_max_failures": 3}
    store = open_store(uri, **options)
    epoch = store.epochs.begin(owner="job").number

    def task(partition: int, *, stop_server_after_intent: bool = False) -> tuple[Path, object]:
        checkpoint_id = new_checkpoint_id()
        path = out / f"part-{partition}-{checkpoint_id}.parquet"
        store.record_intent(checkpoint_id, [f"file://{path}"], epoch=epoch)
        if stop_server_after_intent:
            server.stop()
        path.write_bytes(b"rows")  # the output system is fine
        store.stage_keys(checkpoint_id, [f"k{partition}"])
        store.stage_files(checkpoint_id, [FileMetadata(f"file://{path}", 4, 1)])
        return path, store.checkpoint(checkpoint_id, epoch=epoch, partition=partition)

    sealed = [task(p) for p in range(2)]
    assert all(result is not None for _, result in sealed)

    caplog.set_level(logging.INFO, logger="airflow_ckpt_provider")
    began = time.monotonic()
    # Partition 2 records its intent, then the server goes away mid-task.
    half_done, result = task(2, stop_server_after_intent=True)
    assert result is None
    unrecorded = [task(p) for p in range(3, 10)]  # the job carries on, checkpointing off
    elapsed = time.monotonic() - began
    assert all(result is None for _, result in unrecorded)
    assert store.breaker.tripped and store.degraded
    trips = [r for r in caplog.records if r.levelno == logging.WARNING and "checkpointing is OFF" in r.message]
    assert len(trips) == 1, [r.message for r in caplog.records]
    # Once tripped, calls cost nothing: 8 tasks x 4 calls would take >= 30 s at 1 s per timeout.
    assert elapsed < 15, elapsed

    server.start()
    driver = open_store(uri, **server.options())
    current = driver.epochs.current()
    assert current is not None and not current.degraded  # the store could not even record it...
    driver.epochs.end(epoch, status=EpochStatus.SUCCEEDED)
    result_of_commit = driver.commit([f"file://{out}"], degraded=True)  # ...so the job result carries it
    assert result_of_commit.degraded
    assert result_of_commit.deleted_files == ()
    assert result_of_commit.kept_unprovable == (f"file://{half_done}",)
    assert {p.name for p, _ in unrecorded} <= {u.rsplit("/", 1)[-1] for u in result_of_commit.unknown_files}
    on_disk = {p.name for p in out.iterdir()}
    assert on_disk == {p.name for p, _ in [*sealed, (half_done, None), *unrecorded]}
    assert sorted(driver.get_checkpointed_keys().column("key").to_pylist()) == ["k0", "k1"]


def test_without_the_degraded_flag_the_half_done_task_is_an_orphan(
    s3_server: SeaweedServer, s3_bucket: str, tmp_path: Path
) -> None:
    """The contrast: a failed attempt (intent, file, no seal) in a healthy run is deleted."""
    store = open_store(f"s3://{s3_bucket}/store", **s3_server.options())
    epoch = store.epochs.begin(owner="job").number
    checkpoint_id = new_checkpoint_id()
    path = tmp_path / "out" / f"part-0-{checkpoint_id}.parquet"
    path.parent.mkdir()
    store.record_intent(checkpoint_id, [f"file://{path}"], epoch=epoch)
    path.write_bytes(b"rows")
    store.epochs.end(epoch, status=EpochStatus.SUCCEEDED)
    result = store.commit([f"file://{path.parent}"])
    assert result.deleted_files == (f"file://{path}",)
    assert not path.exists()
