"""The commit operator on a worker, over an S3 store whose records a bucket writer forged: roots on
the worker's host and in another bucket, and intent records naming files there as orphans. The
commit deletes nothing there (docs/security.md, "The trust model")."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import pytest

from airflow_ckpt_provider.store import new_checkpoint_id, open_blobs
from tests.store.test_root_binding import Forged
from tests.store.test_root_binding import forged as forged  # the fixture
from tests.support.airflow_harness import AirflowHarness

pytestmark = [pytest.mark.airflow, pytest.mark.s3]

DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"


def test_the_commit_operator_deletes_nothing_forged_roots_name(airflow_harness: AirflowHarness, forged: Forged) -> None:
    airflow_harness.install_dag(DAGS / "forged_commit_dag.py")
    victim = forged.host_file.parent / "worker-secret.txt"
    victim.write_text("keep me")
    other_root = forged.other_uri.rpartition("/")[0]
    open_blobs(other_root, **forged.options).put("orphan-looking.parquet", b"keep me too")
    store = forged.store()
    checkpoint_id = new_checkpoint_id()  # an attempt that never sealed: its files look like orphans
    record = {
        "checkpoint_id": checkpoint_id,
        "epoch": 1,
        "paths": [victim.as_uri(), f"{other_root}/orphan-looking.parquet"],
    }
    store.blobs.put(f"attempts/{checkpoint_id}/intents/0000.json", json.dumps(record).encode())
    connection = {
        "conn_type": "aws",
        "login": forged.options["aws_access_key_id"],
        "password": forged.options["aws_secret_access_key"],
        "extra": {"endpoint_url": forged.options["endpoint_url"], "region_name": forged.options["region_name"]},
    }
    conn_id = f"forged_{uuid.uuid4().hex[:8]}"
    run = airflow_harness.run_dag(
        "ckpt_forged_commit",
        logical_date=dt.datetime(2024, 11, 2, tzinfo=dt.UTC),
        env={
            "FORGED_STORE": forged.store_uri,
            "FORGED_CONN": conn_id,
            f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(connection),
        },
    )
    assert run.state == "success", run.output[-4000:]
    assert victim.read_text() == "keep me"
    assert open_blobs(other_root, **forged.options).get("orphan-looking.parquet")[0] == b"keep me too"
    forged.untouched()
