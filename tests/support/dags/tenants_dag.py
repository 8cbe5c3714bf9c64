"""Test DAG: one checkpointed submit per tenant (dynamic task mapping), then a mapped commit.

Tenants' ``order_no`` keys overlap; each mapped instance must keep its own store.
``TENANTS_OUTPUT`` is the base directory (one sub-directory per tenant),
``TENANTS_STORE`` an explicit ``checkpoint_uri`` for every instance (default: none, each
instance gets its default location). ``clear_all``, not mapped, clears every instance's store.
"""

from __future__ import annotations

import os

from airflow.sdk import DAG

from airflow_ckpt_provider.operators.clear import ClearCheckpointsOperator
from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator

HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.environ.get("TENANTS_OUTPUT", "/tmp/tenants-output")
TENANTS = {"a": 300, "b": 400, "c": 500}
ROW_DELAY_MS = os.environ.get("TENANTS_ROW_DELAY_MS", "0")

with DAG("ckpt_tenants", schedule=None, catchup=False) as dag:
    tenants = CheckpointedSparkSubmitOperator.partial(
        task_id="tenants",
        application=os.path.join(HERE, "tenant_job.py"),
        conn_id="spark_serial",  # local[1]: partitions run in order, so the failure is deterministic
        conf={"spark.ui.enabled": "false", "spark.driver.memory": "512m"},
        checkpoint_uri=os.environ.get("TENANTS_STORE") or None,
    ).expand(
        application_args=[
            ["--tenant", name, "--rows", str(rows), "--output", f"{OUTPUT}/{name}", "--row-delay-ms", ROW_DELAY_MS]
            for name, rows in TENANTS.items()
        ]
    )
    commit = CheckpointCommitOperator.partial(
        task_id="commit",
        spark_task_id="tenants",
        checkpoint_uri=os.environ.get("TENANTS_STORE") or None,
    ).expand(output_roots=[[f"{OUTPUT}/{name}"] for name in TENANTS])
    # Not mapped: works on the store of every mapped instance of "tenants".
    clear_all = ClearCheckpointsOperator(task_id="clear_all", spark_task_id="tenants")
    tenants >> commit >> clear_all
