"""Input keys as the store holds them: one Arrow column ``key``, validated, encoded, checked for overlap."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from airflow_ckpt_provider.store.errors import InvalidKeysError

KEY_COLUMN = "key"
#: Checkpoints up to this many keys / files carry a copy in their manifest (one read instead of many).
INLINE_MAX_KEYS = 4096
INLINE_MAX_FILES = 256


def as_key_array(keys: pa.Array | pa.ChunkedArray | Sequence[Any]) -> pa.Array:
    """One flat Arrow array of keys; :class:`InvalidKeysError` for nulls, mixed types or nested lists."""
    if isinstance(keys, pa.ChunkedArray):
        array = keys.combine_chunks()
    elif isinstance(keys, pa.Array):
        array = keys
    else:
        try:
            array = pa.array(list(keys))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise InvalidKeysError(f"keys must be of one type: {exc}") from exc
    if array.null_count:
        raise InvalidKeysError(
            f"{array.null_count} keys are null: a key identifies input, so it can't be null. "
            "Filter or fill nulls before checkpointing"
        )
    if pa.types.is_nested(array.type) and not pa.types.is_struct(array.type):
        raise InvalidKeysError(f"keys of type {array.type} are not supported: use scalars or a struct")
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
    counts = flat.group_by(flat.column_names).aggregate([([], "count_all")])
    if counts.num_rows == keys.num_rows:
        return None
    surplus = keys.num_rows - counts.num_rows
    dupes = counts.filter(pc.greater(counts.column("count_all"), 1)).drop_columns(["count_all"])
    return surplus, dupes.slice(0, 5).to_pylist()
