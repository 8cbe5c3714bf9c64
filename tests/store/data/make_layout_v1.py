"""Writes ``layout_v1/``: a store as the code before segments (commit 3ddd984) left it, for
``test_segments.py::test_a_store_written_before_segments_is_read_and_compacted``.

Run it with that version of the package on the path (a worktree of it)::

    PYTHONPATH=/path/to/worktree-at-3ddd984 python tests/store/data/make_layout_v1.py

The store: epoch 1 sealed partitions 0 and 1 (keys a..d) and failed with partition 2 unsealed (its
intent and output file left behind); epoch 2 (base: the two) sealed partition 0 twice (keys e, f:
the first sealed counts) and a checkpoint of 5,000 keys (its keys are not inline in its manifest),
and succeeded; not committed yet. Output paths are under ``file:///OUTPUT``: the test rewrites that
prefix to its own output root and creates the files named in ``output_files.json``.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from airflow_ckpt_provider.store import EpochStatus, FileMetadata, new_checkpoint_id, open_store

OUTPUT = "file:///OUTPUT"
HERE = Path(__file__).resolve().parent
TARGET = HERE / "layout_v1"


def task(store, epoch: int, partition: int, keys: list, *, seal: bool = True) -> str:  # type: ignore[no-untyped-def]
    checkpoint_id = new_checkpoint_id()
    path = f"{OUTPUT}/part-{partition}-e{epoch}-{checkpoint_id}.parquet"
    store.record_intent(checkpoint_id, [path], epoch=epoch)
    files.append(path.rsplit("/", 1)[-1])
    store.stage_keys(checkpoint_id, keys)
    store.stage_files(checkpoint_id, [FileMetadata(path=path, size_bytes=10, num_rows=len(keys))])
    if seal:
        store.checkpoint(checkpoint_id, epoch=epoch, partition=partition, metadata={"input": {"p": partition}})
        time.sleep(0.01)  # distinct sealed_at
    return checkpoint_id


files: list[str] = []

if __name__ == "__main__":
    shutil.rmtree(TARGET, ignore_errors=True)
    store = open_store(f"file://{TARGET}/store")
    first = store.begin_epoch(owner="dag/task/run1").number
    task(store, first, 0, ["a", "b"])
    task(store, first, 1, ["c", "d"])
    task(store, first, 2, ["x"], seal=False)
    store.end_epoch(first, status=EpochStatus.FAILED)
    second = store.begin_epoch(owner="dag/task/run1").number
    task(store, second, 0, ["e", "f"])
    task(store, second, 0, ["e", "f"])
    task(store, second, 1, [f"big-{i:05d}" for i in range(5000)])
    store.end_epoch(second, status=EpochStatus.SUCCEEDED)
    (TARGET / "output_files.json").write_text(json.dumps(sorted(files), indent=1))
    print(f"wrote {TARGET}")
