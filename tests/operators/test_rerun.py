"""Re-running a day (docs/airflow.md, "Re-running a day"): real DAG runs, real metadata DB, real spark-submit.

Every run of the same logical date shares one store (the default location is per job, not per
run id), so a new run after a failed or killed one resumes it and a re-run after a committed one
replaces the output. After each run a plain pyarrow reader of the output directory is checked
against what the history should leave there: every key exactly once after a commit.
``airflow dags test`` (the real CLI) gives every run a new run id for the same logical date and
replaces the earlier run of that date in the metadata DB; ``dag.test()`` with another ``run_after``
does the same from the harness. Keys 0..39 in 4 partitions (dags/handoff_job.py).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

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


def _dags_test(harness: AirflowHarness, day: dt.datetime, env: dict[str, str], conf: dict[str, Any]) -> str:
    """`airflow dags test` of ``day`` through the real CLI; its output."""
    done = harness.airflow("dags", "test", DAG_ID, day.date().isoformat(), "-c", json.dumps(conf), env=env, timeout=900)
    return done.stdout + done.stderr


@pytest.mark.s3
@pytest.mark.timeout(1800)
def test_a_day_failed_killed_taken_over_and_run_again_holds_each_key_once(
    airflow_harness: AirflowHarness, s3_server: Any, s3_bucket: str, tmp_path: Path
) -> None:
    """One day's history on one output, its store on S3 (the default location under ``[ckpt] base_uri``):

    1. a run fails in partition 2 (partitions 0 and 1 sealed, partition 2's file an orphan);
    2. ``airflow dags test`` of the day resumes it and is held while partition 3's file is written
       but not sealed; meanwhile a run of the next day given the same store is refused (its owner is
       running); then it is killed: its epoch stays open, its task instance "running" in the DB;
    3. ``airflow dags test`` again: it replaced the killed run in the metadata DB, so the new run takes
       the open epoch over (operators/takeover.py), skips the 30 sealed keys, and its commit deletes
       both orphans;
    4. ``airflow dags test`` once more after that success: the run replaces the committed output.
    """
    _install(airflow_harness)
    output = tmp_path / "out"
    connection = {
        "conn_type": "aws",
        "login": s3_server.access_key,
        "password": s3_server.secret_key,
        "extra": {"endpoint_url": s3_server.endpoint_url, "region_name": s3_server.region},
    }
    env = {
        "HANDOFF_OUTPUT": str(output),
        "AIRFLOW__CKPT__BASE_URI": f"s3://{s3_bucket}/ckpt",
        "AIRFLOW__CKPT__AWS_CONN_ID": "ckpt_s3",
        "AIRFLOW_CONN_CKPT_S3": json.dumps(connection),
    }
    day = dt.datetime(2024, 6, 1, tzinfo=dt.UTC)
    uri = f"s3://{s3_bucket}/ckpt/ckpt_handoff/submit/date=2024-06-01"
    # Opened as the DAG's tasks open it: the output roots the DAG declares are vouched for (local
    # output beside an S3 store is another filesystem, which a store's records alone never declare).
    store = open_store(uri, trusted_output_roots=[str(output)], **s3_server.options())

    # 1. A run of the day fails in partition 2.
    failed = airflow_harness.run_dag(DAG_ID, logical_date=day, conf={"fail_partition": 2}, env=env)
    assert failed.state == "failed", failed.output[-4000:]
    plan = airflow_harness.xcom(DAG_ID, failed.run_id, "submit", "checkpoint_plan")
    assert (plan["checkpoint_uri"], plan["rerun"]["action"]) == (uri, "first")
    assert store.inspection.progress().keys_done == 20 and _keys_a_reader_sees(output) == KEYS[:30]  # 20-29: the orphan
    orphans = set(output.glob("part-00002-*.parquet"))  # partition 2's file, written but never sealed
    assert len(orphans) == 1

    # 2. `airflow dags test` resumes it and is killed in partition 3, after its write, before its seal.
    marker = tmp_path / "held"
    killed_log = tmp_path / "killed.log"
    proc = airflow_harness.start_airflow(
        "dags",
        "test",
        DAG_ID,
        day.date().isoformat(),
        "-c",
        json.dumps({"hold_partition": 3, "hold_marker": str(marker)}),
        output=killed_log,
        env=env,
    )
    try:
        deadline = time.monotonic() + 900
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert marker.exists(), killed_log.read_text(errors="replace")[-4000:]
        # While it is held (its task instance "running" in the metadata DB), a run of another day
        # given the same store (a checkpoint_uri shared by days) must not take its epoch over.
        intruder = _dags_test(airflow_harness, day + dt.timedelta(days=1), {**env, "HANDOFF_STORE": uri}, {})
        assert proc.poll() is None, "the held run should still be running"
    finally:
        airflow_harness.kill_group(proc)
    assert "EpochConflictError" in intruder and "Taking over" not in intruder, intruder[-4000:]
    assert airflow_harness.run_of(DAG_ID, day + dt.timedelta(days=1))[1] == "failed"
    killed_run, state = airflow_harness.run_of(DAG_ID, day)
    assert killed_run != failed.run_id and state == "running"
    plan = airflow_harness.xcom(DAG_ID, killed_run, "submit", "checkpoint_plan")
    assert (plan["rerun"]["action"], plan["epoch"], plan["keys_skipped"]) == ("resume", 2, 20)
    epoch = store.epochs.current()
    assert epoch is not None and epoch.number == 2 and epoch.status is EpochStatus.OPEN
    assert epoch.owner == f"{DAG_ID}/submit/{killed_run}" and store.inspection.progress().keys_done == 30
    assert _keys_a_reader_sees(output) == sorted(KEYS + KEYS[20:30])  # uncommitted: 20-29 twice
    orphans |= set(output.glob("part-00003-*.parquet"))  # the held partition's file
    assert len(orphans) == 2

    # 3. `airflow dags test` again: the killed run is gone from the DB, so its open epoch is taken over.
    log = _dags_test(airflow_harness, day, env, {})
    run_id, state = airflow_harness.run_of(DAG_ID, day)
    assert run_id != killed_run and state == "success", log[-4000:]
    plan = airflow_harness.xcom(DAG_ID, run_id, "submit", "checkpoint_plan")
    assert (plan["rerun"]["action"], plan["epoch"], plan["keys_skipped"]) == ("resume", 3, 30)
    assert plan["took_over"]["epoch"] == 2 and plan["took_over"]["owner"] == epoch.owner
    assert "no longer in the metadata DB" in plan["took_over"]["reason"]
    assert "Taking over epoch 2" in log
    commit = airflow_harness.xcom(DAG_ID, run_id, "commit")
    assert (commit["rows_committed"], commit["orphans_deleted"], commit["files_replaced"]) == (40, 2, 0)
    assert _keys_a_reader_sees(output) == KEYS and not orphans & set(output.glob("*.parquet"))
    committed_files = set(output.glob("*.parquet"))

    # 4. `airflow dags test` once more, after the success: the re-run replaces the committed output.
    log = _dags_test(airflow_harness, day, env, {})
    second_run, state = airflow_harness.run_of(DAG_ID, day)
    assert second_run != run_id and state == "success", log[-4000:]
    plan = airflow_harness.xcom(DAG_ID, second_run, "submit", "checkpoint_plan")
    assert (plan["rerun"]["action"], plan["rerun"]["live_run"], plan["keys_skipped"]) == ("replace", run_id, 0)
    assert "took_over" not in plan
    commit = airflow_harness.xcom(DAG_ID, second_run, "commit")
    assert (commit["rows_committed"], commit["files_replaced"], commit["unknown_files"]) == (40, 4, 0)
    assert _keys_a_reader_sees(output) == KEYS and not committed_files & set(output.glob("*.parquet"))
    assert store.inspection.check().ok, store.inspection.check().problems
    assert store.inspection.rerun_plan("ckpt_handoff/submit/date=2024-06-01").action.value == "replace"


def test_unknown_files_in_the_output_fail_the_commit(airflow_harness: AirflowHarness, tmp_path: Path) -> None:
    _install(airflow_harness)
    output = tmp_path / "out"
    output.mkdir()
    stray = output / "part-00000-from-another-run.parquet"  # e.g. a run whose store was elsewhere
    pq.write_table(pa.table({"key": [0, 1], "value": [0, 10]}), stray)
    env = {"HANDOFF_OUTPUT": str(output)}
    # Triggered by hand at 10:30 (Airflow 3 gives a manual trigger its trigger time as logical date):
    # the error also says that such a run is another job than the day's earlier runs.
    day = dt.datetime(2024, 6, 4, 10, 30, tzinfo=dt.UTC)

    run = airflow_harness.run_dag(DAG_ID, logical_date=day, env=env)
    assert run.state == "failed"
    assert airflow_harness.task_instances(DAG_ID, run.run_id)["commit"][0] == "failed"
    assert "RefusedError" in run.output and "written by no run of" in run.output and stray.name in run.output
    assert 'unknown_files="keep"' in run.output
    assert "triggered by hand with logical date 2024-06-04T10:30:00+00:00" in run.output
    assert stray.exists()
    plan = airflow_harness.xcom(DAG_ID, run.run_id, "submit", "checkpoint_plan")
    assert not open_store(plan["checkpoint_uri"]).inspection.progress().committed  # nothing committed

    # Kept knowingly: the commit goes through and says so.
    kept = airflow_harness.run_dag(DAG_ID, logical_date=day, env={**env, "HANDOFF_UNKNOWN_FILES": "keep"})
    assert kept.state == "success", kept.output[-4000:]
    commit = airflow_harness.xcom(DAG_ID, kept.run_id, "commit")
    assert commit["unknown_files"] == 1 and stray.exists()
