"""A PySpark application as a user would write it, submitted by the tests with spark-submit.

It gets the store from the operator's confs (``CheckpointedJob.from_spark``) and
its work from one JSON argument: ``{"mode", "inputs", "output", "num_partitions",
"partition_by", "python_transform", "engine"}``. Faults come from ``CKPT_TEST_FAULTS`` (see ``pipeline.py``).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))

from pyspark.sql import SparkSession

from airflow_ckpt_provider.spark import CheckpointedJob
from tests.spark.jobs.pipeline import faults_from_env, run_pipeline


def main() -> int:
    spec = json.loads(sys.argv[1])
    spark = SparkSession.builder.appName("ckpt-test-job").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    job = CheckpointedJob.from_spark(spark)
    summary = run_pipeline(
        spark,
        job,
        mode=spec["mode"],
        inputs=spec["inputs"],
        output=spec["output"],
        faults=faults_from_env(),
        num_partitions=int(spec.get("num_partitions", 4)),
        partition_by=spec.get("partition_by"),
        python_transform=bool(spec.get("python_transform", True)),
        engine=spec.get("engine"),
    )
    job.finish()
    print(f"SUMMARY {json.dumps(summary.to_json())}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
