"""Spark job of the ``ckpt_incremental_ingest`` example DAG: ingest the Parquet files that
landed since the last run (job bookmarks, with file-path keys).

The store keeps, across runs, which landing files were committed (the ``retain`` policy
compacts them into one snapshot). ``read_parquet`` opens only the files no checkpoint
holds yet; each output row carries its source file as the checkpoint key, so a file is
done exactly when the task that wrote its rows sealed.
"""

from __future__ import annotations

import argparse

import pyarrow.fs as pafs
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark import CheckpointedJob
from airflow_ckpt_provider.spark.paths import arrow_filesystem, arrow_path


def list_parquet_files(uri: str, options: dict[str, object]) -> list[str]:
    """Every ``*.parquet`` under ``uri`` (``s3://bucket/prefix/`` or a local directory), sorted."""
    filesystem = arrow_filesystem(uri, options)
    selector = pafs.FileSelector(arrow_path(uri).rstrip("/"), recursive=True, allow_not_found=True)
    scheme = "s3://" if uri.startswith(("s3://", "s3a://")) else "file://"
    return sorted(
        scheme + info.path
        for info in filesystem.get_file_info(selector)
        if info.is_file and info.path.endswith(".parquet")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--landing", required=True, help="where new files land (s3://bucket/prefix/)")
    parser.add_argument("--output", required=True, help="the lake table directory (s3://bucket/prefix/)")
    args = parser.parse_args()

    spark = SparkSession.builder.appName("incremental_ingest").getOrCreate()
    job = CheckpointedJob.from_spark(spark)

    # The landing zone is read with the store's endpoint and credentials (same account here).
    files = list_parquet_files(args.landing, dict(job.store.options))
    new_rows = job.read_parquet(files)  # files already ingested are never opened
    job.write_parquet(new_rows.withColumn("ingested_at", F.current_timestamp()), args.output)
    job.finish()
    spark.stop()


if __name__ == "__main__":
    main()
