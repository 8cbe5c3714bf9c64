"""A killed TaskFlow try (``@task.checkpointed_pyspark``), taken over by the next run of its day, as for
the submit operator (tests/operators/test_rerun.py): real ``airflow dags test`` runs through the CLI, real
metadata DB, a classic local session in the task's process (killed with it).

1. ``airflow dags test`` of the day is held in the user's code in partition 3 (partitions 0-2 sealed) and
   SIGKILLed with its process group: its epoch stays open, its task instance "running" in the DB;
2. ``airflow dags test`` again: it replaced the killed run in the metadata DB, so the new run takes the
   open epoch over, skips the 30 sealed keys, and its commit leaves every key once for a plain reader;
   the DAG's two ``CheckpointSensor`` s (``spark_task_id`` naming the TaskFlow task) found its store: every
   partition sealed before the commit, committed after it;
3. ``airflow dags test`` of the committed day once more: the plan is ``replace`` (every key again), and its
   commit retracts the earlier run's files: a plain reader still sees every key once.

The same DAG over Spark Connect (the suite's server): a channel cut mid-write fails the try with a typed
error, and "Clear -> Only failed" resumes it (the second test).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from airflow_ckpt_provider.store import EpochStatus, open_store
from ckpt_testkit.faultproxy import FaultProxy
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
    # The sensors resolved the TaskFlow task's store as they resolve a submit task's (hooks/locator.py).
    sealed = airflow_harness.xcom(DAG_ID, run_id, "sealed")
    landed = airflow_harness.xcom(DAG_ID, run_id, "landed")
    assert sealed["checkpoint_uri"] == landed["checkpoint_uri"] == plan["checkpoint_uri"], (sealed, landed)
    assert (sealed["epoch"], sealed["keys_done"], sealed["committed"]) == (2, 40, False), sealed
    assert sealed["sealed_partitions"] == sealed["expected_partitions"] > 0, sealed
    assert (landed["epoch"], landed["epoch_status"], landed["committed"]) == (2, "committed", True), landed
    assert store.inspection.check().ok, store.inspection.check().problems

    # 3. The day run once more: its committed output (delete_after_success, the default) is replaced,
    #    never added to. The plan comes from the store's history: the job recorded by store.epochs.begin.
    first_files = set(_output_files(output))
    done = airflow_harness.airflow("dags", "test", DAG_ID, day.date().isoformat(), env=env, timeout=900)
    run_id, state = airflow_harness.run_of(DAG_ID, day)
    assert state == "success", (done.stdout + done.stderr)[-4000:]
    plan = airflow_harness.xcom(DAG_ID, run_id, "handoff", "checkpoint_plan")
    assert (plan["rerun"]["action"], plan["rerun"]["job"], plan["epoch"], plan["keys_skipped"]) == (
        "replace",
        f"{DAG_ID}/handoff/date=2024-07-01",
        3,
        0,
    ), plan
    assert airflow_harness.xcom(DAG_ID, run_id, "handoff", "checkpoint_result")["keys"] == 40
    commit = airflow_harness.xcom(DAG_ID, run_id, "commit")
    assert (commit["rows_committed"], commit["files_replaced"]) == (40, len(first_files)), commit
    assert _keys_a_reader_sees(output) == KEYS  # each key once: the second run's files are gone
    assert not first_files & set(_output_files(output)) and store.inspection.check().ok


def _output_files(output: Path) -> list[str]:
    return sorted(str(p) for p in output.rglob("*.parquet"))


@pytest.mark.timeout(900)
def test_a_connect_server_lost_mid_task_fails_the_try_clearly_and_clear_resumes_it(
    airflow_harness: AirflowHarness, connect_server: str, tmp_path: Path
) -> None:
    """The same DAG over Spark Connect, the task's channel to the server cut mid-write (the connection
    names a TCP proxy, stopped once partitions 0-2 sealed while the user's code holds partition 3):

    1. the try fails with the package's typed error (``connect_unavailable``, "Run the job again when the
       server answers"), its epoch ends failed with the 30 sealed keys kept; the held partition, a zombie
       on the server, is released and fails there;
    2. "Clear -> Only failed" with the connection naming the server again: the next try resumes (skips the
       30 keys, processes 10), the commit leaves every key once for a plain reader, the store checks clean.
    """
    airflow_harness.install_dag(DAGS / "taskflow_handoff_dag.py")
    output = tmp_path / "out"
    day = dt.datetime(2024, 7, 2, tzinfo=dt.UTC)
    server_port = int(connect_server.rsplit(":", 1)[1])
    proxy = FaultProxy(server_port).start()

    def env(port: int) -> dict[str, str]:
        connection = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": port}
        return {
            "HANDOFF_OUTPUT": str(output),
            "HANDOFF_SPARK_CONN": "spark_handoff",
            "AIRFLOW_CONN_SPARK_HANDOFF": json.dumps(connection),
        }

    marker = tmp_path / "held"
    seen: dict[str, int] = {}

    def cut_once_partitions_0_to_2_sealed(process: Any, _output: Path) -> None:
        deadline = time.monotonic() + 300
        try:
            while time.monotonic() < deadline and process.poll() is None:
                if marker.exists():  # partition 3 is held: its epoch is open, 0-2 sealing or sealed
                    run_id, _ = airflow_harness.run_of(DAG_ID, day)
                    uri = airflow_harness.default_store_uri(DAG_ID, "handoff", run_id)
                    seen["keys_done"] = open_store(uri).inspection.progress().keys_done
                    if seen["keys_done"] == 30:
                        return
                time.sleep(0.5)
        finally:
            proxy.stop()  # the server "goes away" for this client

    conf = {"hold_partition": 3, "hold_marker": str(marker), "connect_retries": 2}
    try:
        first = airflow_harness.run_dag(
            DAG_ID, logical_date=day, conf=conf, env=env(proxy.port), while_running=cut_once_partitions_0_to_2_sealed
        )
    finally:
        proxy.stop()
        Path(f"{marker}.released").touch()  # the zombie partition on the server fails and ends; no try holds again
    assert seen.get("keys_done") == 30, first.output[-4000:]
    assert first.state == "failed", first.output[-4000:]
    assert "Spark Connect server went away" in first.output and "Run the job again" in first.output
    plan = airflow_harness.xcom(DAG_ID, first.run_id, "handoff", "checkpoint_plan")
    store = open_store(plan["checkpoint_uri"], trusted_output_roots=[str(output)])
    epoch = store.epochs.current()
    assert epoch is not None and epoch.number == 1 and epoch.status is EpochStatus.FAILED, epoch
    assert store.inspection.progress().keys_done == 30

    second = airflow_harness.run_dag(
        DAG_ID,
        logical_date=day,
        env=env(server_port),
        only_failed=True,  # the run keeps its params
    )
    assert second.state == "success" and second.run_id == first.run_id, second.output[-4000:]
    plan = airflow_harness.xcom(DAG_ID, second.run_id, "handoff", "checkpoint_plan")
    assert (plan["rerun"]["action"], plan["epoch"], plan["keys_skipped"]) == ("resume", 2, 30), plan
    result = airflow_harness.xcom(DAG_ID, second.run_id, "handoff", "checkpoint_result")
    assert result["keys"] == 10 and result["session"] == "connect", result
    assert airflow_harness.xcom(DAG_ID, second.run_id, "commit")["rows_committed"] == 40
    assert _keys_a_reader_sees(output) == KEYS  # each key once after the commit
    assert store.inspection.check().ok, store.inspection.check().problems
