"""One checkpointed write: declare the output root, lay rows out per key, write with Spark's or the Arrow writer.

Spark's own Parquet writer (:mod:`airflow_ckpt_provider.spark.writers.native`) where it
can run, the Arrow writer's checkpointed tasks
(:mod:`airflow_ckpt_provider.spark.writers.arrow_task`) otherwise; either way each task
is one checkpoint and the write ends in one :class:`WriteSummary`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_type

from airflow_ckpt_provider.contract import CONF_WRITER_ENGINE
from airflow_ckpt_provider.spark.job.failures import connect_channel_lost, translate_failure
from airflow_ckpt_provider.spark.job.job_context import JobContext
from airflow_ckpt_provider.spark.job.partitioning import Partitioned, co_partition
from airflow_ckpt_provider.spark.job.write_setup import declare_output_root, pinned_file_packing
from airflow_ckpt_provider.spark.keys import SOURCE_FILE_COLUMN, SOURCE_KEY_COLUMN, normalize_key_type
from airflow_ckpt_provider.spark.paths import file_key
from airflow_ckpt_provider.spark.summary import WriteSummary, WriteTaskReport
from airflow_ckpt_provider.spark.writers.arrow_parquet import ParquetSink
from airflow_ckpt_provider.spark.writers.arrow_task import REPORT_DDL, TaskSpec, WriterFn, make_task_function
from airflow_ckpt_provider.spark.writers.native import (
    NativeWrite,
    check_engine,
    native_unsupported_reason,
    run_native_write,
)
from airflow_ckpt_provider.spark.writers.native_keys import NativeRowKeys
from airflow_ckpt_provider.store.errors import (
    EpochConflictError,
    IncompleteRunError,
    InvalidArgumentError,
    StoreUnavailableError,
    UnsupportedError,
)

log = logging.getLogger(__name__)


class WritePipeline:
    """The job's writes. ``record`` receives each write's summary (the job keeps and emits it)."""

    def __init__(self, job: JobContext, record: Callable[[WriteSummary], None]) -> None:
        self.job = job
        self._record = record

    def nothing(self, output: str) -> WriteSummary:
        """The summary of a write that runs nothing (``on_rerun="skip"``): recorded like any other."""
        summary = WriteSummary.from_reports(
            [],
            epoch=self.job.epoch,
            output=file_key(output).rstrip("/"),
            expected_partitions=0,
            seconds=0.0,
            shuffled=False,
        )
        self._record(summary)
        return summary

    def write_parquet(
        self,
        df: DataFrame,
        path: str,
        sink: ParquetSink,
        *,
        key: str | Sequence[str] | None,
        num_partitions: int | None,
        engine: str | None,
    ) -> WriteSummary:
        """``CheckpointedJob.write_parquet``: its arguments checked, then :meth:`write` with ``sink``."""
        chosen = check_engine(engine or str(self.job.spark.conf.get(CONF_WRITER_ENGINE, None) or "auto"))
        missing = [c for c in sink.partition_by if c not in df.columns]
        if missing:
            raise InvalidArgumentError(
                f"partition_by column(s) {missing} are not in the DataFrame ({df.columns})",
                reason="key_column_not_found",
            )
        return self.write(df, sink, key=key, output=path, num_partitions=num_partitions, engine=chosen)

    def write(
        self,
        df: DataFrame,
        writer_fn: WriterFn,
        *,
        output: str,
        key: str | Sequence[str] | None,
        num_partitions: int | None,
        engine: str,
    ) -> WriteSummary:
        """Write ``df`` under ``output`` with ``writer_fn`` (a :class:`ParquetSink` may go to Spark's writer)."""
        output_root = file_key(output).rstrip("/")
        if engine == "spark" and self.job.backend.kind == "connect":
            raise UnsupportedError(
                f"engine='spark' cannot write {output_root}: {self.job.backend.native_unsupported()}. Use "
                "engine='auto' or engine='arrow'. Nothing was written",
                reason="native_writer",
            )
        declare_output_root(self.job, output_root)
        prepared, column = self.job.keys.prepare(df, key)
        source = self.job.keys.row_source_of(prepared) if column == SOURCE_KEY_COLUMN else None
        min_tasks = source.min_tasks if source is not None and source.unique else None
        try:
            # The driver sees every seal: it folds them into segments as they come (docs/store-api.md, "Segments").
            with pinned_file_packing(self.job, min_tasks), self.job.store.housekeeping.background_compaction():
                return self._write_partitioned(prepared, column, writer_fn, output_root, num_partitions, engine)
        except Exception as exc:
            # A lost Spark Connect channel also fails the clean-up calls after the write (restoring a conf):
            # the typed error must not be replaced by theirs.
            if (
                isinstance(exc, IncompleteRunError) and exc.reason == "connect_unavailable"
            ) or not connect_channel_lost(exc):
                raise
            raise self._translate(exc) or exc from exc

    def _write_partitioned(
        self,
        prepared: DataFrame,
        column: str,
        writer_fn: WriterFn,
        output_root: str,
        num_partitions: int | None,
        engine: str,
    ) -> WriteSummary:
        job = self.job
        plan = co_partition(job, prepared, column, num_partitions)
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
            spark_path, why_not = native_unsupported_reason(job.backend, task_files, output_root, row_keys=row_keyed)
            if spark_path is not None:
                return self._write_native(partitioned, writer_fn, output_root, spark_path, task_files, plan)
            # A resumed run whose input is all done has nothing to write: no plan to inspect, no error.
            if engine == "spark" and not partitioned.isEmpty():
                raise UnsupportedError(
                    f"engine='spark' cannot write {output_root}: {why_not}. Use engine='auto' (falls back to the "
                    "Arrow writer) or engine='arrow'. Nothing was written",
                    reason="native_writer",
                )
            log.info("writing %s with the Arrow writer: %s", output_root, why_not)
        spec = TaskSpec(
            store_uri=job.store.uri,
            store_options=job.options,
            epoch=job.epoch,
            output_root=output_root,
            writer=writer_fn,
            key_column=column,
            file_keyed=column == SOURCE_FILE_COLUMN,
            file_registry=tuple(job.files.registry) if column == SOURCE_FILE_COLUMN else None,
            task_files=task_files,
            unique_keys=plan.unique,
            key_columns=job.keys.row_key or (),
            inputs=plan.inputs,
        )
        started = time.monotonic()
        try:
            with job.backend.job_description(f"checkpointed write to {output_root} (epoch {job.epoch})"):
                rows = partitioned.mapInArrow(make_task_function(spec), REPORT_DDL).collect()
        except Exception as exc:
            translated = self._translate(exc)
            if translated is None:
                raise
            raise translated from exc
        reports = [WriteTaskReport.from_row(row.asDict()) for row in rows]
        if column == SOURCE_FILE_COLUMN:
            job.files.record_task_reads(sum(r.keys for r in reports))  # a file key is an input file
        if shape.num_partitions != len(reports):
            driver_degraded = not self._set_expected(len(reports)) or driver_degraded
        return self._summarize(
            reports,
            output_root=output_root,
            expected_partitions=len(reports),
            started=started,
            shuffled=shuffled,
            driver_degraded=driver_degraded,
            engine="arrow",
        )

    def _write_native(
        self,
        partitioned: DataFrame,
        sink: ParquetSink,
        output_root: str,
        spark_path: str,
        task_files: tuple[tuple[str, ...], ...] | None,
        plan: Partitioned,
    ) -> WriteSummary:
        job = self.job
        row_keys = None
        if task_files is None:
            key_type = normalize_key_type(to_arrow_type(partitioned.schema[SOURCE_KEY_COLUMN].dataType))
            row_keys = NativeRowKeys(key_type, plan.unique, plan.inputs, job.keys.row_key or ())
            hidden = [SOURCE_FILE_COLUMN] if SOURCE_FILE_COLUMN in partitioned.columns else []
        else:
            hidden = [c for c in (SOURCE_KEY_COLUMN, SOURCE_FILE_COLUMN) if c in partitioned.columns]
        write = NativeWrite(
            store=job.store,
            epoch=job.epoch,
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
            written = partitioned.drop(*hidden) if hidden else partitioned
            result = run_native_write(job.backend, job.spark, written, write)
        except Exception as exc:
            translated = (
                None if isinstance(exc, EpochConflictError) and exc.reason == "epoch_fenced" else self._translate(exc)
            )
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
            raise IncompleteRunError(
                f"the Spark writer reported no committed task for partitions {missing[:10] or '(unknown)'} of "
                f"{output_root}; their input stays pending and their files are orphans the commit deletes. "
                "Run the job again",
                reason="write_plan_mismatch",
            )
        return self._summarize(
            result.reports,
            output_root=output_root,
            expected_partitions=expected,
            started=started,
            shuffled=plan.shuffled,
            driver_degraded=driver_degraded,
            engine="spark",
        )

    def _summarize(
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
        """The write's summary, recorded: degraded flag in the store, then handed to the job."""
        summary = WriteSummary.from_reports(
            reports,
            epoch=self.job.epoch,
            output=output_root,
            expected_partitions=expected_partitions,
            seconds=time.monotonic() - started,
            shuffled=shuffled,
            driver_degraded=driver_degraded,
            engine=engine,
        )
        if summary.degraded:
            self.job.store.epochs.mark_degraded(
                self.job.epoch, f"checkpointing was off in {output_root} (breaker tripped)"
            )
        self._record(summary)
        return summary

    def _set_expected(self, count: int) -> bool:
        try:
            self.job.store.epochs.set_expected_partitions(self.job.epoch, count)
            return True
        except (StoreUnavailableError, OSError) as exc:
            log.warning("could not record the expected partition count (%s); progress will lack it", exc)
            return False

    def _translate(self, exc: BaseException) -> Exception | None:
        return translate_failure(exc, row_key=self.job.keys.row_key, epoch=self.job.epoch, store_uri=self.job.store.uri)
