"""Test DAG: the example daily_events job (CheckpointedJob) with one Airflow retry."""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator

HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.environ.get("DAILY_RETRY_OUTPUT", "/tmp/daily-retry-output")

with DAG("ckpt_daily_retry", schedule=None, catchup=False) as dag:
    submit = CheckpointedSparkSubmitOperator(
        task_id="process_events",
        application=os.path.join(HERE, "jobs", "daily_events.py"),
        application_args=["--day", "2024-10-01", "--output", OUTPUT, "--events", "20000", "--partitions", "4"],
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "1000",
            # The test's failpoint (spark.task.after_write) is in the Arrow writer's task; the job's
            # write_parquet would otherwise pick Spark's own writer, where it never fires.
            "spark.ckpt.writer.engine": "arrow",
        },
        driver_memory="768m",
        retries=1,
        retry_delay=dt.timedelta(seconds=1),
    )
    commit = CheckpointCommitOperator(task_id="commit", spark_task_id="process_events", output_roots=[OUTPUT])
    submit >> commit
