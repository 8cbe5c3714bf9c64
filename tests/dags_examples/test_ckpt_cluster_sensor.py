"""Cluster deploy mode on a real Spark standalone cluster (master with its REST server, two workers).

* Example DAG 3 itself (the submit returns once the driver is accepted, the deferrable
  sensor waits in the triggerer until every expected partition sealed, the commit closes the
  epoch) runs in the distributed deployment, with a real triggerer and its store on S3:
  tests/dags_examples/test_deployment.py.
* Durable re-attach: an attempt dies (failpoint) after its driver was accepted; Airflow's
  retry re-attaches to that driver through SparkSubmitOperator's durable mode and must
  keep the driver's epoch: one epoch, one driver, the output committed once.
* A dead driver: the detached driver is killed (SIGKILL) while the sensor waits in the
  trigger; the sensor fails within its poll interval plus a margin, naming the driver's
  state and the store's progress, instead of waiting for its 2-hour timeout.
"""

from __future__ import annotations

import datetime as dt
import glob
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_ckpt_provider.store import open_store
from ckpt_testkit.spark_cluster import SPARK_HOME, SparkStandaloneCluster, free_port
from tests.support.airflow_harness import AirflowHarness

# The first test also starts the cluster (master, REST server, two workers): 900 s ran out at load 20.
pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.cluster, pytest.mark.timeout(1800)]

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"
DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"


@pytest.fixture(scope="module")
def rest_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SparkStandaloneCluster, int]]:
    """A standalone cluster whose master serves the REST API (driver status for re-attach)."""
    rest_port = free_port()
    options = (
        f"-Dspark.master.rest.enabled=true -Dspark.master.rest.host=127.0.0.1 -Dspark.master.rest.port={rest_port}"
    )
    previous = os.environ.get("SPARK_MASTER_OPTS")
    os.environ["SPARK_MASTER_OPTS"] = options  # read by the master's JVM at start only
    try:
        cluster = SparkStandaloneCluster(tmp_path_factory.mktemp("spark_cluster")).start()
    finally:
        if previous is None:
            os.environ.pop("SPARK_MASTER_OPTS", None)
        else:
            os.environ["SPARK_MASTER_OPTS"] = previous
    yield cluster, rest_port
    cluster.stop()


def _cluster_env(cluster: SparkStandaloneCluster, rest_port: int, lake: Path) -> dict[str, str]:
    """The cluster's connection, and a store base the deployment names: the driver and executors run on the
    cluster's workers, which here share this machine's disk, so a ``file://`` base is the administrator's word
    that they see it (the embedded default is refused under cluster deploy mode: hooks/store_visibility.py)."""
    connection = {
        "conn_type": "spark",
        "host": "spark://127.0.0.1",
        "port": cluster.master_port,
        "extra": {"deploy-mode": "cluster", "rest-port": rest_port},
    }
    return {
        "AIRFLOW_CONN_SPARK_CLUSTER": json.dumps(connection),
        "CKPT_EXAMPLE_LAKE": str(lake),
        "AIRFLOW__CKPT__BASE_URI": (lake.parent / "checkpoints").as_uri(),
        "SPARK_HOME": SPARK_HOME,
        "SPARK_CORE_JAR": glob.glob(os.path.join(SPARK_HOME, "jars", "spark-core_*.jar"))[0],
    }


def _event_ids(directory: Path) -> list[int]:
    return sorted(
        i
        for path in directory.rglob("*.parquet")
        for i in pq.read_table(path, columns=["event_id"]).column(0).to_pylist()
    )


def _drivers(cluster: SparkStandaloneCluster) -> list[dict[str, Any]]:
    state: dict[str, Any] = cluster._master_state() or {}
    return list(state.get("activedrivers") or []) + list(state.get("completeddrivers") or [])


def test_retry_reattaches_to_the_running_driver_and_keeps_its_epoch(
    airflow_harness: AirflowHarness, rest_cluster: tuple[SparkStandaloneCluster, int], tmp_path: Path
) -> None:
    cluster, rest_port = rest_cluster
    airflow_harness.install_dag(DAGS / "reattach_dag.py", EXAMPLES / "jobs")
    drivers_before = {d["id"] for d in _drivers(cluster)}
    output = tmp_path / "out"
    env = {
        **_cluster_env(cluster, rest_port, tmp_path / "lake"),
        "REATTACH_OUTPUT": str(output),
        # Attempt 1 raises right after its driver was accepted, before polling it.
        "CKPT_FAILPOINTS": "operator.spark.before_poll=raise@1",
    }
    run = airflow_harness.run_dag(
        "ckpt_reattach", logical_date=dt.datetime(2024, 9, 2, tzinfo=dt.UTC), env=env, timeout=900
    )
    assert run.state == "success", run.output[-5000:]
    assert airflow_harness.task_instances("ckpt_reattach", run.run_id)["submit"] == ("success", 2)
    assert "left open: driver" in run.output and "Reconnecting to existing job" in run.output

    result = airflow_harness.xcom("ckpt_reattach", run.run_id, "submit")
    assert result["reattached"] is True and result["epoch"] == 1
    store = open_store(result["checkpoint_uri"])
    assert [e.number for e in store.epochs.all()] == [1]  # no second epoch: the live job was not fenced
    new_drivers = [d for d in _drivers(cluster) if d["id"] not in drivers_before]
    assert len(new_drivers) == 1  # the retry did not submit again
    commit = airflow_harness.xcom("ckpt_reattach", run.run_id, "commit")
    assert commit["rows_committed"] == 20_000
    assert len(_event_ids(output)) == 20_000


def test_a_dead_driver_fails_the_sensor_within_its_poll_interval(
    airflow_harness: AirflowHarness, rest_cluster: tuple[SparkStandaloneCluster, int], tmp_path: Path
) -> None:
    cluster, rest_port = rest_cluster
    airflow_harness.install_dag(EXAMPLES / "ckpt_cluster_sensor.py", EXAMPLES / "jobs")
    killed_at: list[float] = []

    def kill_the_driver(proc: subprocess.Popen[str], output: Path) -> None:
        """Once the sensor waits in the trigger and the driver runs, kill the driver's JVM."""
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            drivers = cluster.driver_pids()
            if drivers and "running trigger in line" in output.read_text(errors="replace"):
                for pid in drivers:
                    os.kill(pid, signal.SIGKILL)
                killed_at.append(time.monotonic())
                return
            time.sleep(0.5)

    run = airflow_harness.run_dag(
        "ckpt_cluster_sensor",
        logical_date=dt.datetime(2024, 9, 3, tzinfo=dt.UTC),
        # Enough events that the driver is still at work when it is killed.
        conf={"events": 2_000_000, "partitions": 4},
        env=_cluster_env(cluster, rest_port, tmp_path / "lake"),
        while_running=kill_the_driver,
        timeout=900,
    )
    ended_at = time.monotonic()
    assert killed_at, run.output[-5000:]
    assert run.state == "failed", run.output[-5000:]
    tasks = airflow_harness.task_instances("ckpt_cluster_sensor", run.run_id)
    assert tasks["submit_to_cluster"][0] == "success" and tasks["wait_for_partitions"][0] == "failed"
    # Poll interval 5 s; the sensor's one retry (5 s later) fails at its first poke; the margin
    # covers the master noticing the dead JVM and a loaded 2-core machine.
    assert ended_at - killed_at[0] < 5 + 5 + 90, f"{ended_at - killed_at[0]:.0f} s after the kill"
    assert "the Spark driver driver-" in run.output and "ended with state FAILED" in run.output
    assert "partitions sealed" in run.output.split("ended with state FAILED", 1)[1][:400]
