"""Test DAG: CheckpointCommitOperator on a store (and connection) named by environment variables."""

from __future__ import annotations

import os

from airflow.sdk import DAG

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator

with DAG("ckpt_forged_commit", schedule=None, catchup=False) as dag:
    CheckpointCommitOperator(
        task_id="commit",
        checkpoint_uri=os.environ.get("FORGED_STORE", "/tmp/missing-store"),
        aws_conn_id=os.environ.get("FORGED_CONN") or None,
    )
