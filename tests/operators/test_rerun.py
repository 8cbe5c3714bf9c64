"""Re-running a day (docs/airflow.md, "Re-running a day"): real DAG runs, real metadata DB, real spark-submit.

Every run of the same logical date shares one store (the default location is per job, not per
run id), so a new run after a failed one resumes it and a re-run after a committed one replaces
the output. After each scenario a plain pyarrow reader of the output directory sees every key
exactly once. ``dag.test()`` with another ``run_after`` is a new run id for the same logical date,
as a second trigger or ``airflow dags test`` run again is; the same ``run_after`` clears and re-runs
the same run id, as "Clear" on the run does. Keys 0..39 in 4 partitions (dags/handoff_job.py).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from airflow_ckpt_provider.store import EpochStatus, open_store
from tests.support.airflow_harness import AirflowHarness

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"
DAG_ID = "ckpt_handoff"
KEYS = list(range(40))


def _install(harness: AirflowHarness) -> None:
    harness.install_dag(DAGS / "handoff_dag.py", DAGS / "handoff_job.py")


def _keys_a_reader_sees(output: Path) -> list[int]:
    """What a plain reader of the directory reads (no store, no catalog)."""
    keys: list[int] = ds.dataset(str(output), format="parquet").to_table(columns=["key"]).column("key").to_pylist()
    return sorted(keys)


def test_a_day_failed_resumed_triggered_again_and_cleared_holds_each_key_once(
    airflow_harness: AirflowHarness, tmp_path: Path
) -> None:
    """One day's history on one output: a failed run, a new run of the day (resumes it), a second
    trigger after its success (replaces the output), then Clear of that run (replaces it again).
    After each run a plain reader sees every key once and no file of the output it replaced."""
    _install(airflow_harness)
    output = tmp_path / "out"
    env = {"HANDOFF_OUTPUT": str(output)}
    day = dt.datetime(2024, 6, 1, tzinfo=dt.UTC)

    failed = airflow_harness.run_dag(DAG_ID, logical_date=day, conf={"fail_partition": 2}, env=env)
    assert failed.state == "failed", failed.output[-4000:]
    failed_plan = airflow_harness.xcom(DAG_ID, failed.run_id, "submit", "checkpoint_plan")
    assert failed_plan["rerun"]["action"] == "first"

    # A new run of the same day after the failure (a new run id): it resumes the failed one.
    resumed = airflow_harness.run_dag(
        DAG_ID, logical_date=day, run_after=day + dt.timedelta(hours=1), conf={"fail_partition": -1}, env=env
    )
    assert resumed.run_id != failed.run_id and resumed.state == "success", resumed.output[-4000:]
    plan = airflow_harness.xcom(DAG_ID, resumed.run_id, "submit", "checkpoint_plan")
    assert plan["checkpoint_uri"] == failed_plan["checkpoint_uri"]  # one store for the day
    assert plan["checkpoint_uri"].endswith("/ckpt_handoff/submit/date=2024-06-01")
    assert (plan["rerun"]["action"], plan["keys_skipped"], plan["checkpoints_skipped"]) == ("resume", 20, 2)
    commit = airflow_harness.xcom(DAG_ID, resumed.run_id, "commit")
    assert (commit["rows_committed"], commit["orphans_deleted"], commit["files_replaced"]) == (40, 1, 0)
    assert _keys_a_reader_sees(output) == KEYS
    resumed_files = set(output.glob("*.parquet"))

    # A second trigger of the committed day (a new run id, as `airflow dags test` run again gets).
    second_after = day + dt.timedelta(hours=2)
    second = airflow_harness.run_dag(DAG_ID, logical_date=day, run_after=second_after, env=env)
    assert second.run_id != resumed.run_id and second.state == "success", second.output[-4000:]
    plan = airflow_harness.xcom(DAG_ID, second.run_id, "submit", "checkpoint_plan")
    assert plan["rerun"]["action"] == "replace" and plan["rerun"]["live_run"] == resumed.run_id
    assert plan["keys_skipped"] == 0
    commit = airflow_harness.xcom(DAG_ID, second.run_id, "commit")
    assert (commit["rows_committed"], commit["files_replaced"], commit["unknown_files"]) == (40, 4, 0)
    assert _keys_a_reader_sees(output) == KEYS  # replaced, not appended
    assert not resumed_files & set(output.glob("*.parquet"))
    second_files = set(output.glob("*.parquet"))

    # "Clear" of that successful run: the same run id runs both tasks again.
    cleared = airflow_harness.run_dag(DAG_ID, logical_date=day, run_after=second_after, env=env)
    assert cleared.run_id == second.run_id and cleared.state == "success", cleared.output[-4000:]
    plan = airflow_harness.xcom(DAG_ID, cleared.run_id, "submit", "checkpoint_plan")
    assert (plan["rerun"]["action"], plan["epoch"], plan["keys_skipped"]) == ("replace", 4, 0)
    commit = airflow_harness.xcom(DAG_ID, cleared.run_id, "commit")
    assert (commit["rows_committed"], commit["files_replaced"]) == (40, 4)
    assert _keys_a_reader_sees(output) == KEYS and not second_files & set(output.glob("*.parquet"))
    store = open_store(plan["checkpoint_uri"])
    assert store.check().ok, store.check().problems
    assert store.rerun_plan("ckpt_handoff/submit/date=2024-06-01").action.value == "replace"


def test_on_rerun_skip_leaves_the_committed_output(airflow_harness: AirflowHarness, tmp_path: Path) -> None:
    _install(airflow_harness)
    output = tmp_path / "out"
    env = {"HANDOFF_OUTPUT": str(output), "HANDOFF_ON_RERUN": "skip"}
    day = dt.datetime(2024, 6, 3, tzinfo=dt.UTC)

    first = airflow_harness.run_dag(DAG_ID, logical_date=day, env=env)
    assert first.state == "success", first.output[-4000:]
    files = set(output.glob("*.parquet"))
    second = airflow_harness.run_dag(DAG_ID, logical_date=day, run_after=day + dt.timedelta(hours=1), env=env)
    assert second.state == "success", second.output[-4000:]
    result = airflow_harness.xcom(DAG_ID, second.run_id, "submit")
    assert result["skipped"] is True and result["rerun"]["action"] == "skip"
    commit = airflow_harness.xcom(DAG_ID, second.run_id, "commit")
    assert commit["already_committed"] and commit["rows_committed"] == 40
    assert set(output.glob("*.parquet")) == files and _keys_a_reader_sees(output) == KEYS
    store = open_store(result["checkpoint_uri"])
    assert [e.number for e in store.list_epochs()] == [1]  # nothing was submitted
    assert store.current_epoch() is not None and store.current_epoch().status is EpochStatus.COMMITTED


def test_unknown_files_in_the_output_fail_the_commit(airflow_harness: AirflowHarness, tmp_path: Path) -> None:
    _install(airflow_harness)
    output = tmp_path / "out"
    output.mkdir()
    stray = output / "part-00000-from-another-run.parquet"  # e.g. a run whose store was elsewhere
    pq.write_table(pa.table({"key": [0, 1], "value": [0, 10]}), stray)
    env = {"HANDOFF_OUTPUT": str(output)}
    day = dt.datetime(2024, 6, 4, tzinfo=dt.UTC)

    run = airflow_harness.run_dag(DAG_ID, logical_date=day, env=env)
    assert run.state == "failed"
    assert airflow_harness.task_instances(DAG_ID, run.run_id)["commit"][0] == "failed"
    assert "UnknownOutputFilesError" in run.output and stray.name in run.output
    assert 'unknown_files="keep"' in run.output
    assert stray.exists()
    plan = airflow_harness.xcom(DAG_ID, run.run_id, "submit", "checkpoint_plan")
    assert not open_store(plan["checkpoint_uri"]).progress().committed  # nothing committed

    # Kept knowingly: the commit goes through and says so.
    kept = airflow_harness.run_dag(DAG_ID, logical_date=day, env={**env, "HANDOFF_UNKNOWN_FILES": "keep"})
    assert kept.state == "success", kept.output[-4000:]
    commit = airflow_harness.xcom(DAG_ID, kept.run_id, "commit")
    assert commit["unknown_files"] == 1 and stray.exists()
