"""CheckpointSensor in deferrable mode through the triggerer path that ``dag.test()`` runs.

The store is written by a real writer in this process (the store API, as a Spark task
would use it) while the DAG run waits: the sensor's first poke finds the job unfinished,
defers, and CheckpointTrigger polls until every expected partition has sealed.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import time
from pathlib import Path

import pytest

from airflow_ckpt_provider.store import new_checkpoint_id, open_store
from tests.support.airflow_harness import AirflowHarness

pytestmark = pytest.mark.airflow

DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"


def test_deferrable_sensor_waits_in_the_trigger(airflow_harness: AirflowHarness, tmp_path: Path) -> None:
    airflow_harness.install_dag(DAGS / "sensor_dag.py")
    uri = f"file://{tmp_path / 'store'}"
    store = open_store(uri)
    epoch = store.epochs.begin(owner="a job in cluster mode").number
    store.epochs.set_expected_partitions(epoch, 3)
    sealed_at: list[float] = []

    def write_partitions(proc: subprocess.Popen[str], output: Path) -> None:
        # Seal only once the sensor has poked, found nothing, and deferred to the trigger. At load 20 the
        # DAG run took 4 min to reach the trigger: the deadline counts from the run's start.
        deadline = time.monotonic() + 600
        while "running trigger in line" not in output.read_text() and proc.poll() is None:
            if time.monotonic() > deadline:
                return
            time.sleep(0.5)
        for partition in range(3):
            if proc.poll() is not None or time.monotonic() > deadline:
                return
            cid = new_checkpoint_id()
            store.stage_keys(cid, [partition * 10 + i for i in range(10)])
            store.checkpoint(cid, epoch=epoch, partition=partition)
            sealed_at.append(time.monotonic())
            time.sleep(2)

    run = airflow_harness.run_dag(
        "ckpt_sensor",
        logical_date=dt.datetime(2024, 4, 1, tzinfo=dt.UTC),
        env={"SENSOR_STORE": uri},
        while_running=write_partitions,
        timeout=900,
    )
    assert run.state == "success", run.output[-4000:]
    assert len(sealed_at) == 3
    assert "0/3 partitions sealed" in run.output  # the first poke: not done, so it deferred
    assert "running trigger in line" in run.output
    assert "3/3 partitions sealed" in run.output
    summary = airflow_harness.xcom("ckpt_sensor", run.run_id, "wait_partitions")
    assert summary["sealed_partitions"] == 3 and summary["keys_done"] == 30
    assert summary["epoch"] == epoch and summary["committed"] is False
