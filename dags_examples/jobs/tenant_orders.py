"""Spark job of the ``ckpt_tenant_orders`` example DAG: one tenant's orders of one day, keyed by ``order_no``.

Run once per tenant by a mapped ``CheckpointedSparkSubmitOperator``; each instance has its
own store, so the tenants' overlapping ``order_no`` values never count as done for one
another. The per-order work is a Python function over Arrow batches (``mapInArrow``) that
runs in the writer's tasks, after ``co_partition``: when it fails on a bad record
(``--bad-order tenant:order_no``), the tasks that finished before it keep their checkpoints.
``--corrections`` (a JSON object, ``tenant:order_no`` -> total; the DAG passes its Airflow
Variable ``ckpt_tenant_orders_corrections``) gives a bad order its total instead.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, StructField, StructType

from airflow_ckpt_provider.spark import CheckpointedJob


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--orders", type=int, required=True)
    parser.add_argument("--day", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--bad-order", default="", help="tenant:order_no whose record is malformed")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--corrections", default="{}", help="JSON object: tenant:order_no -> corrected total")
    args = parser.parse_args()
    bad_tenant, _, bad_number = args.bad_order.partition(":")
    bad = int(bad_number) if bad_tenant == args.tenant and bad_number else None
    corrected = {
        int(key.partition(":")[2]): float(total)
        for key, total in (json.loads(args.corrections) or {}).items()
        if key.partition(":")[0] == args.tenant
    }

    def priced(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            numbers = batch.column("order_no").to_pylist()
            if bad is not None and bad in numbers and bad not in corrected:
                raise ValueError(
                    f"order {bad} of tenant {args.tenant} is malformed. Correct it in the Airflow Variable "
                    f'ckpt_tenant_orders_corrections (Admin > Variables), e.g. {{"{args.tenant}:{bad}": 12.5}}: '
                    "the task's next try (a retry, or Clear) resumes with the corrected order"
                )
            totals = [corrected[n] if n in corrected else n % 97 * 1.5 for n in numbers]
            yield batch.append_column("total", pa.array(totals, pa.float64()))

    spark = SparkSession.builder.appName(f"tenant_orders {args.tenant} {args.day}").getOrCreate()
    job = CheckpointedJob.from_spark(spark)
    day_orders = spark.range(0, args.orders, numPartitions=args.partitions).select(
        F.col("id").alias("order_no"), F.lit(args.tenant).alias("tenant"), F.lit(args.day).alias("day")
    )
    todo = job.co_partition(job.skip_completed(day_orders, key="order_no"), num_partitions=args.partitions)
    schema = StructType([*todo.schema.fields, StructField("total", DoubleType())])
    job.write_parquet(todo.mapInArrow(priced, schema), args.output)
    job.finish()
    spark.stop()


if __name__ == "__main__":
    main()
