"""Which kind of key a job uses (file or row, and which columns), and the hidden source-key column.

One store holds one kind of key; a row key's type must match the store's from run to
run. The hidden column carries each row's key exactly as read, so a pipeline that
rewrites the key column still checkpoints what was read (docs/row-keys.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_type

from airflow_ckpt_provider.spark.keys import (
    NULL_KEY_MARKER,
    SOURCE_FILE_COLUMN,
    SOURCE_KEY_COLUMN,
    key_columns,
    normalize_key_type,
)
from airflow_ckpt_provider.spark.row_source import SOURCE_ID_METADATA, RowSource
from airflow_ckpt_provider.store import CheckpointStore
from airflow_ckpt_provider.store.errors import InvalidArgumentError


class SourceKeys:
    """The job's key: its kind, its columns, and the ``skip_completed`` sources the writer may meet."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store
        #: The row key's columns, once a call named them.
        self.row_key: tuple[str, ...] | None = None
        self.kind: str | None = None
        #: skip_completed calls by id (the hidden column's metadata names its source).
        self.row_sources: dict[str, RowSource] = {}

    def claim(self, kind: str, columns: tuple[str, ...] | None = None) -> None:
        """Record that the job uses ``kind`` keys (``"file"`` or ``"row"``); raises on a second kind or key."""
        if self.kind is not None and self.kind != kind:
            raise InvalidArgumentError(
                f"this job already uses {self.kind} keys; one store holds one kind of key. "
                "Use either pending_files/read_parquet (file keys) or skip_completed (row keys)",
                reason="key_definition_conflict",
            )
        if columns is not None and self.row_key is not None and columns != self.row_key:
            raise InvalidArgumentError(
                f"key {list(columns)} differs from the key {list(self.row_key)} this job already used",
                reason="key_definition_conflict",
            )
        self.kind = kind
        if columns is not None:
            self.row_key = columns

    def check_type(self, arrow_type: pa.DataType) -> None:
        stored = self.store.key_type()
        if stored is not None and stored != str(arrow_type):
            raise InvalidArgumentError(
                f"the keys in {self.store.uri} are of type {stored}, this job's keys are {arrow_type}: "
                "the key column changed type between runs. Cast it back to the earlier type, or clear "
                "the store (airflow-ckpt clear) to start over. Nothing was written",
                reason="key_type_mismatch",
            )

    def done_files(self) -> set[str]:
        """The file keys valid checkpoints hold (read on the driver: file lists are small); claims file keys."""
        self.claim("file")
        self.check_type(pa.string())
        if self.store.key_type() is None:
            return set()
        return set(self.store.get_checkpointed_keys().column(0).to_pylist())

    @staticmethod
    def _expression(columns: tuple[str, ...]) -> Column:
        is_null = F.col(columns[0]).isNull()
        for name in columns[1:]:
            is_null = is_null | F.col(name).isNull()
        value = F.col(columns[0]) if len(columns) == 1 else F.struct(*[F.col(c) for c in columns])
        message = (
            f"{NULL_KEY_MARKER}: a row has a null key {list(columns)}; keys identify input, so they cannot be "
            "null. Filter or fill those rows before skip_completed/write"
        )
        return F.when(is_null, F.raise_error(F.lit(message))).otherwise(value)

    def add_source_key(self, df: DataFrame, columns: tuple[str, ...], source_id: str | None = None) -> DataFrame:
        """``df`` with the hidden source-key column taken from ``columns`` (a null key fails the task)."""
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise InvalidArgumentError(
                f"key column(s) {missing} are not in the DataFrame (columns: {df.columns}); name the column(s) "
                "that identify an input record",
                reason="key_column_not_found",
            )
        expression = self._expression(columns)
        if source_id is not None:
            # The writer finds the source's records (unique, buckets, input listing) by this id. A select,
            # not withColumn: Spark Connect's withColumn drops an alias's metadata.
            expression = expression.alias(SOURCE_KEY_COLUMN, metadata={SOURCE_ID_METADATA: source_id})
            with_key = df.select("*", expression)
        else:
            with_key = df.withColumn(SOURCE_KEY_COLUMN, expression)
        arrow_type = normalize_key_type(to_arrow_type(with_key.schema[SOURCE_KEY_COLUMN].dataType))
        self.check_type(arrow_type)
        return with_key

    def prepare(self, df: DataFrame, key: str | Sequence[str] | None) -> tuple[DataFrame, str]:
        """``df`` with its hidden source-key column (added from ``key`` if the source did not), and its name."""
        has_file, has_row = SOURCE_FILE_COLUMN in df.columns, SOURCE_KEY_COLUMN in df.columns
        if has_file and has_row:
            raise InvalidArgumentError(
                "the DataFrame carries both file and row keys; use one kind per store", reason="key_definition_conflict"
            )
        if has_file:
            if key is not None:
                raise InvalidArgumentError(
                    f"the DataFrame comes from read_parquet, whose key is the input file; drop key={key!r}",
                    reason="key_definition_conflict",
                )
            return df, SOURCE_FILE_COLUMN
        if has_row:
            if key is not None and self.row_key is not None and key_columns(key) != self.row_key:
                raise InvalidArgumentError(
                    f"write key {list(key_columns(key))} differs from the key {list(self.row_key)} given to "
                    "skip_completed; the checkpoint records the key as read by skip_completed",
                    reason="key_definition_conflict",
                )
            return df, SOURCE_KEY_COLUMN
        if self.kind is not None:
            hidden = SOURCE_FILE_COLUMN if self.kind == "file" else SOURCE_KEY_COLUMN
            source = "read_parquet" if self.kind == "file" else "skip_completed"
            raise InvalidArgumentError(
                f"the hidden column {hidden} added by {source}"
                " is not in the DataFrame given to the writer, so the writer cannot tell which input key each row "
                "came from. A global aggregation or a select dropped it: aggregate per key and keep it, e.g. "
                f'df.groupBy("<key>", "{hidden}").agg(...), and keep it in every select',
                reason="source_key_lost",
            )
        if key is None:
            raise InvalidArgumentError(
                "no key: pass key='<column>' (or a list of columns), or read the input with "
                "skip_completed(df, key) or read_parquet(paths)",
                reason="key_column_not_found",
            )
        columns = key_columns(key)
        with_key = self.add_source_key(df, columns)
        self.claim("row", columns)
        return with_key, SOURCE_KEY_COLUMN

    def row_source_of(self, df: DataFrame) -> RowSource | None:
        """The ``skip_completed`` call whose hidden column ``df`` carries (None: added by the writer, or lost)."""
        try:
            metadata = df.schema[SOURCE_KEY_COLUMN].metadata or {}
        except (KeyError, ValueError):
            return None
        return self.row_sources.get(str(metadata.get(SOURCE_ID_METADATA, "")))
