"""Input keys on the Spark side: the hidden source-key columns and their Arrow types.

A key is taken *at the source* and carried to the writer in a hidden column, so a
pipeline may rewrite the visible key column (trim, upper-case, re-type) without
changing what is checkpointed — the next run's skip must match what was read.

* Row keys: ``__ckpt_source_key`` holds the key column's value (or a struct of the
  key columns for a composite key), exactly as read.
* File keys: ``__ckpt_source_file`` holds an int index into the job's list of input
  file URIs (4 bytes a row instead of the URI; the writer maps it back).

The writer stages these values and drops the columns before writing output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_ckpt_provider.store.errors import InvalidArgumentError
from airflow_ckpt_provider.store.keys import distinct_if_ascending, duplicate_keys

#: Hidden column holding the row key as read (``skip_completed``).
SOURCE_KEY_COLUMN = "__ckpt_source_key"
#: Hidden column holding the index of the input file a row came from (``read_parquet``).
SOURCE_FILE_COLUMN = "__ckpt_source_file"
#: Hidden column naming the piece of its input file a row was read from (``skip_completed`` over Spark Connect,
#: docs/row-keys.md): a struct of the file path's ``xxhash64`` and the piece's first byte and length.
SOURCE_PIECE_COLUMN = "__ckpt_source_piece"
#: Marker in the message of the Spark error raised for a null key (translated to InvalidArgumentError("null_key")).
NULL_KEY_MARKER = "CKPT_NULL_KEY"


def key_columns(key: str | Sequence[str]) -> tuple[str, ...]:
    """``"id"`` or ``["a", "b"]`` → a tuple of column names (order matters: it is the key's layout)."""
    if isinstance(key, str):
        columns: tuple[str, ...] = (key,)
    else:
        columns = tuple(key)
    if not columns or not all(isinstance(c, str) and c for c in columns):
        raise InvalidArgumentError(
            f"key must be a column name or a non-empty list of column names, not {key!r}", reason="key_columns"
        )
    if len(set(columns)) != len(columns):
        raise InvalidArgumentError(
            f"key {list(columns)} names a column twice: list each key column once", reason="key_columns"
        )
    return columns


def normalize_key_type(data_type: pa.DataType) -> pa.DataType:
    """The canonical Arrow type a key is stored as, independent of how Spark hands it over.

    Large variants become their plain form and struct fields become nullable, so a
    key keeps one type across runs even if Spark's Arrow settings or a column's
    nullability change.
    """
    if pa.types.is_large_string(data_type) or pa.types.is_string_view(data_type):
        return pa.string()
    if pa.types.is_large_binary(data_type) or pa.types.is_binary_view(data_type):
        return pa.binary()
    if pa.types.is_dictionary(data_type):
        return normalize_key_type(data_type.value_type)
    if pa.types.is_struct(data_type):
        return pa.struct(
            [pa.field(f.name, normalize_key_type(f.type), nullable=True) for f in data_type]  # type: ignore[attr-defined]
        )
    return data_type


def normalize_keys(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    target = normalize_key_type(array.type)
    return array if array.type == target else array.cast(target)


def distinct_keys(arrays: Sequence[pa.Array]) -> pa.Array:
    """Distinct values of ``arrays`` (all of one type), structs included."""
    if not arrays:  # pragma: no cover - every caller passes at least one array
        raise ValueError("no arrays")
    combined = pa.concat_arrays([normalize_keys(a) for a in arrays])
    if not pa.types.is_struct(combined.type):
        ascending = distinct_if_ascending(combined)
        return pc.unique(combined) if ascending is None else ascending
    # `unique` has no struct kernel: group by the flattened fields, then rebuild the struct.
    table = pa.table({"k": combined}).flatten()
    grouped = table.group_by(table.column_names, use_threads=False).aggregate([])
    fields = list(combined.type)
    children = [grouped.column(f"k.{f.name}").combine_chunks() for f in fields]
    return pa.StructArray.from_arrays(children, fields=fields)


#: How much of a repeated key an error message shows: a key can be long, and a task's message crosses
#: Spark as text that the driver cuts (spark/job/failures.py).
EXAMPLE_CHARS = 80


def repeated_key_example(keys: pa.Array | pa.ChunkedArray) -> str:
    """``", e.g. <key>"`` naming one key that ``keys`` holds twice, for an error message; struct (composite)
    keys as a dict of their fields. Only an example: '' when none is found or Arrow cannot count the type."""
    found: Any = None
    try:
        column = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
        found = duplicate_keys(pa.table({"k": column}))
    except (pa.ArrowException, ValueError):  # pragma: no cover - a key type Arrow cannot group
        return ""
    if found is None or not found[1]:
        return ""
    first = found[1][0]
    value = first["k"] if list(first) == ["k"] else {name.split(".", 1)[1]: v for name, v in first.items()}
    text = repr(value)
    return f", e.g. {text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 3] + '...'}"
