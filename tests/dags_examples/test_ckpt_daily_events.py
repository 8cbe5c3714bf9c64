"""Example DAG 1 (ckpt_daily_events) and its CheckpointedJob through failed, cleared and retried runs.

Real metadata DB, real spark-submit on local[2], the local store. The first run meets a
bad record: the job's own UDF raises on it (the failed task removes what it wrote), or,
as the second case, the writer of that partition dies half-way through its file (like a
killed executor), leaving an orphan that only the commit can remove.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_ckpt_provider.store import EpochStatus, open_store
from tests.support.airflow_harness import AirflowHarness

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"
DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"
EVENTS = 20_000


def _event_ids(directory: Path) -> list[int]:
    return sorted(
        i for p in directory.rglob("*.parquet") for i in pq.read_table(p, columns=["event_id"]).column(0).to_pylist()
    )


@pytest.mark.parametrize("fail_in", ["udf", "writer"])
def test_cleared_run_processes_only_the_remaining_keys(
    airflow_harness: AirflowHarness, tmp_path: Path, fail_in: str
) -> None:
    airflow_harness.install_dag(EXAMPLES / "ckpt_daily_events.py", EXAMPLES / "jobs")
    # A store of its own: the default location ($AIRFLOW_HOME/checkpoints/{dag}/{task}/{run}) is shared
    # by every case of this session that runs the same DAG on the same day.
    env = {"CKPT_EXAMPLE_LAKE": str(tmp_path / "lake"), "AIRFLOW__CKPT__BASE_URI": f"file://{tmp_path}/checkpoints"}
    day = dt.datetime(2024, 10, 2, tzinfo=dt.UTC)
    output = tmp_path / "lake" / "daily_events" / "day=2024-10-02"
    conf = {"events": EVENTS, "partitions": 4, "fail_in": fail_in}

    first = airflow_harness.run_dag("ckpt_daily_events", logical_date=day, conf={**conf, "fail_partition": 2}, env=env)
    assert first.state == "failed", first.output[-4000:]
    if fail_in == "udf":
        assert "could not convert string to float: 'N/A'" in first.output, "the job's own UDF failed the run"
    plan = airflow_harness.xcom("ckpt_daily_events", first.run_id, "process_events", "checkpoint_plan")
    store = open_store(plan["checkpoint_uri"])
    epoch = store.current_epoch()
    assert epoch is not None and epoch.status is EpochStatus.FAILED
    done = set(store.get_checkpointed_keys().column(0).to_pylist())
    sealed = len(store.valid_checkpoints())
    assert 0 < len(done) < EVENTS and 0 < sealed < 4
    files_after_failure = set(output.rglob("*.parquet"))
    # The crashed writer leaves its half-written file; the failed UDF's task removed its own (a task
    # running beside it that completed after Spark aborted the job may leave an unsealed file too).
    left_behind = len(files_after_failure) - sealed
    assert left_behind >= (1 if fail_in == "writer" else 0)

    second = airflow_harness.run_dag(
        "ckpt_daily_events", logical_date=day, conf={**conf, "fail_partition": -1}, env=env
    )
    assert second.run_id == first.run_id and second.state == "success", second.output[-4000:]
    plan = airflow_harness.xcom("ckpt_daily_events", second.run_id, "process_events", "checkpoint_plan")
    assert (plan["epoch"], plan["keys_skipped"], plan["checkpoints_skipped"]) == (2, len(done), sealed)
    result = airflow_harness.xcom("ckpt_daily_events", second.run_id, "process_events")
    assert result["keys"] == EVENTS - len(done) and result["rows"] == EVENTS - len(done)  # only the rest
    commit = airflow_harness.xcom("ckpt_daily_events", second.run_id, "commit")
    assert (commit["rows_committed"], commit["orphans_deleted"], commit["unknown_files"]) == (EVENTS, left_behind, 0)
    orphans = [p for p in files_after_failure if not p.exists()]
    assert len(orphans) == left_behind
    ids = _event_ids(output)
    assert len(ids) == EVENTS and len(set(ids)) == EVENTS  # each key's row exactly once
    assert store.list_checkpoints() == []


def test_airflow_retry_resumes_with_checkpointed_job(airflow_harness: AirflowHarness, tmp_path: Path) -> None:
    airflow_harness.install_dag(DAGS / "daily_retry_dag.py", EXAMPLES / "jobs")
    output = tmp_path / "out"
    env = {
        "DAILY_RETRY_OUTPUT": str(output),
        # Epoch 1 only: partition 2's Python worker dies right after writing its file.
        "CKPT_FAILPOINTS": "spark.task.after_write.e1.p2.a0=exit",
    }
    run = airflow_harness.run_dag("ckpt_daily_retry", logical_date=dt.datetime(2024, 10, 3, tzinfo=dt.UTC), env=env)
    assert run.state == "success", run.output[-4000:]
    assert airflow_harness.task_instances("ckpt_daily_retry", run.run_id)["process_events"] == ("success", 2)
    plan = airflow_harness.xcom("ckpt_daily_retry", run.run_id, "process_events", "checkpoint_plan")
    result = airflow_harness.xcom("ckpt_daily_retry", run.run_id, "process_events")
    assert plan["epoch"] == 2 and 0 < plan["keys_skipped"] < EVENTS
    assert result["keys"] == EVENTS - plan["keys_skipped"]
    commit = airflow_harness.xcom("ckpt_daily_retry", run.run_id, "commit")
    assert commit["rows_committed"] == EVENTS and commit["orphans_deleted"] >= 1
    ids = _event_ids(output)
    assert len(ids) == EVENTS and len(set(ids)) == EVENTS
