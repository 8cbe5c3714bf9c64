"""``CheckpointedJob``: the facade a PySpark application calls (see the package's docstring).

It owns the epoch and the job's result; keys, the row-key source, partitioning and
writing are each one module of this package, sharing a :class:`JobContext`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from airflow_ckpt_provider.contract import CONF_WRITER_ENGINE
from airflow_ckpt_provider.spark.backend import session_backend
from airflow_ckpt_provider.spark.job import row_skip, skip_audit
from airflow_ckpt_provider.spark.job.context import JobContext
from airflow_ckpt_provider.spark.job.partitioning import co_partition
from airflow_ckpt_provider.spark.job.source_keys import SourceKeys
from airflow_ckpt_provider.spark.job.write_pipeline import WritePipeline
from airflow_ckpt_provider.spark.job_settings import DEFAULT_BROADCAST_THRESHOLD, settings_from_conf
from airflow_ckpt_provider.spark.readers.file_inputs import FileInputs
from airflow_ckpt_provider.spark.row_source import DoneInput
from airflow_ckpt_provider.spark.summary import WriteSummary, emit_result
from airflow_ckpt_provider.spark.writers.arrow_parquet import ParquetSink
from airflow_ckpt_provider.spark.writers.arrow_task import WriterFn
from airflow_ckpt_provider.spark.writers.native import check_engine
from airflow_ckpt_provider.store import CheckpointStore, EpochStatus, open_store
from airflow_ckpt_provider.store.errors import EpochConflictError, InvalidArgumentError, UnsupportedError

log = logging.getLogger(__name__)


class CheckpointedJob:
    """A Spark job whose input keys are skipped once done and whose output is checkpointed per task.

    ``CheckpointedJob(spark, store_uri, epoch=None, owner=None, **store_options)``:
    with ``epoch=None`` it opens the next epoch of the store itself (owner: ``owner``
    or ``spark-app:<app name>``, so a rerun of the same application takes over its
    own unfinished epoch). Raises :class:`EpochConflictError` if another owner's
    epoch is open, :class:`EpochConflictError` (``epoch_fenced``) if ``epoch`` is not the latest.
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
        self.backend = session_backend(spark)
        # Over Spark Connect: the server's Python must run this package, checked before anything is written.
        self.backend.check_server()
        self.store: CheckpointStore = open_store(store_uri, **store_options)
        self._options: dict[str, Any] = dict(self.store.options)
        self.result_path = result_path
        self._owns_epoch = epoch is None
        if epoch is None:
            app = self.backend.app_name()
            opened = self.store.epochs.begin(
                owner=owner or f"spark-app:{app}",
                metadata={"opened_by": "CheckpointedJob", **self.backend.epoch_metadata()},
            )
            epoch = opened.number
        else:
            self._check_epoch(epoch)
        self.epoch: int = epoch
        self._files = FileInputs(spark, self.backend, self._options)
        self._context = JobContext(
            spark=spark,
            backend=self.backend,
            store=self.store,
            epoch=epoch,
            options=self._options,
            files=self._files,
            keys=SourceKeys(self.store),
            broadcast_threshold=broadcast_threshold,
            num_partitions=num_partitions,
        )
        self._writes = WritePipeline(self._context, record=self._record_summary)
        #: What each skip_completed call skipped (in call order).
        self._skips: list[DoneInput] = []
        self._summaries: list[WriteSummary] = []
        self._finished = False

    @property
    def broadcast_threshold(self) -> int:
        """Up to this many done keys are broadcast to the anti-join; more are joined by sort-merge."""
        return self._context.broadcast_threshold

    @broadcast_threshold.setter
    def broadcast_threshold(self, value: int) -> None:
        self._context.broadcast_threshold = value

    @property
    def num_partitions(self) -> int | None:
        """Tasks where rows are hash-partitioned by key (None: ``spark.sql.shuffle.partitions``)."""
        return self._context.num_partitions

    @num_partitions.setter
    def num_partitions(self, value: int | None) -> None:
        self._context.num_partitions = value

    @classmethod
    def from_spark(cls, spark: SparkSession) -> CheckpointedJob:
        """The job as configured by the Airflow operator (``spark.ckpt.*`` confs, see ``job_settings.py``).

        Raises :class:`InvalidArgumentError` (``missing_store_conf``) (how to run without Airflow),
        :class:`InvalidArgumentError` (``spark_conf``), :class:`EpochConflictError` (``epoch_fenced``) (a newer
        submit began).
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
        current = self.store.epochs.current()
        if current is None or current.number < epoch:
            raise InvalidArgumentError(
                f"epoch {epoch} does not exist in {self.store.uri}: the operator opens it before submitting; "
                "without Airflow, leave epoch=None so the job opens its own",
                reason="no_epoch",
            )
        if current.number != epoch:
            raise EpochConflictError(
                f"epoch {epoch} of {self.store.uri} was superseded by epoch {current.number}: a newer submit "
                "owns the store, so this driver stops before reading or writing anything",
                reason="epoch_fenced",
            )

    @property
    def degraded(self) -> bool:
        """True if checkpointing was off anywhere in this job (an executor's or the driver's breaker)."""
        return self.store.degraded or any(s.degraded for s in self._summaries)

    # ------------------------------------------------------------------ file-level resume

    def pending_files(self, paths: Iterable[str]) -> list[str]:
        """The paths whose file key no valid checkpoint holds, in the given order, duplicates dropped.

        The key of a file is its normalized URI (``paths.file_key``). Reads the
        store's done keys on the driver (file lists are small). Raises
        :class:`InvalidArgumentError` (``key_type_mismatch``) if the store holds non-file keys.
        """
        paths = list(paths)
        self._context.keys.claim("file")
        self._context.keys.check_type(pa.string())
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

        Raises :class:`InvalidArgumentError` (``unreadable_input``).
        """
        paths = list(paths)
        if reader == "spark" and self.backend.kind == "connect":
            raise UnsupportedError(
                "read_parquet(reader='spark') needs Spark's per-task file packing, which Spark Connect does not "
                "show: use reader='auto' (the pyarrow reader, whole files per task). Nothing was read or written",
                reason="connect_unsupported",
            )
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
          tasks; a rerun reads what is left in its share of them, never fewer than the
          cluster's cores). A task meeting a key twice fails with :class:`InvalidArgumentError` (``key_not_unique``)
          before sealing;
        * ``unique=False`` (default): rows are hash-partitioned by the key into
          ``num_partitions`` (default ``spark.sql.shuffle.partitions``) here, before
          your transformation, unless the plan shows them grouped by key already.

        On a rerun, input files that a finished task read whole and that did not change
        are not read again; done keys are anti-joined only where the records of the
        finished tasks do not vouch for them. A null key fails the job with
        :class:`InvalidArgumentError` (``null_key``) before any output is written. Raises
        :class:`InvalidArgumentError` (``key_column_not_found``), :class:`InvalidArgumentError` (``key_type_mismatch``).
        """
        pending, skipped = row_skip.skip_completed(self._context, df, key, unique=unique, num_partitions=num_partitions)
        self._skips.append(skipped)
        return pending

    # ------------------------------------------------------------------ co-partitioning

    def co_partition(
        self, df: DataFrame, key: str | Sequence[str] | None = None, *, num_partitions: int | None = None
    ) -> DataFrame:
        """``df`` with all rows of each source key in one partition (a shuffle only if needed).

        Use it before expensive per-key work so the writer needs no second shuffle.
        Map-like steps that keep Spark's partitioning (``mapInArrow``, ``filter``,
        ``select`` keeping the hidden column) may follow.
        """
        prepared, column = self._context.keys.prepare(df, key)
        return co_partition(self._context, prepared, column, num_partitions).df

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
          before the writer (``read_parquet`` + narrow transformations), or row keys
          (``skip_completed``: the JVM records each task's keys as it writes them), and
          an output Spark can write (local disk, or ``s3a://`` where the cluster has
          it); see :mod:`airflow_ckpt_provider.spark.writers.native`;
        * ``"arrow"``: every task converts its rows to Arrow and writes with pyarrow
          (any pipeline, ``s3://`` without a Hadoop S3 connector);
        * ``"auto"``: ``"spark"`` when it can, else ``"arrow"`` (the log says why).

        ``key``: needed only when the source was not read with ``skip_completed`` or
        ``read_parquet``. Not idempotent by itself: a rerun processes only keys no
        valid checkpoint holds. A key given here (not taken at the read) makes the writer
        hash-partition the rows by it, so a failure anywhere before the writer (the user's
        own transformation) keeps no progress: the log warns before the job runs; take the
        key with ``skip_completed`` at the read to keep every finished task's keys.
        Raises (before writing anything)
        :class:`InvalidArgumentError` (``key_column_not_found``), :class:`InvalidArgumentError` (``key_type_mismatch``),
        :class:`InvalidArgumentError` (``source_key_lost``), :class:`InvalidArgumentError` (``null_key``),
        :class:`UnsupportedError` (``native_writer``) (``engine="spark"`` where it cannot run);
        :class:`EpochConflictError` (``epoch_fenced``) if a newer submit took over the store.
        """
        chosen = check_engine(engine or str(self.spark.conf.get(CONF_WRITER_ENGINE, None) or "auto"))
        partition_by = tuple(partition_by or ())
        missing = [c for c in partition_by if c not in df.columns]
        if missing:
            raise InvalidArgumentError(
                f"partition_by column(s) {missing} are not in the DataFrame ({df.columns})",
                reason="key_column_not_found",
            )
        sink = ParquetSink(
            partition_by=partition_by, compression=compression, max_records_per_file=max_records_per_file
        )
        return self._writes.write(df, sink, key=key, output=path, num_partitions=num_partitions, engine=chosen)

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
        :class:`InvalidArgumentError` (``writer_contract``).
        """
        return self._writes.write(df, writer_fn, output=output, key=key, num_partitions=num_partitions, engine="arrow")

    def _record_summary(self, summary: WriteSummary) -> None:
        self._summaries.append(summary)
        self._emit()

    # ------------------------------------------------------------------ result

    def result(self) -> dict[str, Any]:
        """The job's machine-readable result: what the operator passes to the commit (``degraded``)."""
        writes = [s.to_json() for s in self._summaries]
        return {
            "store_uri": self.store.uri,
            "epoch": self.epoch,
            "session": self.backend.kind,
            "python_daemon": self.backend.python_daemon(),
            "degraded": self.degraded,
            "rows": sum(s.rows for s in self._summaries),
            "files": sum(s.files for s in self._summaries),
            "keys": sum(s.keys for s in self._summaries),
            "sealed_partitions": sum(s.sealed_partitions for s in self._summaries),
            "input": self._files.stats(),
            "input_audit": skip_audit.audit_summary(self._skips),
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
            self.store.epochs.end(
                self.epoch, status=status, summary={k: result[k] for k in ("rows", "keys", "degraded")}
            )
        return result

    def __enter__(self) -> CheckpointedJob:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.finish(succeeded=exc_type is None)
