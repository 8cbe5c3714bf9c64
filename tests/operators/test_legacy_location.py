"""A run that failed before the upgrade resumes from the store 0.1 left at its old location.

0.1 spelled ``:`` and ``+`` of run ids as ``_`` (not injective; hooks/default_location.py).
Here the store of a failed 0.1 run is written as 0.1's operator and job wrote it (owner
``dag/task/run``, two sealed partitions with their files), then the same DAG run runs
again with this version: real metadata DB, real spark-submit.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_ckpt_provider.hooks.default_location import legacy_location
from airflow_ckpt_provider.store import EpochStatus, FileMetadata, new_checkpoint_id, open_store
from tests.support.airflow_harness import AirflowHarness

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"
DAG_ID = "ckpt_handoff"


def test_a_store_at_the_0_1_location_is_resumed_after_the_upgrade(
    airflow_harness: AirflowHarness, tmp_path: Path
) -> None:
    airflow_harness.install_dag(DAGS / "handoff_dag.py", DAGS / "handoff_job.py")
    day = dt.datetime(2024, 3, 9, tzinfo=dt.UTC)
    run_id = f"manual__{day.isoformat()}"  # what dag.test() names the run
    legacy = legacy_location(str(airflow_harness.home / "checkpoints"), DAG_ID, "submit", run_id)
    assert legacy.endswith("/manual__2024-03-09T00_00_00_00_00")
    output = tmp_path / "out"
    output.mkdir()
    store = open_store(legacy)
    epoch = store.begin_epoch(
        owner=f"{DAG_ID}/submit/{run_id}", metadata={"dag_id": DAG_ID, "task_id": "submit", "run_id": run_id}
    )
    for partition in (0, 1):  # what handoff_job.py seals for partitions 0 and 1 of 4
        keys = list(range(partition * 10, partition * 10 + 10))
        checkpoint_id, path = new_checkpoint_id(), output / f"part-{partition:05d}-old.parquet"
        store.record_intent(checkpoint_id, [f"file://{path}"], epoch=epoch.number)
        pq.write_table(pa.table({"key": keys, "value": [k * 10 for k in keys]}), path)
        store.stage_keys(checkpoint_id, keys)
        store.stage_files(checkpoint_id, [FileMetadata(f"file://{path}", path.stat().st_size, len(keys))])
        store.checkpoint(checkpoint_id, epoch=epoch.number, partition=partition)
    store.end_epoch(epoch.number, status=EpochStatus.FAILED)

    run = airflow_harness.run_dag(
        DAG_ID, logical_date=day, conf={"fail_partition": -1}, env={"HANDOFF_OUTPUT": str(output)}
    )
    assert run.run_id == run_id and run.state == "success", run.output[-4000:]
    plan = airflow_harness.xcom(DAG_ID, run_id, "submit", "checkpoint_plan")
    assert plan["checkpoint_uri"] == f"file://{legacy}"
    assert (plan["epoch"], plan["keys_skipped"]) == (2, 20)
    assert "at its 0.1 location" in run.output
    commit = airflow_harness.xcom(DAG_ID, run_id, "commit")
    assert commit["checkpoint_uri"] == f"file://{legacy}" and commit["rows_committed"] == 40
    keys = sorted(k for p in output.glob("*.parquet") for k in pq.read_table(p).column("key").to_pylist())
    assert keys == list(range(40))  # the 0.1 run's 20 keys and the rest, each once
