"""The example job's output written through the store API alone (no Spark), for fast oracle and checker tests.

One task per input file (file keys): announce the output file, write the
transformed rows, stage the file and the key, seal — exactly what a Spark write
task does, so a commit and the oracle see the same shapes as in the campaign.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_ckpt_provider.spark.paths import file_key
from airflow_ckpt_provider.store import CheckpointStore, EpochStatus, FileMetadata, new_checkpoint_id


def write_task(
    store: CheckpointStore, output_dir: str, input_path: str, *, epoch: int, partition: int, seal: bool = True
) -> str:
    """One task: returns the output file URI (``file://`` output only)."""
    table = pq.read_table(input_path)
    key = pc.utf8_upper(pc.utf8_trim_whitespace(table.column("key")))
    out = table.set_column(table.schema.get_field_index("key"), "key", key).append_column(
        "value2", pc.multiply(table.column("value"), 2.0)
    )
    checkpoint_id = new_checkpoint_id()
    uri = f"{output_dir.rstrip('/')}/part-{partition:05d}-e{epoch}-{checkpoint_id}.parquet"
    store.record_intent(checkpoint_id, [uri], epoch=epoch)
    path = uri[len("file://") :]
    pq.write_table(out, path)
    store.stage_files(checkpoint_id, [FileMetadata(uri, os.path.getsize(path), out.num_rows, "parquet")])
    store.stage_keys(checkpoint_id, pa.array([file_key(input_path)]))
    if seal:
        store.checkpoint(checkpoint_id, epoch=epoch, partition=partition)
    return uri


def run_job(store: CheckpointStore, output_dir: str, inputs: Sequence[str], *, owner: str = "store-api-job") -> int:
    """Open an epoch, write every input not yet done, end the epoch; returns the epoch number."""
    epoch = store.epochs.begin(owner=owner, output_roots=[output_dir]).number
    done = set(store.get_checkpointed_keys().column(0).to_pylist()) if store.key_type() else set()
    for partition, path in enumerate(inputs):
        if file_key(path) not in done:
            write_task(store, output_dir, path, epoch=epoch, partition=partition)
    store.epochs.end(epoch, status=EpochStatus.SUCCEEDED)
    return epoch
