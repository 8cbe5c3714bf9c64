"""``spark-submit`` application of ``bench/connect_resume.py``: the shared job (``connect_work.py``)
in a new Spark application, as ``CheckpointedSparkSubmitOperator`` runs it."""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession

from airflow_ckpt_provider.spark import CheckpointedJob
from bench.jobs.connect_work import run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lake", required=True)
    parser.add_argument("--ds", required=True)
    parser.add_argument("--spin", type=int, required=True)
    args = parser.parse_args()
    spark = SparkSession.builder.appName(f"bench connect_resume {args.ds}").getOrCreate()
    job = CheckpointedJob.from_spark(spark)
    run(spark, job, args.lake, "submit", args.ds, args.spin)
    job.finish()
    spark.stop()


if __name__ == "__main__":
    main()
