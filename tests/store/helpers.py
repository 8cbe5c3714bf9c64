"""Test helpers that play the part of a Spark task writing through the store."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from airflow_ckpt_provider import failpoints
from airflow_ckpt_provider.store import Checkpoint, CheckpointStore, Epoch, FileMetadata, new_checkpoint_id
from tests.store.conftest import Backend


def write_task(
    store: CheckpointStore,
    backend: Backend,
    *,
    epoch: int,
    partition: int | None,
    keys: Sequence[object],
    seal: bool = True,
    files: int = 1,
    directory: str = "",
) -> tuple[str, list[str], Checkpoint | None]:
    """Record intents, write output files (under ``directory`` of the output root), stage keys and files, seal
    (like one Spark task)."""
    checkpoint_id = new_checkpoint_id()
    paths: list[str] = []
    metas: list[FileMetadata] = []
    for index in range(files):
        name = f"{directory}/" * bool(directory) + f"part-{partition}-{index}-e{epoch}-{checkpoint_id}.parquet"
        path = f"{backend.output_uri}/{name}"
        store.record_intent(checkpoint_id, [path], epoch=epoch)
        backend.write_output(name, b"x" * (10 + index))
        paths.append(path)
        metas.append(FileMetadata(path=path, size_bytes=10 + index, num_rows=len(keys)))
    store.stage_keys(checkpoint_id, list(keys))
    store.stage_files(checkpoint_id, metas)
    sealed = store.checkpoint(checkpoint_id, epoch=epoch, partition=partition) if seal else None
    return checkpoint_id, paths, sealed


def begin(store: CheckpointStore, backend: Backend, **kwargs: Any) -> Epoch:
    """Open an epoch the way the operator does: declaring the backend's output root, so that
    deletions (commit, discard, clear) may reach the files written there (docs/design.md, section 7)."""
    return store.epochs.begin(output_roots=[backend.output_uri], **kwargs)


def done_keys(store: CheckpointStore) -> list[object]:
    return sorted(store.get_checkpointed_keys().column("key").to_pylist())


def names(paths: Sequence[str]) -> set[str]:
    return {p.rsplit("/", 1)[-1] for p in paths}


def wait_for_hit(name: str, timeout: float = 60.0) -> None:
    """Wait until a thread of this process has reached the failpoint ``name``."""
    deadline = time.monotonic() + timeout
    while failpoints.hits(name) < 1:
        assert time.monotonic() < deadline, f"failpoint {name} never reached"
        time.sleep(0.02)
