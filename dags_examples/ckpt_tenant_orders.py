"""Example 4 — one Spark job per tenant with dynamic task mapping, each with its own checkpoints.

``CheckpointedSparkSubmitOperator.partial(...).expand(application_args=...)`` submits one
job per tenant; ``CheckpointCommitOperator.partial(...).expand(output_roots=...)`` commits
each tenant's output. Every tenant's ``order_no`` starts at 0, so the tenants' keys
overlap, and that is fine: each mapped instance has its own store by default
(``$AIRFLOW_HOME/checkpoints/ckpt_tenant_orders/orders/<run_id>/map_index=<i>``), its own
epochs, resume, XCom plan and result, and each mapped commit works on the store of the
same map index. Trigger a run with ``{"bad_order": "beta:137"}`` to make tenant beta's
transformation fail on one record; clear the failed instance and only beta's remaining
orders are processed (alpha and gamma are done).

To choose the store of each instance yourself, template ``checkpoint_uri`` with the map
index, e.g. ``checkpoint_uri="s3://my-bucket/ckpt/{{ dag.dag_id }}/{{ ds }}/{{ ti.map_index }}"``.
Two instances given one store fail fast (``MappedInstanceConflictError``) instead of
skipping each other's keys.

Spark connection: ``spark_default`` (for example
``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[*]"}'``).
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG, Param

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator

HERE = os.path.dirname(os.path.abspath(__file__))
LAKE = os.environ.get("CKPT_EXAMPLE_LAKE") or os.path.join(
    os.path.expanduser(os.environ.get("AIRFLOW_HOME", "~/airflow")), "lake"
)
TENANTS = {"alpha": 3_000, "beta": 4_000, "gamma": 5_000}  # tenant -> orders per day


def output_of(tenant: str) -> str:
    return os.path.join(LAKE, "orders", f"tenant={tenant}", "day={{ ds }}")


with DAG(
    "ckpt_tenant_orders",
    description="One checkpointed Spark job per tenant (dynamic task mapping), each with its own store",
    schedule="@daily",
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["checkpointed-spark", "example"],
    params={"bad_order": Param("", type="string", description="tenant:order_no whose record fails ('' none)")},
    default_args={"retry_delay": dt.timedelta(seconds=5)},
) as dag:
    orders = CheckpointedSparkSubmitOperator.partial(
        task_id="orders",
        application=os.path.join(HERE, "jobs", "tenant_orders.py"),
        conf={"spark.ui.enabled": "false"},
        driver_memory="1g",
        name="tenant_orders",
    ).expand(
        application_args=[
            [
                "--tenant", tenant,
                "--orders", str(count),
                "--day", "{{ ds }}",
                "--output", output_of(tenant),
                "--bad-order", "{{ params.bad_order }}",
            ]
            for tenant, count in TENANTS.items()
        ]
    )  # fmt: skip
    commit = CheckpointCommitOperator.partial(task_id="commit", spark_task_id="orders").expand(
        output_roots=[[output_of(tenant)] for tenant in TENANTS]
    )
    orders >> commit
