"""How the writer's input reaches it with all rows of a source key in one task, and what each task covers.

No shuffle where the plan shows it needless: files read whole per task (file keys),
``skip_completed``'s own exchange, or a source declared unique (or grouped) whose rows
never left their task; otherwise one hash-partitioning by the hidden key column.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark.job.job_context import JobContext
from airflow_ckpt_provider.spark.keys import SOURCE_KEY_COLUMN
from airflow_ckpt_provider.spark.plan import PlanShape, plan_shape, row_key_lineage
from airflow_ckpt_provider.spark.row_source import InputRecords, RowSource, input_records

log = logging.getLogger(__name__)

#: Logged before the job runs when the writer takes its key from a frame ``skip_completed`` did not prepare.
UNPREPARED_KEY_WARNING = (
    "the key was given to the writer, not taken at the read with skip_completed: the writer hash-partitions "
    "the rows by it, so everything before the writer (the read and your transformations) runs in one stage "
    "before any task writes or seals, and a failure there (a UDF raising on a bad record, a lost executor "
    "past its retries) keeps NO progress: the rerun starts over. To keep each finished task's keys, take the "
    "key at the read: skip_completed(df, key=...) (docs/row-keys.md, 'Keys the writer takes')"
)


@dataclass(frozen=True)
class Partitioned:
    """The writer's input, partitioned so that all rows of a key are in one task, and what each task covers."""

    df: DataFrame
    shape: PlanShape
    shuffled: bool
    inputs: InputRecords | None = None
    #: The source declared one row per key (each task checks it before sealing).
    unique: bool = False


def co_partition(job: JobContext, df: DataFrame, column: str, num_partitions: int | None) -> Partitioned:
    """``df`` (carrying the hidden key ``column``) laid out for the writer, with a shuffle only if needed."""
    if column == SOURCE_KEY_COLUMN:
        source = job.keys.row_source_of(df)
        rows = row_key_partitioning(job, df, source)
        if rows is not None:
            log.info("no shuffle before the writer: %s", rows.shape.reason)
            return rows
        shape = PlanShape(False, None, None, "rows are not grouped by the source key on the way to the writer")
        if source is None:
            log.warning(UNPREPARED_KEY_WARNING)
    else:
        shape = plan_shape(job.backend, df, column, file_keyed=True, reader_tasks=job.files.reader_tasks)
        if shape.grouped:
            log.info("no shuffle before the writer: %s", shape.reason)
            return Partitioned(df, shape, False)
    count = job.partitions(num_partitions)
    log.info("hash-partitioning on the source key into %d tasks (%s)", count, shape.reason)
    shuffled = df.repartition(count, F.col(column))
    return Partitioned(shuffled, PlanShape(True, count, None, "hash-partitioned by the writer"), True)


def row_key_partitioning(job: JobContext, df: DataFrame, source: RowSource | None) -> Partitioned | None:
    """How row-keyed ``df`` reaches the writer without a shuffle, and what each task covers; None: shuffle.

    Without a shuffle when, on the way from where the key was taken: rows were
    repartitioned by it and stayed in their task since (``skip_completed``'s exchange),
    or never left their task and the source declared unique keys (or was grouped). ``source``: the
    ``skip_completed`` call whose key ``df`` carries (None: the writer was given the key).
    """
    unique = source is not None and source.unique
    lineage = row_key_lineage(job.backend, df, SOURCE_KEY_COLUMN)
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
        if source is not None and source.buckets and source.buckets == count:
            inputs = input_records(source, buckets=source.buckets)
        shape = PlanShape(True, count, None, f"repartitioned by the source key into {lineage.hashed}")
        return Partitioned(df, shape, False, inputs, unique)
    if source is None or not (source.unique or source.grouped):
        return None
    task_files = None
    if lineage.scan is not None and not lineage.coalesced:
        try:
            task_files = job.backend.scan_pieces(lineage.scan)
        except Exception as exc:  # an internal API that moved costs the input records, not the write
            log.info("could not read the scan's files per task (%s); checkpoints record keys only", exc)
    inputs = input_records(source, task_files=task_files) if task_files else None
    if inputs is None and task_files is None and lineage.scan is not None:
        # Spark Connect shows no task's files: each task records the pieces its rows came from. A coalesce
        # keeps that exact (a task reads every piece it is handed whole).
        inputs = input_records(source, pieces_met=True)
    why = "each key is in one row" if source.unique else "the source is grouped by key"
    count = len(task_files) if task_files is not None else None
    return Partitioned(df, PlanShape(True, count, None, f"no shuffle: {why}"), False, inputs, unique)
