"""Example 4 — rewind the incremental ingestion (example 2) after a bug hit its last runs.

Trigger it by hand with ``{"to_commit": N}``: the last good commit of the ingestion's store
(``airflow-ckpt epochs s3://<bucket>/checkpoints/ckpt_incremental_ingest`` lists them). Every
landing file ingested after commit N becomes pending again, and the lake files those runs wrote
move to the store's quarantine, so readers of the lake see the state after commit N. The next
run of ``ckpt_incremental_ingest`` (with the fixed job) ingests exactly those landing files again.

The task logs the preview (runs, files, bytes and every lake file it moves) first, and refuses,
changing nothing, when more than ``max_files`` lake files would move. Until the next ingestion run,
``airflow-ckpt undo`` puts everything back; ``airflow-ckpt purge`` deletes the quarantined files.

Environment: the ``ckpt_s3`` connection and ``CKPT_EXAMPLE_BUCKET`` of example 2 (no Spark).
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG, Param

from airflow_ckpt_provider.operators.reprocess import RewindCheckpointsOperator

BUCKET = os.environ.get("CKPT_EXAMPLE_BUCKET", "ckpt-examples")
STORE = f"s3://{BUCKET}/checkpoints/ckpt_incremental_ingest"  # the store of example 2
LAKE = f"s3://{BUCKET}/lake/events/"  # its output: the only place the rewind may move files from
AWS_CONN_ID = "ckpt_s3"

with DAG(
    "ckpt_rewind_incremental",
    description="Rewind the incremental ingestion to a commit; its next run re-ingests what came after",
    schedule=None,
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["checkpointed-spark", "example"],
    params={
        "to_commit": Param(type="integer", minimum=0, description="the last good commit (0: before the first)"),
        "max_files": Param(1000, type="integer", minimum=0, description="refuse if more lake files would move"),
    },
) as dag:
    RewindCheckpointsOperator(
        task_id="rewind",
        checkpoint_uri=STORE,
        aws_conn_id=AWS_CONN_ID,
        output_roots=[LAKE],
        to_commit="{{ params.to_commit }}",
        max_files="{{ params.max_files }}",
    )
