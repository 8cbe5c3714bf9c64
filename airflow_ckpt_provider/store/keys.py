"""Input keys as the store holds them: one Arrow column ``key``, validated, encoded, checked for overlap."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from airflow_ckpt_provider.store.errors import InvalidArgumentError

KEY_COLUMN = "key"
#: Checkpoints up to this many keys / files carry a copy in their manifest (one read instead of many).
INLINE_MAX_KEYS = 4096
INLINE_MAX_FILES = 256


def as_key_array(keys: pa.Array | pa.ChunkedArray | Sequence[Any]) -> pa.Array:
    """One flat Arrow array of keys; :class:`InvalidArgumentError` (``invalid_keys``) for nulls, mixed types or
    nested lists."""
    if isinstance(keys, pa.ChunkedArray):
        array = keys.combine_chunks()
    elif isinstance(keys, pa.Array):
        array = keys
    else:
        try:
            array = pa.array(list(keys))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise InvalidArgumentError(f"keys must be of one type: {exc}", reason="invalid_keys") from exc
    if array.null_count:
        raise InvalidArgumentError(
            f"{array.null_count} keys are null: a key identifies input, so it can't be null. "
            "Filter or fill nulls before checkpointing",
            reason="invalid_keys",
        )
    if pa.types.is_nested(array.type) and not pa.types.is_struct(array.type):
        raise InvalidArgumentError(
            f"keys of type {array.type} are not supported: use scalars or a struct", reason="invalid_keys"
        )
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array


def ipc_bytes(arrays: Sequence[pa.Array]) -> bytes:
    """Keys as an Arrow IPC stream with one column ``key``."""
    table = pa.table({KEY_COLUMN: pa.chunked_array(arrays)})
    sink = io.BytesIO()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def duplicate_keys(keys: pa.Table) -> tuple[int, list[Any]] | None:
    """(number of surplus keys, a few examples) if any key appears twice, else None."""
    flat = keys.flatten()
    while any(pa.types.is_struct(f.type) for f in flat.schema):  # a struct key with struct fields
        flat = flat.flatten()
    if flat.num_columns == 1 and sorted_has_duplicates(flat.column(0)) is False:
        return None  # the usual answer, found without counting every key
    counts = flat.group_by(flat.column_names).aggregate([([], "count_all")])
    if counts.num_rows == keys.num_rows:
        return None
    surplus = keys.num_rows - counts.num_rows
    dupes = counts.filter(pc.greater(counts.column("count_all"), 1)).drop_columns(["count_all"])
    return surplus, dupes.slice(0, 5).to_pylist()


def _orderable(data_type: pa.DataType) -> bool:
    """Types whose order Arrow compares exactly as their equality (no NaN, no -0.0 == 0.0)."""
    return any(
        check(data_type)
        for check in (
            pa.types.is_integer,
            pa.types.is_string,
            pa.types.is_large_string,
            pa.types.is_binary,
            pa.types.is_large_binary,
            pa.types.is_date,
            pa.types.is_timestamp,
        )
    )


def distinct_if_ascending(column: pa.Array | pa.ChunkedArray) -> pa.Array | None:
    """The distinct values of ``column`` (first occurrences, in order) when it is already in ascending order,
    found by comparing each value with the one before it: 10-25x cheaper than hashing every value, and keys
    often come in order (files written sorted, increasing ids, a sort-merge join's output). None when they are
    not in order or it cannot tell (nulls, a type without an exact order, structs): hash them then."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if len(array) < 2:
        return array
    if array.null_count or not _orderable(array.type):
        return None
    head, tail = array.slice(0, len(array) - 1), array.slice(1)
    try:
        if not pc.all(pc.greater_equal(tail, head)).as_py():
            return None
        changed = pc.not_equal(tail, head)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # pragma: no cover - every orderable type compares
        return None
    if pc.all(changed).as_py():
        return array
    return array.filter(pa.concat_arrays([pa.array([True]), changed]))


def sorted_has_duplicates(column: pa.ChunkedArray) -> bool | None:
    """Whether ``column`` holds a value twice, found by sorting: several times cheaper than counting
    every key by hash (a commit checks 10 M keys of 100,000 checkpoints; the native writer's driver the
    integer keys of every task it seals). None: not decided here."""
    if len(column) < 2:
        return False
    if column.null_count:  # nulls sort and compare unlike the counting path (never written, but records are input)
        return None
    ascending = distinct_if_ascending(column)
    if ascending is not None:  # already in order: one comparison per value, no sort
        return len(ascending) < len(column)
    if pa.types.is_integer(column.type):
        values = np.sort(column.to_numpy())
        return bool((values[1:] == values[:-1]).any())
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return None
    try:
        ordered = pc.take(column, pc.sort_indices(column)).combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # e.g. more than 2 GB of strings in one array
        return None
    return bool(pc.any(pc.equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1))).as_py())
