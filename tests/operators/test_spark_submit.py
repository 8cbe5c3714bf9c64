"""CheckpointedSparkSubmitOperator through real DAG runs: real metadata DB, real spark-submit.

The job here (dags/handoff_job.py) uses the store API directly, so these tests pin the
operator's contract with any job: epochs per submit, what is skipped, the result (here only
through the driver's CKPT_RESULT line, which the operator asks for and reads from spark-submit's
log), the commit. Keys 0..39 in 4 partitions of 10 on local[1] (partitions run in order).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_ckpt_provider.store import EpochStatus, open_store
from tests.support.airflow_harness import AirflowHarness, StatsdListener

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"
DAG_ID = "ckpt_handoff"


def _install(harness: AirflowHarness) -> None:
    harness.install_dag(DAGS / "handoff_dag.py", DAGS / "handoff_job.py")


def _output_keys(output: Path) -> list[int]:
    keys: list[int] = []
    for path in sorted(output.glob("*.parquet")):
        keys.extend(pq.read_table(path).column("key").to_pylist())
    return sorted(keys)


@pytest.fixture
def statsd() -> Iterator[StatsdListener]:
    if importlib.util.find_spec("statsd") is None:
        pytest.fail("Airflow's StatsD client needs the statsd package (pyproject test extra: statsd>=4,<5)")
    listener = StatsdListener()
    yield listener
    listener.close()


def test_cleared_run_resumes_and_commit_removes_orphans(
    airflow_harness: AirflowHarness, tmp_path: Path, statsd: StatsdListener
) -> None:
    _install(airflow_harness)
    output = tmp_path / "out"
    env = {"HANDOFF_OUTPUT": str(output), **statsd.env()}
    day = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)

    first = airflow_harness.run_dag(DAG_ID, logical_date=day, conf={"fail_partition": 2}, env=env)
    assert first.state == "failed", first.output[-4000:]
    assert airflow_harness.task_instances(DAG_ID, first.run_id)["submit"][0] == "failed"
    plan = airflow_harness.xcom(DAG_ID, first.run_id, "submit", "checkpoint_plan")
    store = open_store(plan["checkpoint_uri"])
    epoch = store.epochs.current()
    assert epoch is not None and epoch.number == 1 and epoch.status is EpochStatus.FAILED
    assert epoch.owner == f"{DAG_ID}/submit/{first.run_id}"
    assert sorted(store.get_checkpointed_keys().column("key").to_pylist()) == list(range(20))
    orphans = set(output.glob("part-00002-*.parquet"))
    assert len(orphans) == 1  # written, never sealed

    # Clear and run the same DAG run again (same run id, so the same default store).
    second = airflow_harness.run_dag(DAG_ID, logical_date=day, conf={"fail_partition": -1}, env=env)
    assert second.run_id == first.run_id
    assert second.state == "success", second.output[-4000:]
    plan = airflow_harness.xcom(DAG_ID, second.run_id, "submit", "checkpoint_plan")
    assert (plan["epoch"], plan["checkpoints_skipped"], plan["keys_skipped"]) == (2, 2, 20)
    result = airflow_harness.xcom(DAG_ID, second.run_id, "submit")  # from the driver's result line
    assert (result["keys"], result["sealed_partitions"], result["degraded"]) == (20, 2, False)
    assert result["input_keys_skipped"] == 20
    assert "skipping 20 keys already done in 2 valid checkpoints" in second.output

    commit = airflow_harness.xcom(DAG_ID, second.run_id, "commit")
    assert commit["rows_committed"] == 40 and commit["files_committed"] == 4
    assert commit["orphans_deleted"] == 1 and commit["unknown_files"] == 0
    assert not any(path.exists() for path in orphans)
    assert _output_keys(output) == list(range(40))  # each key exactly once
    assert store.inspection.list_checkpoints() == []  # delete_after_success

    # Metrics went out through Airflow's Stats (StatsD here), one set per submit and commit.
    assert statsd.metrics("airflow.ckpt.submits:1|c") and statsd.metrics("airflow.ckpt.keys_skipped:20|c")
    assert statsd.metrics("airflow.ckpt.checkpoints_sealed:2|c")
    assert statsd.metrics("airflow.ckpt.orphans_deleted:1|c")
    assert statsd.metrics("airflow.ckpt.commit_duration:")
