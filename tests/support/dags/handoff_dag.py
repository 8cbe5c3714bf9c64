"""Test DAG: the operator with a job that uses the store API directly."""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG, Param

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator

HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.environ.get("HANDOFF_OUTPUT", "/tmp/handoff-output")

with DAG(
    "ckpt_handoff",
    schedule=None,
    catchup=False,
    params={
        "fail_partition": Param(-1, type="integer"),
        "fail_once_marker": Param("", type="string"),
        "hold_partition": Param(-1, type="integer"),
        "hold_marker": Param("", type="string"),
    },
) as dag:
    submit = CheckpointedSparkSubmitOperator(
        task_id="submit",
        application=os.path.join(HERE, "handoff_job.py"),
        application_args=[
            "--output",
            OUTPUT,
            "--keys",
            "40",
            "--partitions",
            "4",
            "--fail-partition",
            "{{ params.fail_partition }}",
            "--fail-once-marker",
            "{{ params.fail_once_marker }}",
            "--hold-partition",
            "{{ params.hold_partition }}",
            "--hold-marker",
            "{{ params.hold_marker }}",
        ],
        conn_id="spark_serial",  # local[1]: partitions run in order, so a failure is deterministic
        conf={"spark.ui.enabled": "false", "spark.driver.memory": "512m"},
        name="handoff",
        checkpoint_uri=os.environ.get("HANDOFF_STORE") or None,  # default: local, per job (task + logical date)
        aws_conn_id=os.environ.get("HANDOFF_AWS_CONN") or None,
        retries=int(os.environ.get("HANDOFF_RETRIES", "0")),
        retry_delay=dt.timedelta(seconds=1),
    )
    commit = CheckpointCommitOperator(
        task_id="commit",
        spark_task_id="submit",
        output_roots=[OUTPUT],
        unknown_files=os.environ.get("HANDOFF_UNKNOWN_FILES", "fail"),
        aws_conn_id=os.environ.get("HANDOFF_AWS_CONN") or None,
    )
    submit >> commit
