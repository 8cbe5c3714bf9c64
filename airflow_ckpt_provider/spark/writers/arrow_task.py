"""One checkpointed write task, as it runs on an executor (inside ``mapInArrow``).

Per task attempt:

1. ``checkpoint_id = new_checkpoint_id()`` — fresh per attempt (docs/design.md, invariant 2: never overwrite);
2. fence: give up before writing anything if a newer epoch exists (this attempt is a zombie);
3. the writer records an intent before creating each file, then writes it directly;
4. stage the files, stage the distinct source keys, seal the checkpoint for the Spark partition;
5. if anything fails before the seal, delete what the attempt wrote (best effort,
   retried: docs/design.md, section 5) and let the exception propagate. After the seal nothing is
   ever deleted here: the checkpoint may be the valid one.

Store failures go through the store's circuit breaker: once it trips, the task
keeps writing output without checkpointing and reports ``degraded``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.spark.keys import (
    SOURCE_FILE_COLUMN,
    SOURCE_KEY_COLUMN,
    SOURCE_PIECE_COLUMN,
    distinct_keys,
    normalize_keys,
    repeated_key_example,
)
from airflow_ckpt_provider.spark.paths import file_key
from airflow_ckpt_provider.spark.row_source import INPUT_RECORD, InputRecords
from airflow_ckpt_provider.spark.writers.write_context import WriteContext
from airflow_ckpt_provider.store import CheckpointStore, FileMetadata, new_checkpoint_id, open_store
from airflow_ckpt_provider.store.errors import (
    CheckpointError,
    EpochConflictError,
    InvalidArgumentError,
    StoreUnavailableError,
)

log = logging.getLogger(__name__)

WriterFn = Callable[[Iterator[pa.RecordBatch], WriteContext], list[FileMetadata]]

#: One row per task attempt that finished (what the driver aggregates into a WriteSummary).
REPORT_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("attempt", pa.int32()),
        ("checkpoint_id", pa.string()),
        ("rows", pa.int64()),
        ("files", pa.int64()),
        ("bytes", pa.int64()),
        ("keys", pa.int64()),
        ("sealed", pa.bool_()),
        ("degraded", pa.bool_()),
        ("seconds", pa.float64()),
        ("host", pa.string()),
    ]
)
REPORT_DDL = (
    "partition int, attempt int, checkpoint_id string, rows bigint, files bigint, bytes bigint, "
    "keys bigint, sealed boolean, degraded boolean, seconds double, host string"
)


@dataclass(frozen=True)
class TaskSpec:
    """Everything a write task needs; pickled into the task closure (the options may hold secrets)."""

    store_uri: str
    store_options: Mapping[str, Any] = field(repr=False)
    epoch: int
    output_root: str
    writer: WriterFn
    #: Hidden column carrying the source key (a row key, or a file: URI string or registry index).
    key_column: str
    file_keyed: bool = False
    #: File keys by index, for the pyarrow reader's int file column.
    file_registry: tuple[str, ...] | None = None
    #: When writer task p is exactly task p of the file source: the file keys each task reads.
    task_files: tuple[tuple[str, ...], ...] | None = None
    drop_columns: tuple[str, ...] = (SOURCE_KEY_COLUMN, SOURCE_FILE_COLUMN, SOURCE_PIECE_COLUMN)
    #: Row keys declared one row per key: a task meeting a key twice fails before its seal.
    unique_keys: bool = False
    key_columns: tuple[str, ...] = ()
    #: What each task covered (files read whole, or its bucket), recorded with its checkpoint.
    inputs: InputRecords | None = None


# One store per (store, options, epoch) and Python worker: Spark reuses workers across
# tasks, so connections and a tripped breaker carry over to the next task of the same
# job instead of hammering a store that is down. A new epoch gets a fresh breaker.
_STORES: dict[str, CheckpointStore] = {}


def _store_for(spec: TaskSpec) -> CheckpointStore:
    cache_key = json.dumps([spec.store_uri, dict(spec.store_options), spec.epoch], sort_keys=True, default=str)
    store = _STORES.get(cache_key)
    if store is None:
        store = _STORES[cache_key] = open_store(spec.store_uri, **dict(spec.store_options))
    return store


class _KeyTap:
    """Passes batches to the writer without the hidden columns, collecting distinct source keys."""

    def __init__(self, batches: Iterator[pa.RecordBatch], spec: TaskSpec) -> None:
        self._batches = batches
        self._spec = spec
        self._keys: list[pa.Array] = []
        self.rows = 0
        #: Rows that carried a key (a unique key's count must equal its distinct keys).
        self.keyed_rows = 0
        self.exhausted = False
        #: Keys declared unique: the first batch whose keys repeat within it (for the error's example).
        self._unique = spec.unique_keys and not spec.file_keyed
        self._repeating: pa.Array | None = None
        #: The input pieces the rows came from (path hash, first byte, length), when the source sends them.
        self.pieces: set[tuple[int, int, int]] = set()

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        drop = [c for c in self._spec.drop_columns]
        for batch in self._batches:
            index = batch.schema.get_field_index(self._spec.key_column)
            if index >= 0 and batch.num_rows:
                distinct = distinct_keys([batch.column(index)])
                if self._unique and self._repeating is None and len(distinct) < batch.num_rows:
                    self._repeating = batch.column(index)
                self._keys.append(distinct)
                self.keyed_rows += batch.num_rows
            self.rows += batch.num_rows
            piece = batch.schema.get_field_index(SOURCE_PIECE_COLUMN)
            if piece >= 0 and batch.num_rows:
                self.pieces.update(pieces_met(batch.column(piece)))
            present = [c for c in drop if batch.schema.get_field_index(c) >= 0]
            yield batch.drop_columns(present) if present else batch
        self.exhausted = True

    def drain(self) -> int:
        """Consume what the writer left; returns how many rows it skipped."""
        before = self.rows
        for _ in self:
            pass
        return self.rows - before

    def repeated_key(self) -> str:
        """An example of a key met twice (within a batch, else across batches), for the error message."""
        if self._repeating is not None:
            return repeated_key_example(self._repeating)
        return repeated_key_example(pa.chunked_array([normalize_keys(a) for a in self._keys])) if self._keys else ""

    def keys(self, partition: int) -> pa.Array:
        spec = self._spec
        if not spec.file_keyed:
            if not self._keys:
                return pa.array([], pa.string())
            return normalize_keys(distinct_keys(self._keys))
        files: set[str] = set()
        if spec.task_files is not None and partition < len(spec.task_files):
            # The task read these whole files, even those whose rows were all filtered out.
            files.update(spec.task_files[partition])
        for array in self._keys:
            if pa.types.is_integer(array.type) and spec.file_registry is not None:
                files.update(spec.file_registry[i] for i in array.to_pylist())
            else:
                files.update(file_key(str(v)) for v in array.to_pylist())
        return pa.array(sorted(files), pa.string())


def pieces_met(column: pa.Array) -> set[tuple[int, int, int]]:
    """The distinct pieces of a batch's piece column: rows come piece after piece, so only the rows where
    the piece changes are looked at."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    files, starts, lengths = (column.field(i) for i in range(3))
    changed = pc.or_(pc.not_equal(files[1:], files[:-1]), pc.not_equal(starts[1:], starts[:-1]))
    rows = [0, *(i + 1 for i in pc.indices_nonzero(changed).to_pylist())]
    picked = [array.take(pa.array(rows)).to_pylist() for array in (files, starts, lengths)]
    return set(zip(*picked, strict=True))


