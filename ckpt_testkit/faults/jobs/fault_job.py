"""The campaign's example Spark application: ``spark-submit ckpt_testkit/faults/jobs/fault_job.py SPEC``.

``SPEC`` is JSON: ``store_uri``, ``output``, ``inputs``, ``mode`` (``rows``: row
keys with ``skip_completed``, several rows per key, so rows are grouped by key at
the source; ``rows-unique``: the unique ``row_id`` as key, no exchange; ``rows-composite``:
the composite key (``key``, ``shard = row_id % 2``), two rows per key; ``files``:
file keys with ``read_parquet``), ``num_partitions``, ``max_records_per_file``,
``engine`` (``write_parquet``'s; default ``auto``), ``key_log`` (optional: a
directory where the user's transformation logs the row ids each task attempt
held, for the progress oracle), and either
``owner`` (the job opens its own epoch, as without Airflow, and ends it) or
``epoch`` (the caller, playing the operator, opened it and ends it). Store
options, credentials included, come from the environment variable
``FAULT_JOB_STORE_OPTIONS``, never from the command line. Failpoints come from
``CKPT_FAILPOINTS``, which the driver and every Python worker inherit.

Prints ``CKPT_RESULT {json}`` (``degraded`` included; asked for with ``result_line``, as the
submit operator does) and exits 0 on success;
an exception exits 1, an ``exit`` failpoint 17.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, StructField, StructType

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.spark import CheckpointedJob

OPTIONS_ENV = "FAULT_JOB_STORE_OPTIONS"


#: Failpoints in the *user's* code (this job's own steps), as real jobs fail: before ``skip_completed``'s
#: exchange (``rows`` mode: the map side of the shuffle) and after it, in the write stage. Where no
#: exchange remains (``rows-unique``, ``files``) both sit in the write stage.
USER_BEFORE_EXCHANGE = "user.before_exchange"
USER_AFTER_EXCHANGE = "user.after_exchange"


def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The user's first step (parsing raw input): passes rows on, and may meet its failpoint."""
    started = False
    for batch in batches:
        if not started:
            started = True
            failpoint(USER_BEFORE_EXCHANGE)
        yield batch


def make_transform(key_log: str | None) -> Any:
    """The user's transformation: rewrite the key column (as real pipelines do), derive ``value2``."""

    def transform(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        task = TaskContext.get()
        log = None
        if key_log and task is not None:
            log = open(os.path.join(key_log, f"t{task.taskAttemptId()}.rows"), "a", encoding="utf-8")  # noqa: SIM115
        started = False
        try:
            for batch in batches:
                if not started:
                    started = True
                    failpoint(USER_AFTER_EXCHANGE)
                if log is not None:
                    log.write("".join(f"{r}\n" for r in batch.column("row_id").to_pylist()))
                    log.flush()
                key = pc.utf8_upper(pc.utf8_trim_whitespace(batch.column("key")))
                columns = [key if name == "key" else batch.column(name) for name in batch.schema.names]
                value2 = pc.multiply(batch.column("value"), 2.0)
                yield pa.RecordBatch.from_arrays([*columns, value2], names=[*batch.schema.names, "value2"])
        finally:
            if log is not None:
                log.close()

    return transform


def _parsed(df: DataFrame) -> DataFrame:
    return df.mapInArrow(parse, df.schema)


def _pipeline(spark: SparkSession, job: CheckpointedJob, spec: Mapping[str, Any]) -> DataFrame:
    partitions = int(spec["num_partitions"])
    mode = spec["mode"]
    if mode == "files":
        df = _parsed(job.read_parquet(spec["inputs"], min_partitions=partitions))
    elif mode == "rows-unique":
        source = spark.read.parquet(*spec["inputs"])
        df = _parsed(job.skip_completed(source, "row_id", unique=True))
    elif mode == "rows-composite":
        source = spark.read.parquet(*spec["inputs"]).withColumn("shard", F.col("row_id") % 2)
        df = job.skip_completed(_parsed(source), ["key", "shard"], num_partitions=partitions)
    else:
        source = spark.read.parquet(*spec["inputs"])
        df = job.skip_completed(_parsed(source), "key", num_partitions=partitions)
    schema = StructType([*df.schema.fields, StructField("value2", DoubleType())])
    return df.mapInArrow(make_transform(spec.get("key_log")), schema)


def run_job(spark: SparkSession, spec: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """Run the job once; returns the job's result (what the operator hands to the commit)."""
    job = CheckpointedJob(
        spark,
        spec["store_uri"],
        epoch=spec.get("epoch"),
        owner=spec.get("owner"),
        num_partitions=int(spec["num_partitions"]),
        result_line=True,  # the campaign reads the result from the driver's stdout, as the operator does
        **dict(options),
    )
    with job:  # ends the epoch only if the job opened it
        job.write_parquet(
            _pipeline(spark, job, spec),
            spec["output"],
            max_records_per_file=spec.get("max_records_per_file"),
            engine=spec.get("engine"),
        )
    return job.result()


def main() -> int:
    spec = json.loads(sys.argv[1])
    options = json.loads(os.environ.get(OPTIONS_ENV) or "{}")
    spark = SparkSession.builder.appName("ckpt-fault-job").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    run_job(spark, spec, options)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
