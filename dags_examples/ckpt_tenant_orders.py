"""Example 4 — one Spark job per tenant with dynamic task mapping, each with its own checkpoints.

``CheckpointedSparkSubmitOperator.partial(...).expand(application_args=...)`` submits one
job per tenant; ``CheckpointCommitOperator.partial(...).expand(output_roots=...)`` commits
each tenant's output. Every tenant's ``order_no`` starts at 0, so the tenants' keys
overlap, and that is fine: each mapped instance has its own store by default
(``$AIRFLOW_HOME/checkpoints/ckpt_tenant_orders/orders/date=<logical date>/map_index=<i>``), its own
epochs, resume, XCom plan and result, and each mapped commit works on the store of the
same map index.

Play a failure and its fix from the UI alone: trigger a run with ``{"bad_order": "beta:3637"}``
and tenant beta's transformation fails on that order, in the last of its 8 partitions (alpha
and gamma finish and commit). The task log says how to correct it: in the Airflow Variable
``ckpt_tenant_orders_corrections`` (Admin > Variables), a JSON object such as
``{"beta:3637": 12.5}`` (``tenant:order_no`` -> the order's total). The failed instance's next
try — its retry (``retries=2``, 30 s apart), or Clear — processes only the beta orders its
failed try did not checkpoint.

To choose the store of each instance yourself, template ``checkpoint_uri`` with the map
index, e.g. ``checkpoint_uri="s3://my-bucket/ckpt/{{ dag.dag_id }}/{{ ds }}/{{ ti.map_index }}"``.
Two instances given one store fail fast (``EpochConflictError`` (``mapped_instance``)) instead of
skipping each other's keys.

Environment:

* connection ``spark_default``, e.g. ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark",
  "host": "local[*]"}'`` (environment of the worker, or the metadata DB);
* ``spark-submit`` on the worker's ``PATH`` (pyspark's ``bin``) and Java 17; ``PYSPARK_PYTHON``
  (else ``python3`` on the ``PATH``) a Python with pyspark and this package;
* optional ``CKPT_EXAMPLE_LAKE`` (default ``$AIRFLOW_HOME/lake``), set where the DAG is parsed
  and where the task runs;
* optional Airflow Variable ``ckpt_tenant_orders_corrections`` (see above; absent: no corrections).
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
CORRECTIONS_VARIABLE = "ckpt_tenant_orders_corrections"


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
    # A retry resumes where the last attempt stopped; 30 s leave time to correct a record first.
    default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=30)},
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
                # Rendered again at every try: an order corrected meanwhile is read by the next try.
                "--corrections", "{{ var.json.get('" + CORRECTIONS_VARIABLE + "', {}) | tojson }}",
            ]
            for tenant, count in TENANTS.items()
        ]
    )  # fmt: skip
    commit = CheckpointCommitOperator.partial(task_id="commit", spark_task_id="orders").expand(
        output_roots=[[output_of(tenant)] for tenant in TENANTS]
    )
    orders >> commit
