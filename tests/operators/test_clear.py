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
    first = store.begin_epoch(owner="job", output_roots=[f"file://{output}"]).number
    committed_file = _seal(uri, first, 0, output)
    store.end_epoch(first, status=EpochStatus.SUCCEEDED)
    store.commit([f"file://{output}"])
    store.cleanup(RetentionPolicy.RETAIN)
    second = store.begin_epoch(owner="job", output_roots=[f"file://{output}"]).number
    uncommitted_file = _seal(uri, second, 1, output)
    assert store.progress().keys_done == 20

    run = airflow_harness.run_dag(
        "ckpt_clear", logical_date=dt.datetime(2024, 11, 1, tzinfo=dt.UTC), env={"CLEAR_STORE": uri}
    )
    assert run.state == "success", run.output[-4000:]
    summary = airflow_harness.xcom("ckpt_clear", run.run_id, "clear")
    assert summary["checkpoint_uri"] == uri and summary["files_deleted"] == 1
    progress = store.progress()
    assert progress.keys_done == 0 and progress.valid_checkpoints == 0
    assert committed_file.exists() and not uncommitted_file.exists()
