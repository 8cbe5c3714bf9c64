"""Spark job of the mapped test DAGs: one tenant's orders, keyed by ``order_no``.

Every tenant's ``order_no`` starts at 0, so the tenants' keys overlap: a store shared by
two tenants would count one tenant's orders as done because the other processed the
same numbers. The user's transformation is a Python function over Arrow batches
(``mapInArrow``) that raises on a bad record (``TENANTS_BAD_KEY=tenant:order_no`` in the
environment of the spark-submit), as a real job fails in its own code; it runs in the
writer's tasks (after ``co_partition``), so the tasks before the bad record seal.
``--row-delay-ms`` slows every row so that two instances overlap in time;
``TENANTS_HOLD=1`` in the environment holds the job in its second write task (the first
task seals, the job then waits until the test kills it), so a test can act while an
instance is surely still running, however loaded the machine.

(A ``F.udf`` column here would hide the key partitioning from the writer, which then
shuffles again after it: the UDF's failure would come before any task sealed.)
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from airflow_ckpt_provider.spark import CheckpointedJob


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--row-delay-ms", type=int, default=0)
    args = parser.parse_args()

    bad_tenant, _, bad_key = os.environ.get("TENANTS_BAD_KEY", "").partition(":")
    bad = int(bad_key) if bad_tenant == args.tenant and bad_key else None
    delay = args.row_delay_ms / 1000.0
    hold = os.environ.get("TENANTS_HOLD") == "1"
    weight = sum(map(ord, args.tenant))

    def with_amount(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        context = TaskContext.get()
        while hold and context is not None and context.partitionId() > 0:
            time.sleep(1)  # held until the test kills the job
        for batch in batches:
            orders = batch.column("order_no").to_pylist()
            amounts = []
            for order_no in orders:
                if delay:
                    time.sleep(delay)
                if order_no == bad:
                    raise ValueError(f"order {order_no} of tenant {args.tenant} is malformed")
                amounts.append(order_no * weight)
            yield batch.append_column("amount", pa.array(amounts, pa.int64()))

    spark = SparkSession.builder.appName(f"tenant {args.tenant}").getOrCreate()
    job = CheckpointedJob.from_spark(spark)
    orders = spark.range(0, args.rows, numPartitions=args.partitions).select(
        F.col("id").alias("order_no"), F.lit(args.tenant).alias("tenant")
    )
    todo = job.co_partition(job.skip_completed(orders, key="order_no"), num_partitions=args.partitions)
    schema = StructType([*todo.schema.fields, StructField("amount", LongType())])
    # TENANTS_ENGINE: write_parquet's engine (the fault campaign's mapped trials pick the Arrow writer for the
    # failpoints of its Python tasks); default: what auto picks.
    job.write_parquet(todo.mapInArrow(with_amount, schema), args.output, engine=os.environ.get("TENANTS_ENGINE"))
    job.finish()
    spark.stop()


if __name__ == "__main__":
    main()
