"""``CheckpointedJob``: resumable input and checkpointed output inside a PySpark application.

Typical use (submitted by ``CheckpointedSparkSubmitOperator``)::

    job = CheckpointedJob.from_spark(spark)
    df = job.read_parquet(input_files)                  # file keys: done files are never read
    job.write_parquet(transform(df), "s3://lake/out/")  # per task: write, stage, seal

or with row keys::

    df = job.skip_completed(spark.read.parquet(path), key="event_id")
    job.write_parquet(transform(df), out, key="event_id")

Without Airflow, ``CheckpointedJob(spark, store_uri=...)`` opens its own epoch;
then call ``job.finish()`` (or use it as a context manager) and ``job.store.commit()``.

**Keys per mapping.** Between the source and the writer the pipeline may map,
filter and aggregate *by key*, never mix keys: an output row must come from one
input key. A global aggregation, a window or a join across keys breaks resume (a
resumed run would miss the other keys' contributions). Group by the hidden column
too (``df.groupBy("event_id", SOURCE_KEY_COLUMN)``) so it reaches the writer; the
writer raises :class:`SourceKeyLostError` when it is gone.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import StructType

from airflow_ckpt_provider.contract import CONF_WRITER_ENGINE
from airflow_ckpt_provider.spark.errors import (
    KeyColumnNotFoundError,
    KeyDefinitionConflictError,
    KeyNotUniqueError,
    NativeWriterUnavailableError,
    NullKeyError,
    SourceKeyLostError,
    WritePlanMismatchError,
    WriterContractError,
)
from airflow_ckpt_provider.spark.job_settings import DEFAULT_BROADCAST_THRESHOLD, settings_from_conf
from airflow_ckpt_provider.spark.keys import (
    NULL_KEY_MARKER,
    SOURCE_FILE_COLUMN,
    SOURCE_KEY_COLUMN,
    key_columns,
    normalize_key_type,
)
from airflow_ckpt_provider.spark.paths import file_key
from airflow_ckpt_provider.spark.plan import (
    PlanShape,
    clustered_on,
    plan_shape,
    row_key_lineage,
    scan_files,
    source_listing,
)
from airflow_ckpt_provider.spark.readers.file_inputs import FileInputs
from airflow_ckpt_provider.spark.row_source import (
    SOURCE_ID_METADATA,
    DoneInput,
    InputRecords,
    RowSource,
    resolve_done_input,
    without_buckets,
    without_files,
)
from airflow_ckpt_provider.spark.skip import anti_join, done_keys_frame
from airflow_ckpt_provider.spark.summary import WriteSummary, WriteTaskReport, emit_result
from airflow_ckpt_provider.spark.temporary_conf import session_conf
from airflow_ckpt_provider.spark.writers.arrow_parquet import ParquetSink
from airflow_ckpt_provider.spark.writers.arrow_task import REPORT_DDL, TaskSpec, WriterFn, make_task_function
from airflow_ckpt_provider.spark.writers.native import (
    NativeWrite,
    check_engine,
    native_unsupported_reason,
    run_native_write,
)
from airflow_ckpt_provider.spark.writers.native_keys import NativeRowKeys
from airflow_ckpt_provider.store import (
    CheckpointStore,
    EpochFencedError,
    EpochStatus,
    KeyTypeMismatchError,
    NoEpochError,
    StoreUnavailableError,
    open_store,
)

log = logging.getLogger(__name__)


def _spark_error_text(exc: BaseException) -> str:
    parts = [str(exc)]
    java = getattr(exc, "java_exception", None)
    if java is not None:
        parts.append(str(java))
    return "\n".join(parts)


@dataclass(frozen=True)
class _Partitioned:
    """The writer's input, partitioned so that all rows of a key are in one task, and what each task covers."""

    df: DataFrame
    shape: PlanShape
    shuffled: bool
    inputs: InputRecords | None = None
    #: The source declared one row per key (each task checks it before sealing).
    unique: bool = False


