"""``CheckpointedJob``: the facade a PySpark application calls (see the package's docstring).

It only delegates: the epoch (:mod:`.epoch`), the job's result (:mod:`.result`), keys, the
row-key source, partitioning and writing are each one module of this package, sharing a
:class:`JobContext`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from airflow_ckpt_provider.spark.job import row_skip
from airflow_ckpt_provider.spark.job.job_context import JobContext
from airflow_ckpt_provider.spark.job.partitioning import co_partition
from airflow_ckpt_provider.spark.job.result import JobResult
from airflow_ckpt_provider.spark.job.write_pipeline import WritePipeline
from airflow_ckpt_provider.spark.job_settings import DEFAULT_BROADCAST_THRESHOLD, settings_from_conf
from airflow_ckpt_provider.spark.row_source import DoneInput
from airflow_ckpt_provider.spark.summary import WriteSummary
from airflow_ckpt_provider.spark.writers.arrow_parquet import ParquetSink
from airflow_ckpt_provider.spark.writers.arrow_task import WriterFn
from airflow_ckpt_provider.store.rerun import OnRerun, RerunPlan


class CheckpointedJob:
    """A Spark job whose input keys are skipped once done and whose output is checkpointed per task.

    ``CheckpointedJob(spark, store_uri, job=None, on_rerun="replace", epoch=None, owner=None, **store_options)``:
    with ``epoch=None`` it asks the store what this run of ``job`` does (``store.inspection.rerun_plan``: the
    same plan the operators get for the same history; :attr:`rerun`), then opens the next epoch of the store
    itself for ``job`` (owner: ``owner`` or ``spark-app:<app name>``, so a rerun of the same application takes
    over its own unfinished epoch). ``job``: the output this run writes (None: the store's one output); name it
    when runs of several outputs share the store, e.g. ``job="orders/date=2024-06-01"``. After a committed run
    whose keys ``delete_after_success`` dropped, a run of the same job processes every key again and its commit
    replaces that output; with ``on_rerun="skip"`` it opens no epoch and writes nothing (:attr:`skipped`: every
    key counts as done, writes return an empty summary, the commit finds the store committed).
    Raises :class:`EpochConflictError` if another owner's epoch is open, :class:`EpochConflictError`
    (``epoch_fenced``) if ``epoch`` is not the latest, :class:`InvalidArgumentError` (``job``: a ``job`` or
    ``on_rerun`` with an operator's ``epoch``; ``out_of_range``: an ``on_rerun`` that is neither).

    The job's machine-readable result (counts, ``degraded``, what each read skipped) is what
    :meth:`finish` and :meth:`result` return; ``result_path`` also writes it to a file after every
    write and at the end, and ``result_line=True`` prints it as the stdout line ``CKPT_RESULT {json}``
    (the submit operator asks for both through its confs, :meth:`from_spark`). By default nothing is
    printed.
    """

    def __init__(
        self,
        spark: SparkSession,
        store_uri: str,
        *,
        job: str | None = None,
        on_rerun: OnRerun | str = OnRerun.REPLACE,
        epoch: int | None = None,
        owner: str | None = None,
        result_path: str | None = None,
        result_line: bool = False,
        broadcast_threshold: int = DEFAULT_BROADCAST_THRESHOLD,
        num_partitions: int | None = None,
        **store_options: Any,
    ) -> None:
        self._context = context = JobContext.open(
            spark,
            store_uri,
            epoch=epoch,
            owner=owner,
            broadcast_threshold=broadcast_threshold,
            num_partitions=num_partitions,
            store_options=store_options,
            job=job,
            on_rerun=on_rerun,
        )
        self.spark, self.backend, self.store, self.epoch = spark, context.backend, context.store, context.epoch
        self.result_path = result_path
        self._result = JobResult(
            context, result_path, owns_epoch=epoch is None and not context.skipped, result_line=result_line
        )
        self._writes = WritePipeline(self._context, record=self._result.record_write)
        #: What each skip_completed call skipped (in call order).
        self._skips: list[DoneInput] = self._result.skips

    @property
    def rerun(self) -> RerunPlan | None:
        """What the store said this run does (first, resume, replace, skip, incremental), when the job opened
        its own epoch; None under an operator's epoch (the operator logged its plan)."""
        return self._context.rerun

    @property
    def skipped(self) -> bool:
        """``on_rerun="skip"`` over committed output: nothing is read or written, the committed output stays."""
        return self._context.skipped

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
            result_line=settings.result_line,
            broadcast_threshold=settings.broadcast_threshold,
            **settings.store_options,
        )

    @property
    def degraded(self) -> bool:
        """True if checkpointing was off anywhere in this job (an executor's or the driver's breaker)."""
        return self._result.degraded

    def pending_files(self, paths: Iterable[str]) -> list[str]:
        """The paths whose file key no valid checkpoint holds, in the given order, duplicates dropped.

        The key of a file is its normalized URI (``paths.file_key``). Reads the
        store's done keys on the driver (file lists are small). Raises
        :class:`InvalidArgumentError` (``key_type_mismatch``) if the store holds non-file keys.
        """
        if self._context.skipped:
            return []
        return self._context.files.select_pending(paths, self._context.keys.done_files())

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
        self._context.files.check_reader(reader)
        todo = self.pending_files(paths)
        return self._context.files.read_parquet(
            paths,
            todo,
            schema=schema,
            reader=reader,
            max_partition_bytes=max_partition_bytes,
            min_partitions=min_partitions,
            batch_rows=batch_rows,
        )

    def skip_completed(
        self,
        df: DataFrame,
        key: str | Sequence[str],
        *,
        unique: bool = False,
        num_partitions: int | None = None,
    ) -> DataFrame:
        """``df`` without the rows whose key is done, with the hidden source-key column, partitioned for progress.

        ``key``: a column, or a list of columns for a composite key (stored as a struct). The hidden column keeps
        the key exactly as read, so rewriting the key column later does not change what is checkpointed. Every
        task that runs your transformation on the result becomes one checkpoint, so a failure in your code keeps
        the work of the tasks that finished (docs/row-keys.md):

        * ``unique=True``: you declare that each key is in one row of the input (an event id, an order id). No
          shuffle at all: each task of the source's stage is a checkpoint (``num_partitions``: read a file source
          in at least that many tasks, never fewer than the cluster's cores). A task meeting a key twice fails
          with :class:`InvalidArgumentError` (``key_not_unique``) before sealing;
        * ``unique=False`` (default): rows are hash-partitioned by the key into ``num_partitions`` (default
          ``spark.sql.shuffle.partitions``) here, before your transformation, unless already grouped by key.

        On a rerun, input files that a finished task read whole and that did not change are not read again;
        done keys are anti-joined only where the finished tasks' records do not vouch for them. Raises (before
        any output is written) :class:`InvalidArgumentError` (``null_key``, ``key_column_not_found``,
        ``key_type_mismatch``).
        """
        if self._context.skipped:
            return df.where(F.lit(False))
        pending, skipped = row_skip.skip_completed(self._context, df, key, unique=unique, num_partitions=num_partitions)
        self._skips.append(skipped)
        return pending

    def co_partition(
        self, df: DataFrame, key: str | Sequence[str] | None = None, *, num_partitions: int | None = None
    ) -> DataFrame:
        """``df`` with all rows of each source key in one partition (a shuffle only if needed).

        Use it before expensive per-key work so the writer needs no second shuffle.
        Map-like steps that keep Spark's partitioning (``mapInArrow``, ``filter``,
        ``select`` keeping the hidden column) may follow.
        """
        if self._context.skipped:
            return df
        prepared, column = self._context.keys.prepare(df, key)
        return co_partition(self._context, prepared, column, num_partitions).df

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

        ``engine`` (default: the conf ``spark.ckpt.writer.engine``, else ``"auto"``): ``"spark"``, Spark's own
        Parquet writer (about as fast as ``df.write.parquet``; needs file keys read whole per task and no shuffle
        before it, or row keys from ``skip_completed``, and an output Spark can write: local disk, ``s3a://``;
        :mod:`airflow_ckpt_provider.spark.writers.native`); ``"arrow"``, pyarrow in every task (any pipeline,
        ``s3://`` without a Hadoop S3 connector); ``"auto"``, ``"spark"`` when it can, else ``"arrow"`` (logged).

        ``key``: needed only when the source was not read with ``skip_completed`` or
        ``read_parquet``. Not idempotent by itself: a rerun processes only keys no
        valid checkpoint holds. A key given here (not taken at the read) makes the writer
        hash-partition the rows by it, so a failure anywhere before the writer (the user's
        own transformation) keeps no progress: the log warns before the job runs; take the
        key with ``skip_completed`` at the read to keep every finished task's keys.
        Raises (before writing anything) :class:`InvalidArgumentError` (``key_column_not_found``,
        ``key_type_mismatch``, ``source_key_lost``, ``null_key``), :class:`UnsupportedError` (``native_writer``:
        ``engine="spark"`` where it cannot run), :class:`EpochConflictError` (``epoch_fenced``: a newer submit).
        """
        if self._context.skipped:
            return self._writes.nothing(path)
        sink = ParquetSink(tuple(partition_by or ()), compression, max_records_per_file=max_records_per_file)
        return self._writes.write_parquet(df, path, sink, key=key, num_partitions=num_partitions, engine=engine)

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
        if self._context.skipped:
            return self._writes.nothing(output)
        return self._writes.write(df, writer_fn, output=output, key=key, num_partitions=num_partitions, engine="arrow")

    def result(self) -> dict[str, Any]:
        """The job's machine-readable result: what the operator passes to the commit (``degraded``)."""
        return self._result.as_dict()

    def finish(self, *, succeeded: bool = True) -> dict[str, Any]:
        """Return the result and emit it where it was asked for (``result_path``, ``result_line``); if
        this job opened its own epoch, record how it ended. Idempotent."""
        return self._result.finish(succeeded=succeeded)

    def __enter__(self) -> CheckpointedJob:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.finish(succeeded=exc_type is None)
