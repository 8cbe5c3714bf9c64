"""Example DAG 2 (ckpt_incremental_ingest) over three runs with new files landing between them.

Real SeaweedFS S3, real spark-submit, real metadata DB. Each run must open only the
files that are new (the job's own read counters), skip the others, and commit their
rows; at the end the lake holds every landed row exactly once.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_ckpt_provider.store import open_store
from tests.support.airflow_harness import AirflowHarness

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.s3]

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"
DAG_ID = "ckpt_incremental_ingest"
ROWS_PER_FILE = 50


def _land(client: Any, bucket: str, file_number: int) -> None:
    ids = [file_number * 1000 + i for i in range(ROWS_PER_FILE)]
    table = pa.table({"event_id": ids, "file_number": [file_number] * len(ids), "value": [i * 3 for i in ids]})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    client.put_object(Bucket=bucket, Key=f"landing/events/f{file_number:03d}.parquet", Body=buffer.getvalue())


def _lake_event_ids(client: Any, bucket: str) -> list[int]:
    ids: list[int] = []
    listing = client.list_objects_v2(Bucket=bucket, Prefix="lake/events/")
    for item in listing.get("Contents", []):
        body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
        ids.extend(pq.read_table(io.BytesIO(body)).column("event_id").to_pylist())
    return sorted(ids)


def test_each_run_reads_only_new_files(airflow_harness: AirflowHarness, s3_server: Any, s3_bucket: str) -> None:
    airflow_harness.install_dag(EXAMPLES / "ckpt_incremental_ingest.py", EXAMPLES / "jobs")
    client = s3_server.client()
    connection = {
        "conn_type": "aws",
        "login": s3_server.access_key,
        "password": s3_server.secret_key,
        "extra": {"endpoint_url": s3_server.endpoint_url, "region_name": s3_server.region},
    }
    env = {"CKPT_EXAMPLE_BUCKET": s3_bucket, "AIRFLOW_CONN_CKPT_S3": json.dumps(connection)}

    landed = 0
    for run_number, new_files in enumerate((3, 2, 1), start=1):
        for _ in range(new_files):
            _land(client, s3_bucket, landed)
            landed += 1
        run = airflow_harness.run_dag(
            DAG_ID, logical_date=dt.datetime(2024, 7, run_number, tzinfo=dt.UTC), env=env, timeout=900
        )
        assert run.state == "success", run.output[-5000:]
        result = airflow_harness.xcom(DAG_ID, run.run_id, "ingest")
        counts = (result["input_files_listed"], result["input_files_skipped"], result["input_files_pending"])
        assert counts == (landed, landed - new_files, new_files), result
        # s3:// inputs are read by the job's pyarrow reader, which counts every file it opens.
        assert result["input_pyarrow_files_read"] == new_files, result
        assert result["rows"] == new_files * ROWS_PER_FILE
        commit = airflow_harness.xcom(DAG_ID, run.run_id, "commit")
        assert commit["rows_committed"] == new_files * ROWS_PER_FILE, commit
        assert commit["retention_policy"] == "retain" and commit["unknown_files"] == 0

    expected = sorted(f * 1000 + i for f in range(landed) for i in range(ROWS_PER_FILE))
    assert _lake_event_ids(client, s3_bucket) == expected  # every landed row exactly once
    store = open_store(f"s3://{s3_bucket}/checkpoints/{DAG_ID}", **s3_server.options())
    progress = store.progress()
    assert progress.keys_done == landed and progress.key_type == "string"
    assert progress.epoch is not None and progress.epoch.number == 3
