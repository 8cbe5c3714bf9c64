"""Test DAG: ClearCheckpointsOperator on a store (and output roots, if any) named by environment variables."""

from __future__ import annotations

import os

from airflow.sdk import DAG

from airflow_ckpt_provider.operators.clear import ClearCheckpointsOperator

with DAG("ckpt_clear", schedule=None, catchup=False) as dag:
    ClearCheckpointsOperator(
        task_id="clear",
        checkpoint_uri=os.environ.get("CLEAR_STORE", "/tmp/missing-store"),
        output_roots=[os.environ["CLEAR_OUTPUT"]] if os.environ.get("CLEAR_OUTPUT") else None,
    )
