"""The Parquet writer of ``write_parquet``: direct writes, one file set per task attempt.

Each file is announced (intent) and then written straight to its final name —
no temporary name and no rename, which object stores do not have (docs/design.md, section 5). With
``partition_by`` the files go to Hive-style ``col=value/`` directories, with the
partition columns left out of the files (as Spark writes them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.spark.writers.write_context import WriteContext
from airflow_ckpt_provider.store import FileMetadata

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
# Characters Spark escapes in partition directory names (ExternalCatalogUtils.escapePathName).
_HIVE_SAFE = "".join(chr(c) for c in range(32, 127) if chr(c) not in "\"#%'*/:=?\\\x7f{[]^")


def hive_value(value: Any) -> str:
    if value is None:
        return HIVE_NULL
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return quote(text, safe=_HIVE_SAFE) if text else HIVE_NULL


@dataclass
class _OpenFile:
    uri: str
    stream: pa.NativeFile
    writer: pq.ParquetWriter
    rows: int = 0
    pending: list[pa.RecordBatch] = field(default_factory=list)
    pending_bytes: int = 0


@dataclass(frozen=True)
class ParquetSink:
    """A ``writer_fn``: ``sink(batches, ctx) -> list[FileMetadata]``. Picklable (shipped to executors)."""

    partition_by: tuple[str, ...] = ()
    compression: str = "snappy"
    #: Row groups are written once this much Arrow data is buffered (fewer, larger row groups).
    row_group_bytes: int = 64 * 1024 * 1024
    max_records_per_file: int | None = None
    #: Columns to dictionary-encode; None: those whose first rows repeat values (see ``dictionary_columns``).
    use_dictionary: bool | tuple[str, ...] | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch], ctx: WriteContext) -> list[FileMetadata]:
        open_files: dict[tuple[Any, ...], _OpenFile] = {}
        done: list[FileMetadata] = []
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                for values, part in self._split(batch):
                    self._append(open_files, done, values, part, ctx)
            for values in list(open_files):
                done.append(self._close(open_files.pop(values)))
        except BaseException:
            for handle in open_files.values():
                # Close without a footer; the task deletes the file (its intent is recorded).
                with contextlib.suppress(Exception):
                    handle.stream.close()
            raise
        return done

    def _split(self, batch: pa.RecordBatch) -> Iterator[tuple[tuple[Any, ...], pa.RecordBatch]]:
        if not self.partition_by:
            yield (), batch
            return
        table = pa.Table.from_batches([batch])
        keys = table.select(list(self.partition_by))
        combos = keys.group_by(list(self.partition_by), use_threads=False).aggregate([])
        data = table.drop_columns(list(self.partition_by))
        for combo in combos.to_pylist():
            mask = None
            for name in self.partition_by:
                value = combo[name]
                column = keys.column(name)
                test = pc.is_null(column) if value is None else pc.equal(column, pa.scalar(value, column.type))
                mask = test if mask is None else pc.and_(mask, test)
            selected = data.filter(mask) if len(combos) > 1 else data
            for part in selected.to_batches():
                yield tuple(combo[n] for n in self.partition_by), part

    def _subdir(self, values: Sequence[Any]) -> str:
        pairs = zip(self.partition_by, values, strict=True)
        return "/".join(f"{quote(n, safe=_HIVE_SAFE)}={hive_value(v)}" for n, v in pairs)

    def _append(
        self,
        open_files: dict[tuple[Any, ...], _OpenFile],
        done: list[FileMetadata],
        values: tuple[Any, ...],
        batch: pa.RecordBatch,
        ctx: WriteContext,
    ) -> None:
        offset = 0
        while offset < batch.num_rows:
            handle = open_files.get(values)
            if handle is None:
                uri = ctx.new_file_uri("parquet", subdir=self._subdir(values))
                stream = ctx.open_output_stream(uri)
                dictionary = self.use_dictionary
                if dictionary is None:
                    dictionary = dictionary_columns(batch)
                writer = pq.ParquetWriter(
                    stream,
                    batch.schema,
                    compression=self.compression,
                    use_dictionary=dictionary if isinstance(dictionary, bool) else list(dictionary),
                )
                handle = open_files[values] = _OpenFile(uri, stream, writer)
            room = batch.num_rows - offset
            if self.max_records_per_file:
                room = min(room, self.max_records_per_file - handle.rows - _buffered_rows(handle))
            piece = batch.slice(offset, room)
            offset += room
            handle.pending.append(piece)
            handle.pending_bytes += piece.nbytes
            if handle.pending_bytes >= self.row_group_bytes:
                _flush(handle)
            if self.max_records_per_file and handle.rows + _buffered_rows(handle) >= self.max_records_per_file:
                done.append(self._close(open_files.pop(values)))

    def _close(self, handle: _OpenFile) -> FileMetadata:
        _flush(handle)
        handle.writer.close()
        size = handle.stream.tell()
        handle.stream.close()
        failpoint("spark.sink.after_file")  # a complete output file, not yet staged
        return FileMetadata(path=handle.uri, size_bytes=int(size), num_rows=handle.rows, format="parquet")


def dictionary_columns(batch: pa.RecordBatch, sample: int = 2048) -> tuple[str, ...]:
    """Columns worth dictionary encoding: at most half of the first ``sample`` values are distinct.

    Arrow builds a dictionary for every column by default and falls back only when
    it outgrows a page; for unique ids and free text that is wasted work (it more
    than doubles the write time) — the same judgement Spark's Parquet writer makes
    when a dictionary does not compress.
    """
    head = batch.slice(0, sample)
    if head.num_rows == 0:
        return ()
    chosen = []
    for column_field, column in zip(head.schema, head.columns, strict=True):
        if pa.types.is_nested(column_field.type) or pa.types.is_boolean(column_field.type):
            continue
        if pc.count_distinct(column).as_py() * 2 <= head.num_rows:
            chosen.append(column_field.name)
    return tuple(chosen)


def _buffered_rows(handle: _OpenFile) -> int:
    return sum(b.num_rows for b in handle.pending)


def _flush(handle: _OpenFile) -> None:
    if not handle.pending:
        return
    table = pa.Table.from_batches(handle.pending)
    handle.writer.write_table(table, row_group_size=max(table.num_rows, 1))
    handle.rows += table.num_rows
    handle.pending.clear()
    handle.pending_bytes = 0
