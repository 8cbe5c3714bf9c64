"""Spark job of the ``ckpt_daily_events`` example DAG: one day of events, keyed by ``event_id``.

Run by ``CheckpointedSparkSubmitOperator``, which opens the store's epoch and passes it
in the ``spark.ckpt.*`` confs. Events already checkpointed by an earlier (failed)
attempt of this DAG run are skipped; the rest are enriched — a Python UDF parses each
event's raw amount — and written as Parquet. ``event_id`` is unique, so there is no
shuffle: each Spark task reads, enriches and writes its events and seals one
checkpoint, and a failure anywhere keeps the tasks that finished.

``--fail-partition P`` puts a bad record in Spark partition P (an amount of ``"N/A"``):

* ``--fail-in udf`` (default): the job's own UDF raises on it, the way a real job meets
  bad input, and says how to correct it: ``--corrections`` (a JSON object, event id ->
  raw amount; the DAG passes its Airflow Variable ``ckpt_daily_events_corrections``) replaces
  a record's raw amount before it is parsed. Until the record is corrected every attempt
  fails on it; the finished partitions stay checkpointed, and the task that failed removed
  what it had written;
* ``--fail-in writer``: on the first try only (``--try-number 1``), the writer of partition P
  dies halfway through its file (``os._exit``, like a killed executor), leaving a
  half-written file that only the commit can remove; the retry resumes by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType

from airflow_ckpt_provider.spark import CheckpointedJob, ParquetSink, WriteContext, WriterFn
from airflow_ckpt_provider.store import FileMetadata

CATEGORIES = ["click", "view", "purchase", "signup"]


def day_of_events(spark: SparkSession, day: str, count: int, partitions: int, bad_partition: int) -> DataFrame:
    """A deterministic day of events (the stand-in for reading a day's raw input).

    ``raw_amount`` is text, as raw feeds send it; in Spark partition ``bad_partition``
    (if >= 0) its last event carries ``"N/A"``.
    """
    base = int(day.replace("-", "")) * 1_000_000
    per_partition = -(-count // partitions)
    bad_id = min(count, (bad_partition + 1) * per_partition) - 1 if bad_partition >= 0 else -1
    amount = F.format_number((F.col("id") * 7 % 1000) / F.lit(100.0), 2)
    return spark.range(0, count, numPartitions=partitions).select(
        (F.col("id") + F.lit(base)).alias("event_id"),
        F.element_at(F.array(*[F.lit(c) for c in CATEGORIES]), (F.col("id") % 4 + 1).cast("int")).alias("category"),
        F.when(F.col("id") == F.lit(bad_id), F.lit("N/A"))
        .otherwise(F.regexp_replace(amount, ",", ""))
        .alias("raw_amount"),
        F.lit(day).alias("day"),
    )


CORRECTIONS_VARIABLE = "ckpt_daily_events_corrections"


def amount_parser(corrections: dict[str, str]) -> Callable[[int, str], float]:
    """The job's own parsing step, with the user's corrections applied first: an amount that is
    not a number raises ValueError, failing the task (and the job), and says how to correct it."""

    def parse(event_id: int, raw: str) -> float:
        raw = corrections.get(str(event_id), raw)
        try:
            return float(raw)
        except ValueError:
            raise ValueError(
                f"event {event_id} has the amount {raw!r}, not a number. Correct it in the Airflow Variable "
                f'{CORRECTIONS_VARIABLE} (Admin > Variables), e.g. {{"{event_id}": "0.00"}}: '
                "the task's next try (a retry, or Clear) resumes with the corrected record"
            ) from None

    return parse


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
    parser.add_argument("--fail-partition", type=int, default=-1, help="partition with a bad record (-1: none)")
    parser.add_argument("--fail-in", choices=("udf", "writer"), default="udf", help="what the bad record breaks")
    parser.add_argument("--corrections", default="{}", help="JSON object: event id -> corrected raw amount")
    parser.add_argument("--try-number", type=int, default=1, help="the Airflow task's try (the writer fails on 1)")
    args = parser.parse_args()
    corrections = {str(k): str(v) for k, v in (json.loads(args.corrections) or {}).items()}
    parse_amount = F.udf(amount_parser(corrections), DoubleType())

    spark = SparkSession.builder.appName(f"daily_events {args.day}").getOrCreate()
    job = CheckpointedJob.from_spark(spark)

    bad_partition = args.fail_partition if args.fail_in == "udf" else -1
    events = day_of_events(spark, args.day, args.events, args.partitions, bad_partition)
    # event_id identifies one event: no shuffle, every task that finishes is a checkpoint.
    todo = job.skip_completed(events, key="event_id", unique=True)
    enriched = todo.withColumn("category", F.upper("category")).withColumn(
        "amount", parse_amount("event_id", "raw_amount")
    )
    enriched = enriched.drop("raw_amount")
    if args.fail_in == "writer" and args.fail_partition >= 0 and args.try_number == 1:
        job.write(enriched, crashing_in_partition(ParquetSink(), args.fail_partition), output=args.output)
    else:
        job.write_parquet(enriched, args.output)
    job.finish()
    spark.stop()


if __name__ == "__main__":
    main()