def _fence(store: CheckpointStore, epoch: int) -> None:
    """Raise EpochConflictError("epoch_fenced") if a newer epoch began; a store that is down only counts against the
    breaker."""
    if store.breaker.tripped:
        return
    try:
        current = store.epochs.is_current(epoch)
    except (StoreUnavailableError, OSError) as exc:
        store.breaker.record_failure("is_current_epoch", exc)
        return
    store.breaker.record_success()
    if not current:
        raise EpochConflictError(
            f"epoch {epoch} of {store.uri} was superseded by a newer submit: this task attempt belongs to an "
            "old run (a zombie) and stops before writing anything",
            reason="epoch_fenced",
        )


def _sealed(store: CheckpointStore, checkpoint_id: str) -> bool:
    """Whether the manifest exists. True when unsure: files of a sealed checkpoint must never be deleted."""
    try:
        return store.inspection.get_checkpoint(checkpoint_id) is not None
    except Exception:
        return True


def run_write_task(spec: TaskSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The body of one write task: write, stage, seal; clean up on failure. Yields one report row."""
    from pyspark import TaskContext

    started = time.monotonic()
    task = TaskContext.get()
    partition = task.partitionId() if task else 0
    attempt = task.attemptNumber() if task else 0
    where = f"e{spec.epoch}.p{partition}.a{attempt}"
    store = _store_for(spec)
    checkpoint_id = new_checkpoint_id()
    ctx = WriteContext(
        store=store,
        checkpoint_id=checkpoint_id,
        epoch=spec.epoch,
        partition_id=partition,
        attempt_number=attempt,
        output_root=spec.output_root,
        fs_options=spec.store_options,
    )
    tap = _KeyTap(batches, spec)
    files: list[FileMetadata] = []
    keys = pa.array([], pa.string())
    seal_attempted = False
    sealed = None
    try:
        _fence(store, spec.epoch)
        _failpoints("spark.task.before_write", where)
        files = list(spec.writer(iter(tap), ctx))
        skipped = 0 if tap.exhausted else tap.drain()
        if skipped:
            raise InvalidArgumentError(
                f"the writer returned without consuming {skipped} rows of partition {partition}: a writer must "
                "consume every batch, or those rows' keys would be checkpointed without their output",
                reason="writer_contract",
            )
        unrecorded = [f.path for f in files if f.path not in ctx.intents]
        if unrecorded:
            raise InvalidArgumentError(
                f"the writer created {unrecorded[:3]} without ctx.record_intent(): call it before creating each "
                "file, so a failed attempt's files can be found and deleted",
                reason="writer_contract",
            )
        _failpoints("spark.task.after_write", where)
        store.stage_files(checkpoint_id, files)
        keys = tap.keys(partition)
        if spec.unique_keys and not spec.file_keyed and len(keys) < tap.keyed_rows:
            raise InvalidArgumentError(
                f"partition {partition} wrote {tap.keyed_rows} rows for {len(keys)} distinct keys "
                f"{list(spec.key_columns)}{tap.repeated_key()}, but skip_completed(unique=True) was told each key has "
                "one row. Nothing of this task was sealed. Pass unique=False (the default: rows are grouped by key "
                "before your transformation), or make the key unique",
                reason="key_not_unique",
            )
        store.stage_keys(checkpoint_id, keys)
        _failpoints("spark.task.before_seal", where)
        metadata: dict[str, Any] = {
            "attempt": attempt,
            "stage": task.stageId() if task else None,
            "task_attempt_id": task.taskAttemptId() if task else None,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "rows_in": tap.rows,
        }
        record = None
        if spec.inputs is not None:
            pieces = spec.inputs.piece_files is not None
            record = spec.inputs.for_pieces_met(tap.pieces) if pieces else spec.inputs.for_partition(partition)
        if record is not None:
            metadata[INPUT_RECORD] = record
        seal_attempted = True
        sealed = store.checkpoint(checkpoint_id, epoch=spec.epoch, partition=partition, metadata=metadata)
        _failpoints("spark.task.after_seal", where)
    except BaseException:
        if not seal_attempted or not _sealed(store, checkpoint_id):
            written = list(ctx.intents) + [f.path for f in files]
            if written:
                ctx.delete_outputs(written)
        raise
    report = {
        "partition": [partition],
        "attempt": [attempt],
        "checkpoint_id": [checkpoint_id if sealed is not None else None],
        "rows": [sum(f.num_rows for f in files)],
        "files": [len(files)],
        "bytes": [sum(f.size_bytes for f in files)],
        "keys": [len(keys)],
        "sealed": [sealed is not None],
        "degraded": [store.degraded or sealed is None],
        "seconds": [time.monotonic() - started],
        "host": [socket.gethostname()],
    }
    yield pa.RecordBatch.from_pydict(report, schema=REPORT_SCHEMA)


def _failpoints(name: str, where: str) -> None:
    """Fault-injection points: ``name`` for every task, ``name.e{epoch}.p{partition}.a{attempt}`` for one."""
    failpoint(name)
    failpoint(f"{name}.{where}")


#: Noted on a package error a task raises, with its ``reason``: Spark hands the driver only the task's
#: error text, where the driver finds what to raise (spark/job/failures.py).
REASON_NOTE = "CKPT_REASON: "


def make_task_function(spec: TaskSpec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def _ckpt_write_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        try:
            yield from run_write_task(spec, batches)
        except CheckpointError as exc:
            exc.add_note(f"{REASON_NOTE}{exc.reason}")
            raise

    return _ckpt_write_task
