"""Row keys of the native writer: what each committed task's JVM recorded, read back on the driver.

``KeyedParquetFormat`` (the jar) records every source-key value a task attempt
writes, as an Arrow IPC stream; the commit protocol ships it with the task's commit
message and the driver's JVM leaves it in a file under a driver-local directory.
Here the driver reads that file once, keeps the distinct keys in the store's key
type, and checks a declared-unique key (docs/row-keys.md).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from airflow_ckpt_provider.spark.keys import distinct_keys, normalize_keys, repeated_key_example
from airflow_ckpt_provider.spark.row_source import InputRecords
from airflow_ckpt_provider.store.errors import IncompleteRunError, InvalidArgumentError
from airflow_ckpt_provider.store.keys import sorted_has_duplicates

#: The Spark data source that writes Parquet and records the hidden key column (the jar).
KEYED_FORMAT = "io.airflowckpt.spark.KeyedParquetFormat"


@dataclass(frozen=True)
class NativeRowKeys:
    """A row-keyed native write: the keys' Arrow type in the store, and what each task covered."""

    arrow_type: pa.DataType
    unique: bool = False
    inputs: InputRecords | None = None
    columns: tuple[str, ...] = ()

    def task_keys(self, message: dict[str, Any]) -> tuple[pa.Array, int]:
        """The distinct keys of one committed task (and how many rows it wrote); removes the file.

        Raises :class:`InvalidArgumentError` (``key_not_unique``) when the source declared unique keys and the
        task met a key twice (the task is then not sealed), :class:`IncompleteRunError` (``task_keys_lost``) when
        the JVM
        could not hand the keys over (the write fails; nothing of that task is sealed).
        """
        error = message.get("keys_error")
        if error:
            raise IncompleteRunError(
                f"the driver could not keep the keys of task {message.get('partition')}: {error}. Nothing of that "
                "task is sealed; check the driver's local disk (spark.local.dir) and run the job again",
                reason="task_keys_lost",
            )
        path = message.get("keys_file")
        if not path:
            return pa.array([], self.arrow_type), 0
        try:
            with ipc.open_stream(str(path)) as reader:
                table = reader.read_all()
        finally:
            with contextlib.suppress(OSError):
                os.unlink(str(path))
        column = table.column(0)
        rows = len(column)
        if not column.num_chunks:
            keys = pa.array([], column.type)
        elif self.unique and pa.types.is_integer(column.type) and sorted_has_duplicates(column) is False:
            # Declared unique and no integer repeats (keys in order: one comparison each; otherwise a sort, 4-7x
            # cheaper than hashing every key, which was half the driver's work per sealed task): distinct as they are.
            keys = normalize_keys(column)
        else:
            keys = normalize_keys(distinct_keys(column.chunks))
        if keys.type != self.arrow_type:
            keys = keys.cast(self.arrow_type)
        if self.unique and len(keys) < rows:
            raise InvalidArgumentError(
                f"task {message.get('partition')} wrote {rows} rows for {len(keys)} distinct keys "
                f"{list(self.columns)}{repeated_key_example(column)}, but skip_completed(unique=True) was told each "
                "key has one row. Nothing of that task was sealed. Pass unique=False (the default: rows are "
                "grouped by key before your transformation), or make the key unique",
                reason="key_not_unique",
            )
        return keys, rows
