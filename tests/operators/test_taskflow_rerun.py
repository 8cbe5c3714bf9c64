"""A killed TaskFlow try (``@task.checkpointed_pyspark``), taken over by the next run of its day, as for
the submit operator (tests/operators/test_rerun.py): real ``airflow dags test`` runs through the CLI, real
metadata DB, a classic local session in the task's process (killed with it).

1. ``airflow dags test`` of the day is held in the user's code in partition 3 (partitions 0-2 sealed) and
   SIGKILLed with its process group: its epoch stays open, its task instance "running" in the DB;
2. ``airflow dags test`` again: it replaced the killed run in the metadata DB, so the new run takes the
   open epoch over, skips the 30 sealed keys, and its commit leaves every key once for a plain reader.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from airflow_ckpt_provider.store import EpochStatus, open_store
from tests.support.airflow_harness import AirflowHarness

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"
DAG_ID = "ckpt_taskflow_handoff"
KEYS = list(range(40))


def _keys_a_reader_sees(output: Path) -> list[int]:
    keys: list[int] = ds.dataset(str(output), format="parquet").to_table(columns=["key"]).column("key").to_pylist()
    return sorted(keys)


@pytest.mark.timeout(1200)
def test_a_killed_taskflow_try_is_taken_over_by_the_next_run_of_its_day(
    airflow_harness: AirflowHarness, tmp_path: Path
) -> None:
    airflow_harness.install_dag(DAGS / "taskflow_handoff_dag.py")
    output = tmp_path / "out"
    env = {"HANDOFF_OUTPUT": str(output)}
    day = dt.datetime(2024, 7, 1, tzinfo=dt.UTC)

    # 1. Held in partition 3, then killed with its process group (the task's Spark JVM included).
    marker = tmp_path / "held"
    killed_log = tmp_path / "killed.log"
    conf = json.dumps({"hold_partition": 3, "hold_marker": str(marker)})
    proc = airflow_harness.start_airflow(
        "dags", "test", DAG_ID, day.date().isoformat(), "-c", conf, output=killed_log, env=env
    )
    try:
        deadline = time.monotonic() + 600
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert marker.exists(), killed_log.read_text(errors="replace")[-4000:]
    finally:
        airflow_harness.kill_group(proc)
    killed_run, state = airflow_harness.run_of(DAG_ID, day)
    assert state == "running"
    plan = airflow_harness.xcom(DAG_ID, killed_run, "handoff", "checkpoint_plan")
    store = open_store(plan["checkpoint_uri"], trusted_output_roots=[str(output)])
    epoch = store.epochs.current()
    assert epoch is not None and epoch.number == 1 and epoch.status is EpochStatus.OPEN
    assert epoch.owner == f"{DAG_ID}/handoff/{killed_run}" and store.inspection.progress().keys_done == 30

    # 2. The next run of the day takes the killed run's epoch over and skips what it sealed.
    done = airflow_harness.airflow("dags", "test", DAG_ID, day.date().isoformat(), env=env, timeout=900)
    log = done.stdout + done.stderr
    run_id, state = airflow_harness.run_of(DAG_ID, day)
    assert run_id != killed_run and state == "success", log[-4000:]
    plan = airflow_harness.xcom(DAG_ID, run_id, "handoff", "checkpoint_plan")
    assert (plan["rerun"]["action"], plan["epoch"], plan["keys_skipped"]) == ("resume", 2, 30), plan
    assert plan["took_over"]["epoch"] == 1 and plan["took_over"]["owner"] == epoch.owner
    assert "no longer in the metadata DB" in plan["took_over"]["reason"]
    result = airflow_harness.xcom(DAG_ID, run_id, "handoff", "checkpoint_result")
    assert result["keys"] == 10 and result["session"] == "classic", result
    commit = airflow_harness.xcom(DAG_ID, run_id, "commit")
    assert commit["rows_committed"] == 40, commit
    assert _keys_a_reader_sees(output) == KEYS  # each key once after the commit
    assert store.inspection.check().ok, store.inspection.check().problems
