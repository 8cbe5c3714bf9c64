"""The campaign's example Spark application: ``spark-submit ckpt_testkit/faults/jobs/fault_job.py SPEC``.

``SPEC`` is JSON: ``store_uri``, ``output``, ``inputs``, ``mode`` (``rows``: row
keys with ``skip_completed`` and a shuffle; ``files``: file keys with
``read_parquet``), ``num_partitions``, ``max_records_per_file``, and either
``engine`` (``write_parquet``'s; default ``auto``), and either
``owner`` (the job opens its own epoch, as without Airflow, and ends it) or
``epoch`` (the caller, playing the operator, opened it and ends it). Store
options, credentials included, come from the environment variable
``FAULT_JOB_STORE_OPTIONS``, never from the command line. Failpoints come from
``CKPT_FAILPOINTS``, which the driver and every Python worker inherit.

Prints ``CKPT_RESULT {json}`` (``degraded`` included) and exits 0 on success;
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
from pyspark.sql.types import DoubleType, StructField, StructType

from airflow_ckpt_provider.spark import CheckpointedJob

OPTIONS_ENV = "FAULT_JOB_STORE_OPTIONS"


def transform(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Rewrite the key column (as real pipelines do) and derive ``value2``: per row, hence per key."""
    for batch in batches:
        key = pc.utf8_upper(pc.utf8_trim_whitespace(batch.column("key")))
        columns = [key if name == "key" else batch.column(name) for name in batch.schema.names]
        value2 = pc.multiply(batch.column("value"), 2.0)
        yield pa.RecordBatch.from_arrays([*columns, value2], names=[*batch.schema.names, "value2"])


def _pipeline(spark: SparkSession, job: CheckpointedJob, spec: Mapping[str, Any]) -> DataFrame:
    partitions = int(spec["num_partitions"])
    if spec["mode"] == "files":
        df = job.read_parquet(spec["inputs"], min_partitions=partitions)
    else:
        source = spark.read.parquet(*spec["inputs"])
        df = job.co_partition(job.skip_completed(source, "key"), num_partitions=partitions)
    schema = StructType([*df.schema.fields, StructField("value2", DoubleType())])
    return df.mapInArrow(transform, schema)


def run_job(spark: SparkSession, spec: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """Run the job once; returns the job's result (what the operator hands to the commit)."""
    job = CheckpointedJob(
        spark,
        spec["store_uri"],
        epoch=spec.get("epoch"),
        owner=spec.get("owner"),
        num_partitions=int(spec["num_partitions"]),
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
