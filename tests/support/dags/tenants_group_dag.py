"""Test DAG: a mapped task group per tenant (``@task_group`` + ``.expand``) holding submit -> sensor -> commit.

Each group instance's commit depends only on the submit of the same map index, so the
tenants that succeed commit while another tenant fails. ``commit_all``, not mapped, commits
every instance's store.
"""

from __future__ import annotations

import os

from airflow.sdk import DAG, task_group

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator
from airflow_ckpt_provider.sensors.checkpoint import CheckpointSensor

HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.environ.get("TENANTS_OUTPUT", "/tmp/tenants-group-output")
TENANTS = {"a": 300, "b": 400, "c": 500}

with DAG("ckpt_tenants_group", schedule=None, catchup=False) as dag:

    @task_group
    def tenant(args: list[str], roots: list[str]) -> None:
        submit = CheckpointedSparkSubmitOperator(
            task_id="submit",
            application=os.path.join(HERE, "tenant_job.py"),
            application_args=args,
            conn_id="spark_serial",
            conf={"spark.ui.enabled": "false", "spark.driver.memory": "512m"},
        )
        sensor = CheckpointSensor(
            task_id="sensor", spark_task_id="tenant.submit", deferrable=False, poke_interval=1, timeout=60
        )
        commit = CheckpointCommitOperator(task_id="commit", spark_task_id="tenant.submit", output_roots=roots)
        submit >> sensor >> commit

    # expand_kwargs: one group instance per tenant (expand over two lists would map their product).
    groups = tenant.expand_kwargs(
        [
            {
                "args": ["--tenant", name, "--rows", str(rows), "--output", f"{OUTPUT}/{name}"],
                "roots": [f"{OUTPUT}/{name}"],
            }
            for name, rows in TENANTS.items()
        ]
    )
    # Not mapped: commits the store of every mapped instance of "tenant.submit" (each already
    # committed by its group's commit, so each says so).
    commit_all = CheckpointCommitOperator(task_id="commit_all", spark_task_id="tenant.submit")
    groups >> commit_all
