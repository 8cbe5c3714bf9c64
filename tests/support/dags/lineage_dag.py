"""Test DAG: a commit (and nothing else) of a store the test prepared, for the OpenLineage tests."""

from __future__ import annotations

import os

from airflow.sdk import DAG

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator

with DAG("ckpt_lineage", schedule=None, catchup=False) as dag:
    CheckpointCommitOperator(
        task_id="commit",
        checkpoint_uri=os.environ.get("LINEAGE_STORE", "/tmp/lineage-store"),
        output_roots=[os.environ.get("LINEAGE_OUTPUT", "/tmp/lineage-output")],
    )
