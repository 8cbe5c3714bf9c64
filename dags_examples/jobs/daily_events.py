"""Spark job of the ``ckpt_daily_events`` example DAG: one day of events, keyed by ``event_id``.

Run by ``CheckpointedSparkSubmitOperator``, which opens the store's epoch and passes it
in the ``spark.ckpt.*`` confs. Events already checkpointed by an earlier (failed)
attempt of this DAG run are skipped; the rest are enriched and written as Parquet, each
Spark task sealing one checkpoint for the keys it wrote.

``--fail-partition P`` makes the writer of Spark partition P crash halfway through its
file (after a short delay, so the partitions running beside it finish first): the job
fails, and the crashed task leaves a half-written file behind for the commit to delete.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark import CheckpointedJob, ParquetSink, WriteContext, WriterFn
from airflow_ckpt_provider.store import FileMetadata

CATEGORIES = ["click", "view", "purchase", "signup"]


def day_of_events(spark: SparkSession, day: str, count: int, partitions: int) -> DataFrame:
    """A deterministic day of events (the stand-in for reading a day's raw input)."""
    base = int(day.replace("-", "")) * 1_000_000
    return spark.range(0, count, numPartitions=partitions).select(
        (F.col("id") + F.lit(base)).alias("event_id"),
        F.element_at(F.array(*[F.lit(c) for c in CATEGORIES]), (F.col("id") % 4 + 1).cast("int")).alias("category"),
        (F.col("id") * 7 % 1000).alias("amount_cents"),
        F.lit(day).alias("day"),
    )


def crashing_in_partition(sink: ParquetSink, partition: int, delay_seconds: float = 3.0) -> WriterFn:
    """``sink``, except that in Spark partition ``partition`` the writer dies halfway through
    its file: the Python worker exits (``os._exit``) the way a killed executor does, so no
    cleanup runs and the half-written file stays behind, known only by its recorded intent.
    The job fails; the commit of the resumed run deletes that file."""

    def write(batches: Iterator[pa.RecordBatch], ctx: WriteContext) -> list[FileMetadata]:
        if ctx.partition_id != partition:
            return sink(batches, ctx)

        def crash_after_first_batch() -> Iterator[pa.RecordBatch]:
            for number, batch in enumerate(batches):
                if number == 1:
                    time.sleep(delay_seconds)  # let the partitions running beside it finish first
                    os._exit(3)
                yield batch

        return sink(crash_after_first_batch(), ctx)

    return write


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--day", required=True)
    parser.add_argument("--output", required=True, help="output directory (file:// or s3://)")
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--fail-partition", type=int, default=-1)
    args = parser.parse_args()

    spark = SparkSession.builder.appName(f"daily_events {args.day}").getOrCreate()
    job = CheckpointedJob.from_spark(spark)

    events = day_of_events(spark, args.day, args.events, args.partitions)
    todo = job.skip_completed(events, key="event_id")
    enriched = todo.withColumn("category", F.upper("category")).withColumn(
        "amount", F.col("amount_cents") / F.lit(100.0)
    )
    sink = ParquetSink()
    writer = sink if args.fail_partition < 0 else crashing_in_partition(sink, args.fail_partition)
    job.write(enriched, writer, output=args.output, num_partitions=args.partitions)
    job.finish()
    spark.stop()


if __name__ == "__main__":
    main()
