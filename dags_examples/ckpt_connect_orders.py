"""Example 6 — TaskFlow: ``@task.checkpointed_pyspark``, one tenant per mapped instance, on a Spark Connect server.

The PySpark code lives in the DAG, as with the Spark provider's ``@task.pyspark``: the
function gets a Spark session (``spark``) and a ready ``CheckpointedJob`` (``ckpt_job``) on
its instance's own store (``$AIRFLOW_HOME/checkpoints/ckpt_connect_orders/orders/date=<logical
date>/map_index=<i>``), and writes through it. ``orders.expand(tenant=[...])`` runs one
instance per tenant; ``CheckpointCommitOperator.partial(...).expand(...)`` commits each
tenant's output (each mapped commit works on the store of the same map index).

Play a failure and its fix: trigger a run with ``{"bad_order": "beta:387"}``. Tenant beta's
function fails on that order, in the last of its input files (its retry, 10 s later, resumes
and fails on it again); alpha finishes and commits. Correct the order in the Airflow Variable
``ckpt_connect_orders_corrections`` (Admin > Variables), a JSON object such as
``{"beta:387": 12.5}`` (``tenant:order_id`` -> the order's total), then Clear beta's failed
instance ("Clear -> Only failed"): it processes only the beta orders its failed tries did not
checkpoint, and its commit makes the day exactly-once for any Parquet reader.

Environment:

* a Spark Connect server and the Airflow connection ``spark_connect_default`` to it, e.g.
  ``AIRFLOW_CONN_SPARK_CONNECT_DEFAULT='{"conn_type": "spark_connect", "host": "localhost", "port":
  15002}'``; the server's Python has pyarrow and this package (same version), the worker's has pyspark
  (the client). Or ``CKPT_EXAMPLE_SPARK_CONN`` names another Spark connection: a ``spark`` connection
  gives its master (e.g. ``AIRFLOW_CONN_SPARK_LOCAL='{"conn_type": "spark", "host": "local[2]"}'`` with
  ``CKPT_EXAMPLE_SPARK_CONN=spark_local``: a session in the worker, Java 17 there); empty: ``local[*]``;
* optional ``CKPT_EXAMPLE_LAKE`` (default ``$AIRFLOW_HOME/lake``), set where the DAG is parsed and
  where the tasks run; the Spark server must reach it too (a path on a shared disk, or ``s3://``);
* optional Airflow Variable ``ckpt_connect_orders_corrections`` (see above; absent: no corrections).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from typing import Any

from airflow.sdk import DAG, Param, Variable, task

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator

LAKE = os.environ.get("CKPT_EXAMPLE_LAKE") or os.path.join(
    os.path.expanduser(os.environ.get("AIRFLOW_HOME", "~/airflow")), "lake"
)
SPARK_CONN = os.environ.get("CKPT_EXAMPLE_SPARK_CONN", "spark_connect_default") or None
TENANTS = ["alpha", "beta"]
FILES, ORDERS_PER_FILE = 8, 50  # per tenant and day: orders 0..399, file i holds 50*i..50*i+49
CORRECTIONS_VARIABLE = "ckpt_connect_orders_corrections"


def input_of(tenant: str, day: str) -> str:
    return os.path.join(LAKE, "raw_orders", f"tenant={tenant}", f"day={day}")


def output_of(tenant: str) -> str:
    return os.path.join(LAKE, "connect_orders", f"tenant={tenant}", "day={{ ds }}")


with DAG(
    "ckpt_connect_orders",
    description="@task.checkpointed_pyspark mapped over tenants on a Spark Connect server, each with its own store",
    schedule="@daily",
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["checkpointed-spark", "example"],
    params={"bad_order": Param("", type="string", description="tenant:order_id whose record fails ('' none)")},
    default_args={"retries": 1, "retry_delay": dt.timedelta(seconds=10)},
) as dag:

    @task
    def land_orders(ds: str | None = None) -> None:
        """The day's raw orders of every tenant (a stand-in for an upstream system), once."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        assert ds is not None
        for tenant in TENANTS:
            folder = input_of(tenant, ds)
            os.makedirs(folder, exist_ok=True)
            for i in range(FILES):
                path = os.path.join(folder, f"part-{i}.parquet")
                if not os.path.exists(path):
                    ids = list(range(i * ORDERS_PER_FILE, (i + 1) * ORDERS_PER_FILE))
                    table = pa.table({"order_id": ids, "amount": [n % 97 * 1.5 for n in ids]})
                    pq.write_table(table, path + ".tmp")
                    os.replace(path + ".tmp", path)

    # One store per map index (the default). The output roots are the mapped commit's, one per tenant
    # (a value that differs per map index cannot be declared on the decorator): the commit, a clear
    # and the Checkpoints view delete output only there; the job declares each write's directory.
    @task.checkpointed_pyspark(conn_id=SPARK_CONN)
    def orders(
        tenant: str, ds: str | None = None, params: Any = None, spark: Any = None, ckpt_job: Any = None
    ) -> dict[str, Any]:
        import pyarrow as pa
        from pyspark.sql.types import DoubleType, StructField, StructType

        assert ds is not None and ckpt_job is not None
        bad_tenant, _, bad_id = str((params or {}).get("bad_order") or "").partition(":")
        bad = int(bad_id) if bad_tenant == tenant and bad_id else None
        # Read at every try: an order corrected meanwhile is used by the next try.
        corrections = Variable.get(CORRECTIONS_VARIABLE, default={}, deserialize_json=True) or {}
        corrected = {int(k.partition(":")[2]): float(v) for k, v in corrections.items() if k.startswith(f"{tenant}:")}

        def priced(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                ids = batch.column("order_id").to_pylist()
                if bad is not None and bad in ids and bad not in corrected:
                    raise ValueError(
                        f"order {bad} of tenant {tenant} is malformed. Correct it in the Airflow Variable "
                        f'{CORRECTIONS_VARIABLE} (Admin > Variables), e.g. {{"{tenant}:{bad}": 12.5}}, then Clear '
                        "the failed task: it resumes with the corrected order"
                    )
                amounts = batch.column("amount").to_pylist()
                totals = [corrected.get(n, a * 1.2) for n, a in zip(ids, amounts, strict=True)]
                yield batch.append_column("total", pa.array(totals, pa.float64()))

        # unique=True: each order is one row, so every task of the read is a checkpoint (no shuffle);
        # num_partitions: at least that many tasks (here a file each), so a failure keeps the others' work.
        raw = spark.read.parquet(input_of(tenant, ds))
        todo = ckpt_job.skip_completed(raw, key="order_id", unique=True, num_partitions=FILES)
        schema = StructType([*todo.schema.fields, StructField("total", DoubleType())])
        output = os.path.join(LAKE, "connect_orders", f"tenant={tenant}", f"day={ds}")
        summary = ckpt_job.write_parquet(todo.mapInArrow(priced, schema), output)
        return {"tenant": tenant, "rows": summary.rows}  # the function's own return value (XCom return_value)

    commit = CheckpointCommitOperator.partial(task_id="commit", spark_task_id="orders").expand(
        output_roots=[[output_of(tenant)] for tenant in TENANTS]
    )
    land_orders() >> orders.expand(tenant=TENANTS) >> commit
