"""``read_parquet``'s source: whole Parquet files per Spark task, tagged with their file key.

Files are read by pyarrow on the executors (local disk or ``s3://`` with the
store's endpoint and credentials — Spark has no S3 connector here). Each task
reads a fixed group of *whole* files, so every row of a file lands in one task
and a writer directly downstream needs no shuffle (see ``plan.py``). Rows carry
the file's index in the hidden column ``__ckpt_source_file``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_ckpt_provider.spark.keys import SOURCE_FILE_COLUMN
from airflow_ckpt_provider.spark.paths import arrow_filesystem, arrow_path


@dataclass(frozen=True)
class SourceFile:
    index: int  # position in the job's file registry: the value of the hidden column
    uri: str  # the path as the user gave it (what is opened)
    size: int


def plan_groups(files: Sequence[SourceFile], *, max_bytes: int, min_groups: int) -> list[tuple[SourceFile, ...]]:
    """Pack files, in order, into about ``min_groups`` groups of equal bytes, each at most ``max_bytes``.

    Deterministic (every attempt of task *p* reads the same files) and never splits a file.
    """
    if not files:
        return []
    total = sum(max(f.size, 1) for f in files)
    target = min(max_bytes, math.ceil(total / max(min_groups, 1)))
    groups: list[tuple[SourceFile, ...]] = []
    current: list[SourceFile] = []
    size = 0
    for f in files:
        if current and size + f.size > target:
            groups.append(tuple(current))
            current, size = [], 0
        current.append(f)
        size += f.size
    groups.append(tuple(current))
    return groups


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> list[pa.Array]:
    """Columns of ``batch`` in ``schema``'s order and types (missing columns become nulls)."""
    columns = []
    for target in schema:
        index = batch.schema.get_field_index(target.name)
        if index < 0:
            columns.append(pa.nulls(batch.num_rows, target.type))
            continue
        column = batch.column(index)
        columns.append(column if column.type == target.type else column.cast(target.type))
    return columns


@dataclass(frozen=True)
class FileSourceSpec:
    """Everything a reader task needs (pickled into the task closure: the options may hold secrets)."""

    groups: tuple[tuple[SourceFile, ...], ...]
    schema: pa.Schema  # data columns, in the Arrow types Spark expects back
    fs_options: Mapping[str, Any] = field(repr=False)
    batch_rows: int = 65536


def make_reader(
    spec: FileSourceSpec, name: str, on_file: Callable[[int], None]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function over ``spark.range(len(groups))`` that reads group *id*'s files.

    ``on_file(size)`` is called once per file opened (an accumulator: input bytes read).
    ``name`` (it starts with ``plan.READER_MARKER``) shows in the physical plan, where
    the writer finds it to prove that whole files stay in one task.
    """
    out_schema = spec.schema.append(pa.field(SOURCE_FILE_COLUMN, pa.int32()))

    def _ckpt_read_parquet_source(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        filesystems: dict[bool, Any] = {}
        for id_batch in ids:
            for group_id in id_batch.column(0).to_pylist():
                for source in spec.groups[group_id]:
                    s3 = source.uri.startswith("s3")
                    if s3 not in filesystems:
                        filesystems[s3] = arrow_filesystem(source.uri, spec.fs_options)
                    on_file(source.size)
                    with filesystems[s3].open_input_file(arrow_path(source.uri)) as handle:
                        parquet = pq.ParquetFile(handle)
                        for batch in parquet.iter_batches(batch_size=spec.batch_rows, use_threads=False):
                            hidden = pa.repeat(pa.scalar(source.index, pa.int32()), batch.num_rows)
                            yield pa.RecordBatch.from_arrays([*_conform(batch, spec.schema), hidden], schema=out_schema)

    _ckpt_read_parquet_source.__name__ = _ckpt_read_parquet_source.__qualname__ = name
    return _ckpt_read_parquet_source
