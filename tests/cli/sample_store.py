"""Stores with known contents for the CLI and UI suites, written through the store API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_ckpt_provider.store import CheckpointStore, FileMetadata, new_checkpoint_id, open_blobs, open_store

FILE_BYTES = 1000


def fill_store(
    uri: str,
    output_dir: str,
    *,
    partitions: int = 3,
    expected_partitions: int | None = 4,
    keys_per_partition: int = 50,
    options: Mapping[str, Any] | None = None,
    owner: str = "sample",
) -> CheckpointStore:
    """One epoch with ``partitions`` sealed checkpoints, each with its keys and one output file.

    Keys are ``key-{partition}-{i}``; every output file really exists under ``output_dir``
    (a ``file://`` or ``s3://`` URI) and has :data:`FILE_BYTES` bytes. ``owner``: the epoch's
    owner, ``"dag_id/task_id/run_id"`` as the submit operator writes it.
    """
    options = dict(options or {})
    store = open_store(uri, **options)
    output = open_blobs(output_dir, **options)
    # As the operator does: the output directory is declared, so clear/discard/commit may delete there.
    epoch = store.epochs.begin(owner=owner, expected_partitions=expected_partitions, output_roots=[output.uri])
    for partition in range(partitions):
        checkpoint_id = new_checkpoint_id()
        name = f"part-{partition:05d}.parquet"
        path = f"{output.uri}/{name}"
        store.record_intent(checkpoint_id, [path], epoch=epoch.number)
        output.put(name, b"x" * FILE_BYTES)
        store.stage_keys(checkpoint_id, [f"key-{partition}-{i}" for i in range(keys_per_partition)])
        store.stage_files(checkpoint_id, [FileMetadata(path, FILE_BYTES, keys_per_partition)])
        store.checkpoint(checkpoint_id, epoch=epoch.number, partition=partition)
    output.close()
    return store
