"""Test DAG: CheckpointCommitOperator on a store (and connection) named by environment variables, then the
preview of a reprocess of its first epoch (neither declares output_roots)."""

from __future__ import annotations

import os

from airflow.sdk import DAG

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.operators.reprocess import ReprocessCheckpointsOperator

with DAG("ckpt_forged_commit", schedule=None, catchup=False) as dag:
    store = {
        "checkpoint_uri": os.environ.get("FORGED_STORE", "/tmp/missing-store"),
        "aws_conn_id": os.environ.get("FORGED_CONN") or None,
    }
    commit = CheckpointCommitOperator(task_id="commit", **store)
    reprocess = ReprocessCheckpointsOperator(task_id="reprocess", epochs=[1], preview_only=True, **store)
    commit >> reprocess
