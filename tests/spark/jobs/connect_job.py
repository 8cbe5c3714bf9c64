"""A file-keyed job run as a Spark Connect *client* process (``python connect_job.py <spec json>``), for
the test that SIGKILLs the client mid-write: the server keeps running the write it was sent."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))


def main() -> int:
    spec = json.loads(sys.argv[1])
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"  # as SparkSession.builder.remote(...) sets it
    from pyspark.sql import functions as F
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    from airflow_ckpt_provider.spark import CheckpointedJob

    spark = RemoteSparkSession.builder.remote(spec["url"]).create()
    job = CheckpointedJob(spark, spec["store_uri"], epoch=spec["epoch"])
    source = job.read_parquet(spec["inputs"], min_partitions=len(spec["inputs"]))
    rows_per_file = int(spec["rows_per_file"])

    def slow(event_id: int) -> int:
        import time

        if event_id % rows_per_file == 0:
            time.sleep(float(spec["task_seconds"]))  # each task's first row
        return event_id

    udf: Any = F.udf(slow, "long")
    job.write_parquet(source.withColumn("event_id", udf("event_id")), spec["output"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
