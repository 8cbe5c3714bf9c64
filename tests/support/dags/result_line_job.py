"""A PySpark application as a user writes it (``CheckpointedJob.from_spark``): 40 keys, one write.

Its stdout is the operator's business: the job prints its ``CKPT_RESULT`` line only because the
operator's confs ask for it (tests/operators/test_spark_provider_contract.py).
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from airflow_ckpt_provider.spark import CheckpointedJob


def main() -> None:
    spark = SparkSession.builder.getOrCreate()
    job = CheckpointedJob.from_spark(spark)
    todo = job.skip_completed(spark.range(40).withColumnRenamed("id", "key"), "key", unique=True)
    job.write_parquet(todo, sys.argv[1])
    job.finish()
    spark.stop()


if __name__ == "__main__":
    main()
