"""Example DAGs 2 and 4: three incremental runs, a rewind to commit 1, then the next run.

Real SeaweedFS S3, real spark-submit, real metadata DB, file keys with the ``retain`` policy.
Each incremental run opens only the files that are new (the job's own read counters), skips the
others and commits their rows. After the rewind the lake holds exactly the rows of run 1
(runs 2-3's lake files are in the store's quarantine); the next ingestion run opens exactly the
landing files of runs 2-3 and afterwards every landed row is in the lake exactly once.

Three runs, not four: rewinding two commits onto the first shows what rewinding onto a later one
does at the DAG level (each ingestion run costs a spark-submit); a rewind to commit 2 of 4, with and
without retention, on local disk and S3, is tests/store/test_reprocess.py::test_rewind_to_commit_2_of_4.
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
INGEST = "ckpt_incremental_ingest"
REWIND = "ckpt_rewind_incremental"
ROWS_PER_FILE = 20
FILES_PER_RUN = (2, 1, 2)
REWIND_TO = 1


def _land(client: Any, bucket: str, file_number: int) -> None:
    ids = [file_number * 1000 + i for i in range(ROWS_PER_FILE)]
    table = pa.table({"event_id": ids, "file_number": [file_number] * len(ids)})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    client.put_object(Bucket=bucket, Key=f"landing/events/f{file_number:03d}.parquet", Body=buffer.getvalue())


def _lake(client: Any, bucket: str) -> dict[str, list[int]]:
    """Lake file -> its event ids, read with plain pyarrow (what any reader of the lake sees)."""
    files: dict[str, list[int]] = {}
    for item in client.list_objects_v2(Bucket=bucket, Prefix="lake/events/").get("Contents", []):
        body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
        files[item["Key"]] = pq.read_table(io.BytesIO(body)).column("event_id").to_pylist()
    return files


def _ids(lake: dict[str, list[int]]) -> list[int]:
    return sorted(i for ids in lake.values() for i in ids)


def _rows_of(files: range) -> list[int]:
    return sorted(f * 1000 + i for f in files for i in range(ROWS_PER_FILE))


@pytest.mark.timeout(3000)  # five DAG runs, four with spark-submit: ~8 min on a quiet 2-core machine, 20+ under load
def test_rewind_to_commit_1_of_3_then_the_next_run_redoes_2_and_3(
    airflow_harness: AirflowHarness, s3_server: Any, s3_bucket: str
) -> None:
    airflow_harness.install_dag(EXAMPLES / f"{INGEST}.py", EXAMPLES / "jobs")
    airflow_harness.install_dag(EXAMPLES / f"{REWIND}.py")
    client = s3_server.client()
    connection = {
        "conn_type": "aws",
        "login": s3_server.access_key,
        "password": s3_server.secret_key,
        "extra": {"endpoint_url": s3_server.endpoint_url, "region_name": s3_server.region},
    }
    env = {"CKPT_EXAMPLE_BUCKET": s3_bucket, "AIRFLOW_CONN_CKPT_S3": json.dumps(connection)}
    store = open_store(f"s3://{s3_bucket}/checkpoints/{INGEST}", **s3_server.options())

    landed = 0
    lake_after: list[dict[str, list[int]]] = []
    for day, new_files in enumerate(FILES_PER_RUN, start=1):
        for _ in range(new_files):
            _land(client, s3_bucket, landed)
            landed += 1
        run = airflow_harness.run_dag(
            INGEST, logical_date=dt.datetime(2024, 7, day, tzinfo=dt.UTC), env=env, timeout=900
        )
        assert run.state == "success", run.output[-5000:]
        result = airflow_harness.xcom(INGEST, run.run_id, "ingest")
        counts = (result["input_files_listed"], result["input_files_skipped"], result["input_files_pending"])
        assert counts == (landed, landed - new_files, new_files), result
        # s3:// inputs are read by the job's pyarrow reader, which counts every file it opens.
        assert result["input_pyarrow_files_read"] == new_files, result
        assert result["rows"] == new_files * ROWS_PER_FILE
        commit = airflow_harness.xcom(INGEST, run.run_id, "commit")
        assert commit["rows_committed"] == new_files * ROWS_PER_FILE, commit
        assert commit["retention_policy"] == "retain" and commit["unknown_files"] == 0
        lake_after.append(_lake(client, s3_bucket))
        assert _ids(lake_after[-1]) == _rows_of(range(landed))  # every landed row exactly once
    assert store.inspection.progress().key_type == "string"
    commits = [e.number for e in store.epochs.all() if e.status.value == "committed"]
    assert commits == [1, 2, 3], store.epochs.all()
    kept = sum(FILES_PER_RUN[:REWIND_TO])

    rewind = airflow_harness.run_dag(
        REWIND,
        logical_date=dt.datetime(2024, 7, 10, tzinfo=dt.UTC),
        conf={"to_commit": REWIND_TO},
        env=env,
        timeout=600,
    )
    assert rewind.state == "success", rewind.output[-5000:]
    result = airflow_harness.xcom(REWIND, rewind.run_id, "rewind")["result"]
    moved = set(lake_after[-1]) - set(lake_after[REWIND_TO - 1])
    assert result["keys"] == landed - kept  # one file key per landing file of runs 2-3
    assert result["moved"] == len(moved) and result["deleted"] == result["missing"] == 0
    assert f"Rewind s3://{s3_bucket}/checkpoints/{INGEST} to commit {REWIND_TO}" in rewind.output  # the preview, logged
    lake = _lake(client, s3_bucket)
    assert lake == lake_after[REWIND_TO - 1]  # readers see the lake as it was after commit 1
    assert _ids(lake) == _rows_of(range(kept))
    assert store.inspection.check().ok, store.inspection.check()
    assert store.inspection.progress().keys_done == kept

    run = airflow_harness.run_dag(INGEST, logical_date=dt.datetime(2024, 7, 11, tzinfo=dt.UTC), env=env, timeout=900)
    assert run.state == "success", run.output[-5000:]
    counts = airflow_harness.xcom(INGEST, run.run_id, "ingest")
    assert counts["input_files_pending"] == landed - kept, counts
    assert counts["input_pyarrow_files_read"] == landed - kept, counts  # runs 2-3's files only
    assert counts["rows"] == (landed - kept) * ROWS_PER_FILE
    assert _ids(_lake(client, s3_bucket)) == _rows_of(range(landed))  # every landed row exactly once
    assert store.inspection.check().ok and store.inspection.progress().keys_done == landed
    quarantined = [
        o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket, Prefix="checkpoints/").get("Contents", [])
    ]
    assert sum("/quarantine/" in k for k in quarantined) == len(moved)  # kept until a purge
