"""The commit operator on a worker, over an S3 store whose records a bucket writer forged: roots on
the worker's host and in another bucket, and intent records naming files there as orphans. The
commit deletes nothing there (docs/security.md, "The trust model").

The DAG declares no ``output_roots`` (and ``[ckpt] trusted_output_roots`` is not set), so even a
root the records name in the store's own bucket declares nothing: the commit keeps its orphan and
says so (a warning naming the parameter, and ``output_files_kept`` in its XCom)."""

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
    # The records also name a root in the store's own bucket, with a real orphan under it.
    epoch = json.loads(store.blobs.get("epochs/00000001.json")[0])
    epoch["output_roots"].append(forged.own_output)
    store.blobs.put("epochs/00000001.json", json.dumps(epoch).encode())
    orphan = f"{forged.own_output}/part-orphan.parquet"
    open_blobs(forged.own_output, **forged.options).put("part-orphan.parquet", b"a failed attempt's rows")
    checkpoint_id = new_checkpoint_id()  # an attempt that never sealed: its files look like orphans
    record = {
        "checkpoint_id": checkpoint_id,
        "epoch": 1,
        "paths": [victim.as_uri(), f"{other_root}/orphan-looking.parquet", orphan],
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
    assert open_blobs(forged.own_output, **forged.options).get("part-orphan.parquet")[0] == b"a failed attempt's rows"
    summary = airflow_harness.xcom("ckpt_forged_commit", run.run_id, "commit")
    assert summary["orphans_deleted"] == 0 and orphan in summary["output_files_kept"], summary
    because = "No output root is declared (output_roots of DAG task 'ckpt_forged_commit.commit': none)"
    assert summary["output_kept_because"].startswith(because), summary
    assert because in run.output and "Set output_roots=[...]" in run.output
    # A reprocess from the DAG says the same before anything moves (without preview_only it is refused).
    preview = airflow_harness.xcom("ckpt_forged_commit", run.run_id, "reprocess")
    assert preview["result"] is None and preview["preview"]["refused_paths"], preview
    assert forged.host_file.as_uri() in preview["output_files_kept"], preview
    assert "DAG task 'ckpt_forged_commit.reprocess'" in preview["output_kept_because"], preview
    assert victim.read_text() == "keep me"
    assert open_blobs(other_root, **forged.options).get("orphan-looking.parquet")[0] == b"keep me too"
    forged.untouched()
