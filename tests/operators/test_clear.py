"""ClearCheckpointsOperator in a DAG run: the next run reprocesses every key; committed output stays."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from airflow_ckpt_provider.store import EpochStatus, FileMetadata, RetentionPolicy, new_checkpoint_id, open_store
from tests.support.airflow_harness import AirflowHarness

pytestmark = pytest.mark.airflow

DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"


def _seal(store_uri: str, epoch: int, partition: int, output: Path) -> Path:
    store = open_store(store_uri)
    path = output / f"part-{partition}.parquet"
    cid = new_checkpoint_id()
    store.record_intent(cid, [f"file://{path}"])
    path.write_bytes(b"not really parquet")
    store.stage_keys(cid, [partition * 10 + i for i in range(10)])
    store.stage_files(cid, [FileMetadata(f"file://{path}", path.stat().st_size, 10)])
    store.checkpoint(cid, epoch=epoch, partition=partition)
    return path


def test_clear_resets_the_store_and_keeps_committed_output(airflow_harness: AirflowHarness, tmp_path: Path) -> None:
    airflow_harness.install_dag(DAGS / "clear_dag.py")
    uri = f"file://{tmp_path / 'store'}"
    output = tmp_path / "out"
    output.mkdir()
    store = open_store(uri)
    first = store.epochs.begin(owner="job", output_roots=[f"file://{output}"]).number
    committed_file = _seal(uri, first, 0, output)
    store.epochs.end(first, status=EpochStatus.SUCCEEDED)
    store.commit([f"file://{output}"])
    store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    second = store.epochs.begin(owner="job", output_roots=[f"file://{output}"]).number
    uncommitted_file = _seal(uri, second, 1, output)
    assert store.inspection.progress().keys_done == 20

    run = airflow_harness.run_dag(
        "ckpt_clear",
        logical_date=dt.datetime(2024, 11, 1, tzinfo=dt.UTC),
        env={"CLEAR_STORE": uri, "CLEAR_OUTPUT": f"file://{output}"},
    )
    assert run.state == "success", run.output[-4000:]
    summary = airflow_harness.xcom("ckpt_clear", run.run_id, "clear")
    assert summary["checkpoint_uri"] == uri and summary["files_deleted"] == 1
    assert summary["output_kept_because"] is None and summary["output_files_kept"] == []
    progress = store.inspection.progress()
    assert progress.keys_done == 0 and progress.valid_checkpoints == 0
    assert committed_file.exists() and not uncommitted_file.exists()


def test_where_the_dag_declares_nothing_configured_roots_bound_what_the_store_records(
    airflow_harness: AirflowHarness, tmp_path: Path
) -> None:
    """``[ckpt] trusted_output_roots`` anchors a task that declares no output roots: a root the store
    records under a configured one counts; one outside (a forged record naming the worker's host)
    declares nothing, so its file stays (docs/security.md)."""
    airflow_harness.install_dag(DAGS / "clear_dag.py")
    uri = f"file://{tmp_path / 'store'}"
    lake, host = tmp_path / "lake", tmp_path / "host"
    (lake / "events").mkdir(parents=True)
    host.mkdir()
    store = open_store(uri)
    # A writer of the store records two roots: the job's output in the lake, and a directory on the host.
    epoch = store.epochs.begin(owner="job", output_roots=[f"file://{lake / 'events'}", f"file://{host}"]).number
    in_lake = _seal(uri, epoch, 0, lake / "events")
    on_host = _seal(uri, epoch, 1, host)
    configured = f"file://{tmp_path / 'elsewhere'}, file://{lake}"
    guard = open_store(uri, configured_output_roots=[r.strip() for r in configured.split(",")]).deletion_guard()
    assert guard.root_uris == (f"file://{lake / 'events'}",), guard
    assert any(f"output root file://{host} is outside" in r for r in guard.refused_roots), guard

    run = airflow_harness.run_dag(
        "ckpt_clear",
        logical_date=dt.datetime(2024, 11, 2, tzinfo=dt.UTC),
        env={
            "CLEAR_STORE": uri,
            "AIRFLOW__CKPT__TRUSTED_OUTPUT_ROOTS": f"file://{tmp_path / 'elsewhere'}, file://{lake}",
        },
    )
    assert run.state == "success", run.output[-4000:]
    summary = airflow_harness.xcom("ckpt_clear", run.run_id, "clear")
    assert not in_lake.exists() and on_host.read_bytes() == b"not really parquet"
    assert summary["files_deleted"] == 1 and summary["output_kept_because"] is None
    assert store.inspection.progress().keys_done == 0