class CheckpointedJob:
    """A Spark job whose input keys are skipped once done and whose output is checkpointed per task.

    ``CheckpointedJob(spark, store_uri, epoch=None, owner=None, **store_options)``:
    with ``epoch=None`` it opens the next epoch of the store itself (owner: ``owner``
    or ``spark-app:<app name>``, so a rerun of the same application takes over its
    own unfinished epoch). Raises :class:`EpochConflictError` if another owner's
    epoch is open, :class:`EpochFencedError` if ``epoch`` is not the latest.
    """

    def __init__(
        self,
        spark: SparkSession,
        store_uri: str,
        *,
        epoch: int | None = None,
        owner: str | None = None,
        result_path: str | None = None,
        broadcast_threshold: int = DEFAULT_BROADCAST_THRESHOLD,
        num_partitions: int | None = None,
        **store_options: Any,
    ) -> None:
        self.spark = spark
        self.store: CheckpointStore = open_store(store_uri, **store_options)
        self._options: dict[str, Any] = dict(self.store.options)
        self.result_path = result_path
        self.broadcast_threshold = broadcast_threshold
        self.num_partitions = num_partitions
        self._owns_epoch = epoch is None
        if epoch is None:
            app = spark.sparkContext.appName if hasattr(spark, "sparkContext") else "spark"
            opened = self.store.begin_epoch(
                owner=owner or f"spark-app:{app}", metadata={"opened_by": "CheckpointedJob"}
            )
            epoch = opened.number
        else:
            self._check_epoch(epoch)
        self.epoch: int = epoch
        self._files = FileInputs(spark, self._options)
        self._row_key: tuple[str, ...] | None = None
        #: skip_completed calls by id (the hidden column's metadata names its source).
        self._row_sources: dict[str, RowSource] = {}
        self._skips: list[DoneInput] = []
        self._source_kind: str | None = None
        self._summaries: list[WriteSummary] = []
        self._finished = False

    @classmethod
    def from_spark(cls, spark: SparkSession) -> CheckpointedJob:
        """The job as configured by the Airflow operator (``spark.ckpt.*`` confs, see ``job_settings.py``).

        Raises :class:`MissingStoreConfigError` (how to run without Airflow),
        :class:`InvalidSparkConfError`, :class:`EpochFencedError` (a newer submit began).
        """
        settings = settings_from_conf(lambda name: spark.conf.get(name, None))
        return cls(
            spark,
            settings.store_uri,
            epoch=settings.epoch,
            result_path=settings.result_path,
            broadcast_threshold=settings.broadcast_threshold,
            **settings.store_options,
        )

    # ------------------------------------------------------------------ epoch

    def _check_epoch(self, epoch: int) -> None:
        current = self.store.current_epoch()
        if current is None or current.number < epoch:
            raise NoEpochError(
                f"epoch {epoch} does not exist in {self.store.uri}: the operator opens it before submitting; "
                "without Airflow, leave epoch=None so the job opens its own"
            )
        if current.number != epoch:
            raise EpochFencedError(
                f"epoch {epoch} of {self.store.uri} was superseded by epoch {current.number}: a newer submit "
                "owns the store, so this driver stops before reading or writing anything"
            )

    @property
    def degraded(self) -> bool:
        """True if checkpointing was off anywhere in this job (an executor's or the driver's breaker)."""
        return self.store.degraded or any(s.degraded for s in self._summaries)

    # ------------------------------------------------------------------ keys

    def _claim_kind(self, kind: str, columns: tuple[str, ...] | None = None) -> None:
        if self._source_kind is not None and self._source_kind != kind:
            raise KeyDefinitionConflictError(
                f"this job already uses {self._source_kind} keys; one store holds one kind of key. "
                "Use either pending_files/read_parquet (file keys) or skip_completed (row keys)"
            )
        if columns is not None and self._row_key is not None and columns != self._row_key:
            raise KeyDefinitionConflictError(
                f"key {list(columns)} differs from the key {list(self._row_key)} this job already used"
            )
        self._source_kind = kind
        if columns is not None:
            self._row_key = columns

    def _check_key_type(self, arrow_type: pa.DataType) -> None:
        stored = self.store.key_type()
        if stored is not None and stored != str(arrow_type):
            raise KeyTypeMismatchError(
                f"the keys in {self.store.uri} are of type {stored}, this job's keys are {arrow_type}: "
                "the key column changed type between runs. Cast it back to the earlier type, or clear "
                "the store (airflow-ckpt clear) to start over. Nothing was written"
            )

    @staticmethod
    def _source_key_expression(columns: tuple[str, ...]) -> Column:
        is_null = F.col(columns[0]).isNull()
        for name in columns[1:]:
            is_null = is_null | F.col(name).isNull()
        value = F.col(columns[0]) if len(columns) == 1 else F.struct(*[F.col(c) for c in columns])
        message = (
            f"{NULL_KEY_MARKER}: a row has a null key {list(columns)}; keys identify input, so they cannot be "
            "null. Filter or fill those rows before skip_completed/write"
        )
        return F.when(is_null, F.raise_error(F.lit(message))).otherwise(value)

    def _add_source_key(self, df: DataFrame, columns: tuple[str, ...], source_id: str | None = None) -> DataFrame:
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise KeyColumnNotFoundError(
                f"key column(s) {missing} are not in the DataFrame (columns: {df.columns}); name the column(s) "
                "that identify an input record"
            )
        expression = self._source_key_expression(columns)
        if source_id is not None:
            # The writer finds the source's records (unique, buckets, input listing) by this id.
            expression = expression.alias(SOURCE_KEY_COLUMN, metadata={SOURCE_ID_METADATA: source_id})
        with_key = df.withColumn(SOURCE_KEY_COLUMN, expression)
        arrow_type = normalize_key_type(to_arrow_type(with_key.schema[SOURCE_KEY_COLUMN].dataType))
        self._check_key_type(arrow_type)
        return with_key

    # ------------------------------------------------------------------ file-level resume

    def pending_files(self, paths: Iterable[str]) -> list[str]:
        """The paths whose file key no valid checkpoint holds, in the given order, duplicates dropped.

        The key of a file is its normalized URI (``paths.file_key``). Reads the
        store's done keys on the driver (file lists are small). Raises
        :class:`KeyTypeMismatchError` if the store holds non-file keys.
        """
        paths = list(paths)
        self._claim_kind("file")
        self._check_key_type(pa.string())
        done: set[str] = set()
        if self.store.key_type() is not None:
            done = set(self.store.get_checkpointed_keys().column(0).to_pylist())
        return self._files.select_pending(paths, done)

    def read_parquet(
        self,
        paths: Iterable[str],
        *,
        schema: StructType | None = None,
        reader: str = "auto",
        max_partition_bytes: int | None = None,
        min_partitions: int | None = None,
        batch_rows: int = 65536,
    ) -> DataFrame:
        """Read the *pending* Parquet files among ``paths``; rows carry their file key (hidden).

        Done files are never opened, except one footer for the schema when every
        file is done and no ``schema`` is given. Every file is read whole by one
        Spark task, so a writer right after needs no shuffle:

        * ``reader="spark"``: Spark's own Parquet scan (fast, vectorized), used only if
          it splits no file across tasks (files up to ``spark.sql.files.maxPartitionBytes``);
        * ``reader="pyarrow"``: pyarrow on the executors, files grouped to about
          ``max_partition_bytes`` into at least ``min_partitions`` tasks (default 2 x
          the default parallelism); reads ``s3://`` with the store's endpoint and
          credentials when Spark has no S3 connector;
        * ``reader="auto"`` (default): Spark's scan when it can, else pyarrow.

        Raises :class:`InputFilesError`.
        """
        paths = list(paths)
        todo = self.pending_files(paths)
        return self._files.read_parquet(
            paths,
            todo,
            schema=schema,
            reader=reader,
            max_partition_bytes=max_partition_bytes,
            min_partitions=min_partitions,
            batch_rows=batch_rows,
        )

    # ------------------------------------------------------------------ row-level resume

    def skip_completed(
        self,
        df: DataFrame,
        key: str | Sequence[str],
        *,
        unique: bool = False,
        num_partitions: int | None = None,
    ) -> DataFrame:
        """``df`` without the rows whose key is done, with the hidden source-key column, partitioned for progress.

        ``key``: a column, or a list of columns for a composite key (stored as a
        struct). The hidden column keeps the key exactly as read, so rewriting the key
        column later does not change what is checkpointed.

        Every task that runs your transformation on the result becomes one checkpoint,
        so a failure in your code keeps the work of the tasks that finished
        (docs/row-keys.md):

        * ``unique=True``: you declare that each key is in one row of the input (an
          event id, an order id). No shuffle at all: each task of the source's stage
          is a checkpoint (``num_partitions``: read a file source in at least that many
          tasks). A task meeting a key twice fails with :class:`KeyNotUniqueError`
          before sealing;
        * ``unique=False`` (default): rows are hash-partitioned by the key into
          ``num_partitions`` (default ``spark.sql.shuffle.partitions``) here, before
          your transformation, unless the plan shows them grouped by key already.

        On a rerun, input files that a finished task read whole and that did not change
        are not read again; done keys are anti-joined only where the records of the
        finished tasks do not vouch for them. A null key fails the job with
        :class:`NullKeyError` before any output is written. Raises
        :class:`KeyColumnNotFoundError`, :class:`KeyTypeMismatchError`.
        """
        columns = key_columns(key)
        if SOURCE_FILE_COLUMN in df.columns:
            raise KeyDefinitionConflictError(
                "this DataFrame comes from read_parquet (file keys); skip_completed adds row keys. "
                "Use one kind of key per store"
            )
        source_df = df.drop(SOURCE_KEY_COLUMN)
        missing = [c for c in columns if c not in source_df.columns]
        if missing:
            raise KeyColumnNotFoundError(
                f"key column(s) {missing} are not in the DataFrame (columns: {source_df.columns}); name the "
                "column(s) that identify an input record"
            )
        grouped = not unique and clustered_on(source_df, columns)
        buckets = None
        if not unique and not grouped:
            buckets = num_partitions or self.num_partitions or self._shuffle_partitions()
        source = RowSource(
            columns,
            unique,
            buckets,
            grouped=grouped,
            listing=source_listing(source_df),
            min_tasks=num_partitions if unique else None,
        )
        self._claim_kind("row", columns)
        progress = self.store.progress()
        done = DoneInput()
        if progress.keys_done or progress.valid_checkpoints:
            valid = self.store.valid_checkpoints()
            snapshot_keys = max(0, progress.keys_done - sum(c.num_keys for c in valid))
            done = resolve_done_input(valid, snapshot_keys=snapshot_keys, source=source)
        if unique and done.needs_keys and progress.keys_done > self.broadcast_threshold:
            # A sort-merge anti-join shuffles anyway; a fixed repartition after it keeps keys in place.
            buckets = num_partitions or self.num_partitions or self._shuffle_partitions()
            source = dataclasses.replace(source, buckets=buckets)
        pruned = without_files(source_df, done.prune)
        if pruned is None:
            pruned, done = source_df, dataclasses.replace(done, prune=frozenset(), needs_keys=True)
        with_key = self._add_source_key(pruned, columns, source.source_id)
        self._row_sources[source.source_id] = source
        if buckets is not None:
            with_key = without_buckets(with_key, buckets, done.buckets)
        log.info("skip_completed(%s): %s", list(columns), done.describe())
        self._skips.append(done)
        if done.needs_keys:
            frame = done_keys_frame(
                self.spark,
                self.store,
                with_key.schema[SOURCE_KEY_COLUMN].dataType,
                broadcast_threshold=self.broadcast_threshold,
                num_keys=progress.keys_done,
            )
            with_key = anti_join(with_key, frame)
        if buckets is not None:
            # After the anti-join: its own shuffle (when the keys are many) may be split by adaptive
            # execution; a repartition to a fixed number is never split or coalesced.
            with_key = with_key.repartition(buckets, F.col(SOURCE_KEY_COLUMN))
        return with_key

    def _shuffle_partitions(self) -> int:
        return int(self.spark.conf.get("spark.sql.shuffle.partitions", "200") or 200)

    # ------------------------------------------------------------------ co-partitioning

    def _prepare(self, df: DataFrame, key: str | Sequence[str] | None) -> tuple[DataFrame, str]:
        """``df`` with its hidden source-key column (added from ``key`` if the source did not)."""
        has_file, has_row = SOURCE_FILE_COLUMN in df.columns, SOURCE_KEY_COLUMN in df.columns
        if has_file and has_row:
            raise KeyDefinitionConflictError("the DataFrame carries both file and row keys; use one kind per store")
        if has_file:
            if key is not None:
                raise KeyDefinitionConflictError(
                    f"the DataFrame comes from read_parquet, whose key is the input file; drop key={key!r}"
                )
            return df, SOURCE_FILE_COLUMN
        if has_row:
            if key is not None and self._row_key is not None and key_columns(key) != self._row_key:
                raise KeyDefinitionConflictError(
                    f"write key {list(key_columns(key))} differs from the key {list(self._row_key)} given to "
                    "skip_completed; the checkpoint records the key as read by skip_completed"
                )
            return df, SOURCE_KEY_COLUMN
        if self._source_kind is not None:
            hidden = SOURCE_FILE_COLUMN if self._source_kind == "file" else SOURCE_KEY_COLUMN
            source = "read_parquet" if self._source_kind == "file" else "skip_completed"
            raise SourceKeyLostError(
                f"the hidden column {hidden} added by {source}"
                " is not in the DataFrame given to the writer, so the writer cannot tell which input key each row "
                "came from. A global aggregation or a select dropped it: aggregate per key and keep it, e.g. "
                f'df.groupBy("<key>", "{hidden}").agg(...), and keep it in every select'
            )
        if key is None:
            raise KeyColumnNotFoundError(
                "no key: pass key='<column>' (or a list of columns), or read the input with "
                "skip_completed(df, key) or read_parquet(paths)"
            )
        columns = key_columns(key)
        with_key = self._add_source_key(df, columns)
        self._claim_kind("row", columns)
        return with_key, SOURCE_KEY_COLUMN

    def _co_partition(self, df: DataFrame, column: str, num_partitions: int | None) -> _Partitioned:
        if column == SOURCE_KEY_COLUMN:
            rows = self._row_key_partitioning(df)
            if rows is not None:
                log.info("no shuffle before the writer: %s", rows.shape.reason)
                return rows
            shape = PlanShape(False, None, None, "rows are not grouped by the source key on the way to the writer")
        else:
            shape = plan_shape(df, column, file_keyed=True, reader_tasks=self._files.reader_tasks)
            if shape.grouped:
                log.info("no shuffle before the writer: %s", shape.reason)
                return _Partitioned(df, shape, False)
        count = num_partitions or self.num_partitions or self._shuffle_partitions()
        log.info("hash-partitioning on the source key into %d tasks (%s)", count, shape.reason)
        shuffled = df.repartition(count, F.col(column))
        return _Partitioned(shuffled, PlanShape(True, count, None, "hash-partitioned by the writer"), True)

    def _row_source_of(self, df: DataFrame) -> RowSource | None:
        """The ``skip_completed`` call whose hidden column ``df`` carries (None: added by the writer, or lost)."""
        try:
            metadata = df.schema[SOURCE_KEY_COLUMN].metadata or {}
        except (KeyError, ValueError):
            return None
        return self._row_sources.get(str(metadata.get(SOURCE_ID_METADATA, "")))

    def _row_key_partitioning(self, df: DataFrame) -> _Partitioned | None:
        """How row-keyed ``df`` reaches the writer without a shuffle, and what each task covers; None: shuffle.

        Without a shuffle when, on the way from where the key was taken: rows were
        repartitioned by it and stayed in their task since (``skip_completed``'s exchange),
        or never left their task and the source declared unique keys (or was grouped).
        """
        source = self._row_source_of(df)
        unique = source is not None and source.unique
        lineage = row_key_lineage(df, SOURCE_KEY_COLUMN)
        if lineage.moved:
            if source is not None:
                log.warning(
                    "rows move between skip_completed and the writer (%s): the writer shuffles them by key, so a "
                    "failure before that shuffle keeps no progress. Keep the pipeline narrow (docs/row-keys.md)",
                    lineage.moved,
                )
            return None
        if lineage.hashed is not None:
            count = None if lineage.coalesced else lineage.hashed
            inputs = None
            if source is not None and source.digest and source.buckets and source.buckets == count:
                inputs = InputRecords(source.digest, buckets=source.buckets)
            shape = PlanShape(True, count, None, f"repartitioned by the source key into {lineage.hashed}")
            return _Partitioned(df, shape, False, inputs, unique)
        if source is None or not (source.unique or source.grouped):
            return None
        task_files = None
        if lineage.scan is not None and not lineage.coalesced:
            try:
                task_files = scan_files(lineage.scan, self.spark.sparkContext._jvm)
            except Exception as exc:  # an internal API that moved costs the input records, not the write
                log.info("could not read the scan's files per task (%s); checkpoints record keys only", exc)
        inputs = InputRecords(source.digest, task_files=task_files) if source.digest and task_files else None
        why = "each key is in one row" if source.unique else "the source is grouped by key"
        count = len(task_files) if task_files is not None else None
        return _Partitioned(df, PlanShape(True, count, None, f"no shuffle: {why}"), False, inputs, unique)

    def co_partition(
        self, df: DataFrame, key: str | Sequence[str] | None = None, *, num_partitions: int | None = None
    ) -> DataFrame:
        """``df`` with all rows of each source key in one partition (a shuffle only if needed).

        Use it before expensive per-key work so the writer needs no second shuffle.
        Map-like steps that keep Spark's partitioning (``mapInArrow``, ``filter``,
        ``select`` keeping the hidden column) may follow.
        """
        prepared, column = self._prepare(df, key)
        return self._co_partition(prepared, column, num_partitions).df

    # ------------------------------------------------------------------ writers

    def write_parquet(
        self,
        df: DataFrame,
        path: str,
        *,
        key: str | Sequence[str] | None = None,
        partition_by: Sequence[str] | None = None,
        compression: str = "snappy",
        num_partitions: int | None = None,
        max_records_per_file: int | None = None,
        engine: str | None = None,
    ) -> WriteSummary:
        """Write ``df`` as Parquet under ``path`` (local or ``s3://``), checkpointed per task.

        Each task writes its own files directly (names unique per attempt, recorded
        as intents before they exist), and one checkpoint per Spark partition records
        their metadata and the distinct source keys the task consumed. Files appear
        under ``path`` at once, but only the commit makes them authoritative (it
        deletes the files of failed, duplicate and zombie attempts).

        ``engine`` (default: the conf ``spark.ckpt.writer.engine``, else ``"auto"``):

        * ``"spark"``: Spark's own Parquet writer, about as fast as ``df.write.parquet``
          (the rows never leave the JVM; the driver seals each task's checkpoint as
          Spark reports it done). Needs file keys read whole per task with no shuffle
          before the writer (``read_parquet`` + narrow transformations) and an output
          Spark can write (local disk, or ``s3a://`` where the cluster has it); see
          :mod:`airflow_ckpt_provider.spark.writers.native`;
        * ``"arrow"``: every task converts its rows to Arrow and writes with pyarrow
          (row keys, any pipeline, ``s3://`` without a Hadoop S3 connector);
        * ``"auto"``: ``"spark"`` when it can, else ``"arrow"`` (the log says why).

        ``key``: needed only when the source was not read with ``skip_completed`` or
        ``read_parquet``. Not idempotent by itself: a rerun processes only keys no
        valid checkpoint holds. Raises (before writing anything)
        :class:`KeyColumnNotFoundError`, :class:`KeyTypeMismatchError`,
        :class:`SourceKeyLostError`, :class:`NullKeyError`,
        :class:`NativeWriterUnavailableError` (``engine="spark"`` where it cannot run);
        :class:`EpochFencedError` if a newer submit took over the store.
        """
        chosen = check_engine(engine or str(self.spark.conf.get(CONF_WRITER_ENGINE, None) or "auto"))
        partition_by = tuple(partition_by or ())
        missing = [c for c in partition_by if c not in df.columns]
        if missing:
            raise KeyColumnNotFoundError(f"partition_by column(s) {missing} are not in the DataFrame ({df.columns})")
        sink = ParquetSink(
            partition_by=partition_by, compression=compression, max_records_per_file=max_records_per_file
        )
        return self._write(df, sink, key=key, output=path, num_partitions=num_partitions, engine=chosen)

    def write(
        self,
        df: DataFrame,
        writer_fn: WriterFn,
        *,
        output: str,
        key: str | Sequence[str] | None = None,
        num_partitions: int | None = None,
    ) -> WriteSummary:
        """Run ``writer_fn(batches, ctx) -> list[FileMetadata]`` once per co-partitioned task.

        ``writer_fn`` gets an iterator of Arrow batches (hidden columns dropped) and
        a :class:`WriteContext`; it must consume every batch and call
        ``ctx.record_intent(uri)`` before creating each file under ``output`` (or use
        ``ctx.open_output_stream``). The task then stages, seals, and cleans up on
        failure exactly as :meth:`write_parquet`. Raises as :meth:`write_parquet` and
        :class:`WriterContractError`.
        """
        return self._write(df, writer_fn, output=output, key=key, num_partitions=num_partitions, engine="arrow")

    def _write(
        self,
        df: DataFrame,
        writer_fn: WriterFn,
        *,
        output: str,
        key: str | Sequence[str] | None,
        num_partitions: int | None,
        engine: str,
    ) -> WriteSummary:
        output_root = file_key(output).rstrip("/")
        self._declare_output_root(output_root)
        prepared, column = self._prepare(df, key)
        source = self._row_source_of(prepared) if column == SOURCE_KEY_COLUMN else None
        min_tasks = source.min_tasks if source is not None and source.unique else None
        # The driver sees every seal: it folds them into segments as they come (docs/store-api.md, "Segments").
        with self._pinned_file_packing(min_tasks), self.store.background_compaction():
            return self._write_partitioned(prepared, column, writer_fn, output_root, num_partitions, engine)

    def _declare_output_root(self, output_root: str) -> None:
        """Declare, on the driver and before any task writes, where this write puts its files: only
        there may commit, discard and clear ever delete (docs/design.md, section 7). Executors
        never declare. A store failure only degrades the run (its orphans are then kept); a root the
        operator's ``output_roots`` do not cover stops the write before it starts."""
        if self.store.breaker.tripped:
            return
        try:
            self.store.declare_output_root(self.epoch, output_root)
        except (StoreUnavailableError, OSError) as exc:
            self.store.breaker.record_failure("declare_output_root", exc)
            log.warning("could not declare output root %s (%s): its orphans will be kept", output_root, exc)
            return
        self.store.breaker.record_success()

    @contextmanager
    def _pinned_file_packing(self, min_tasks: int | None = None) -> Iterator[None]:
        """Keep Spark's packing of input files into tasks fixed from plan inspection to execution.

        The writer learns each task's input files from the plan; Spark packs files by
        ``spark.sql.files.minPartitionNum`` (default: the cluster's cores, which grow as
        executors register). Pinning it makes the executed plan pack as the inspected one.
        ``min_tasks`` (unique row keys' ``num_partitions``): read the input in at least that
        many tasks — each is a checkpoint, so smaller ones lose less to a failure.
        """
        name = "spark.sql.files.minPartitionNum"
        if self.spark.conf.get(name, None):
            yield
            return
        try:
            cores = int(self.spark.conf.get("spark.sql.leafNodeDefaultParallelism", None) or 0)
            cores = cores or int(self.spark.sparkContext.defaultParallelism)
        except Exception:
            yield
            return
        with session_conf(self.spark, name, str(max(cores, min_tasks or 0))):
            yield

    def _write_partitioned(
        self,
        prepared: DataFrame,
        column: str,
        writer_fn: WriterFn,
        output_root: str,
        num_partitions: int | None,
        engine: str,
    ) -> WriteSummary:
        plan = self._co_partition(prepared, column, num_partitions)
        partitioned, shape, shuffled = plan.df, plan.shape, plan.shuffled
        driver_degraded = False
        if shape.num_partitions is not None:
            driver_degraded = not self._set_expected(shape.num_partitions)
        task_files = None
        if shape.task_files is not None:
            task_files = tuple(tuple(file_key(p) for p in files) for files in shape.task_files)
            # Task p reads exactly these files: the per-row key column need not travel to the writer.
            partitioned = partitioned.drop(SOURCE_FILE_COLUMN)
        row_keyed = column == SOURCE_KEY_COLUMN
        if engine != "arrow" and isinstance(writer_fn, ParquetSink):
            spark_path, why_not = native_unsupported_reason(self.spark, task_files, output_root, row_keys=row_keyed)
            if spark_path is not None:
                return self._write_native(partitioned, writer_fn, output_root, spark_path, task_files, plan)
            # A resumed run whose input is all done has nothing to write: no plan to inspect, no error.
            if engine == "spark" and not partitioned.isEmpty():
                raise NativeWriterUnavailableError(
                    f"engine='spark' cannot write {output_root}: {why_not}. Use engine='auto' (falls back to the "
                    "Arrow writer) or engine='arrow'. Nothing was written"
                )
            log.info("writing %s with the Arrow writer: %s", output_root, why_not)
        spec = TaskSpec(
            store_uri=self.store.uri,
            store_options=self._options,
            epoch=self.epoch,
            output_root=output_root,
            writer=writer_fn,
            key_column=column,
            file_keyed=column == SOURCE_FILE_COLUMN,
            file_registry=tuple(self._files.registry) if column == SOURCE_FILE_COLUMN else None,
            task_files=task_files,
            unique_keys=plan.unique,
            key_columns=self._row_key or (),
            inputs=plan.inputs,
        )
        self.spark.sparkContext.setJobDescription(f"checkpointed write to {output_root} (epoch {self.epoch})")
        started = time.monotonic()
        try:
            rows = partitioned.mapInArrow(make_task_function(spec), REPORT_DDL).collect()
        except Exception as exc:
            translated = self._translate(exc)
            if translated is None:
                raise
            raise translated from exc
        finally:
            self.spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]
        reports = [WriteTaskReport.from_row(row.asDict()) for row in rows]
        if shape.num_partitions != len(reports):
            driver_degraded = not self._set_expected(len(reports)) or driver_degraded
        return self._record_write(
            reports,
            output_root=output_root,
            expected_partitions=len(reports),
            started=started,
            shuffled=shuffled,
            driver_degraded=driver_degraded,
            engine="arrow",
        )

    def _record_write(
        self,
        reports: list[WriteTaskReport],
        *,
        output_root: str,
        expected_partitions: int,
        started: float,
        shuffled: bool,
        driver_degraded: bool,
        engine: str,
    ) -> WriteSummary:
        """The write's summary, recorded: degraded flag in the store, the job's result re-emitted."""
        summary = WriteSummary.from_reports(
            reports,
            epoch=self.epoch,
            output=output_root,
            expected_partitions=expected_partitions,
            seconds=time.monotonic() - started,
            shuffled=shuffled,
            driver_degraded=driver_degraded,
            engine=engine,
        )
        if summary.degraded:
            self.store.mark_degraded(self.epoch, f"checkpointing was off in {output_root} (breaker tripped)")
        self._summaries.append(summary)
        self._emit()
        return summary

    def _write_native(
        self,
        partitioned: DataFrame,
        sink: ParquetSink,
        output_root: str,
        spark_path: str,
        task_files: tuple[tuple[str, ...], ...] | None,
        plan: _Partitioned,
    ) -> WriteSummary:
        row_keys = None
        if task_files is None:
            key_type = normalize_key_type(to_arrow_type(partitioned.schema[SOURCE_KEY_COLUMN].dataType))
            row_keys = NativeRowKeys(key_type, plan.unique, plan.inputs, self._row_key or ())
            hidden = [SOURCE_FILE_COLUMN] if SOURCE_FILE_COLUMN in partitioned.columns else []
        else:
            hidden = [c for c in (SOURCE_KEY_COLUMN, SOURCE_FILE_COLUMN) if c in partitioned.columns]
        write = NativeWrite(
            store=self.store,
            epoch=self.epoch,
            output_root=output_root,
            spark_path=spark_path,
            task_files=task_files,
            partition_by=sink.partition_by,
            compression=sink.compression,
            max_records_per_file=sink.max_records_per_file,
            row_keys=row_keys,
        )
        started = time.monotonic()
        try:
            result = run_native_write(self.spark, partitioned.drop(*hidden) if hidden else partitioned, write)
        except EpochFencedError:
            raise
        except Exception as exc:
            translated = self._translate(exc)
            if translated is None:
                raise
            raise translated from exc
        driver_degraded = not result.intent_recorded
        expected = len(task_files) if task_files is not None else result.job_tasks
        if plan.shape.num_partitions != expected and expected >= 0:
            driver_degraded = not self._set_expected(expected) or driver_degraded
        missing = sorted(set(range(max(expected, 0))) - {r.partition for r in result.reports})
        if expected < 0 or missing:
            # Spark commits every task, even one without rows; a task it did not report cannot be sealed
            # (its input would count as done without its output). Fail: a rerun redoes exactly those.
            raise WritePlanMismatchError(
                f"the Spark writer reported no committed task for partitions {missing[:10] or '(unknown)'} of "
                f"{output_root}; their input stays pending and their files are orphans the commit deletes. "
                "Run the job again"
            )
        return self._record_write(
            result.reports,
            output_root=output_root,
            expected_partitions=expected,
            started=started,
            shuffled=plan.shuffled,
            driver_degraded=driver_degraded,
            engine="spark",
        )

    def _set_expected(self, count: int) -> bool:
        try:
            self.store.set_expected_partitions(self.epoch, count)
            return True
        except (StoreUnavailableError, OSError) as exc:
            log.warning("could not record the expected partition count (%s); progress will lack it", exc)
            return False

    def _translate(self, exc: BaseException) -> Exception | None:
        text = _spark_error_text(exc)
        if NULL_KEY_MARKER in text:
            columns = list(self._row_key or ())
            return NullKeyError(
                f"some rows have a null key {columns}: keys identify input, so they cannot be null. Filter or "
                "fill them before skip_completed/write. Those rows' tasks wrote nothing"
            )
        if "EpochFencedError" in text:
            return EpochFencedError(
                f"epoch {self.epoch} of {self.store.uri} was superseded while this job ran: a newer submit took "
                "over the store; this run's remaining work is the new run's"
            )
        if "WriterContractError" in text:
            start = text.find("WriterContractError")
            return WriterContractError(text[start : start + 600])
        if "KeyNotUniqueError" in text:
            start = text.find("KeyNotUniqueError")
            return KeyNotUniqueError(text[start + len("KeyNotUniqueError: ") : start + 600])
        return None

    # ------------------------------------------------------------------ result

    def result(self) -> dict[str, Any]:
        """The job's machine-readable result: what the operator passes to the commit (``degraded``)."""
        writes = [s.to_json() for s in self._summaries]
        return {
            "store_uri": self.store.uri,
            "epoch": self.epoch,
            "degraded": self.degraded,
            "rows": sum(s.rows for s in self._summaries),
            "files": sum(s.files for s in self._summaries),
            "keys": sum(s.keys for s in self._summaries),
            "sealed_partitions": sum(s.sealed_partitions for s in self._summaries),
            "input": self._files.stats(),
            "writes": writes,
        }

    def _emit(self) -> None:
        try:
            emit_result(self.result(), self.result_path, self._options)
        except OSError as exc:
            log.warning("could not write the job result to %s: %s", self.result_path, exc)

    def finish(self, *, succeeded: bool = True) -> dict[str, Any]:
        """Emit the result; if this job opened its own epoch, record how it ended. Idempotent."""
        result = self.result()
        if self._finished:
            return result
        self._finished = True
        self._emit()
        if self._owns_epoch:
            status = EpochStatus.SUCCEEDED if succeeded else EpochStatus.FAILED
            self.store.end_epoch(
                self.epoch, status=status, summary={k: result[k] for k in ("rows", "keys", "degraded")}
            )
        return result

    def __enter__(self) -> CheckpointedJob:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.finish(succeeded=exc_type is None)
