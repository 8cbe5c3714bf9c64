"""Test DAG: a cluster-mode submit that waits (durable), with one retry: the retry of an
attempt that died while its driver ran must re-attach to that driver and keep its epoch."""

from __future__ import annotations

import datetime as dt
import os
import sys

from airflow.sdk import DAG

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator

HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.environ.get("REATTACH_OUTPUT", "/tmp/reattach-output")
SPARK_CORE_JAR = os.environ.get("SPARK_CORE_JAR", "spark-core.jar")

with DAG("ckpt_reattach", schedule=None, catchup=False) as dag:
    submit = CheckpointedSparkSubmitOperator(
        task_id="submit",
        conn_id="spark_cluster",
        deploy_mode="cluster",
        application=SPARK_CORE_JAR,
        java_class="org.apache.spark.deploy.PythonRunner",
        application_args=[
            os.path.join(HERE, "jobs", "daily_events.py"),
            "",
            "--day",
            "2024-08-01",
            "--output",
            OUTPUT,
            "--events",
            "20000",
            "--partitions",
            "4",
        ],
        conf={
            "spark.pyspark.python": sys.executable,
            "spark.driver.memory": "512m",
            "spark.executor.memory": "512m",
            "spark.ui.enabled": "false",
        },
        status_poll_interval=2,
        retries=1,
        retry_delay=dt.timedelta(seconds=1),
    )
    commit = CheckpointCommitOperator(task_id="commit", spark_task_id="submit", output_roots=[OUTPUT])
    submit >> commit
