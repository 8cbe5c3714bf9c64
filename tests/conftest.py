"""Fixtures shared by every test folder: the real S3 server (SeaweedFS), the fault proxy, and one
isolated, migrated Airflow (metadata DB) for the tests of the Airflow side."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ckpt_testkit.faultproxy import FaultProxy
from ckpt_testkit.seaweed import SeaweedServer
from ckpt_testkit.spark_cluster import SparkStandaloneCluster
from tests.support.airflow_harness import AirflowHarness


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """One SeaweedFS server for the session, started on first use. Never stop it in a test:
    use ``s3_server_factory`` for outages."""
    server = SeaweedServer(tmp_path_factory.mktemp("seaweed"))
    server.start()
    yield server
    server.close()


@pytest.fixture
def s3_bucket(s3_server: SeaweedServer) -> str:
    """A fresh, empty bucket on the session server."""
    return s3_server.create_bucket(f"t-{uuid.uuid4().hex[:20]}")


@pytest.fixture
def s3_options(s3_server: SeaweedServer) -> dict[str, Any]:
    """``open_store`` options reaching the session server: endpoint, admin keys, region."""
    return s3_server.options()


@pytest.fixture
def s3_server_factory(tmp_path: Path) -> Iterator[Callable[[], SeaweedServer]]:
    """Start private servers (``factory()``) a test may stop and restart; all closed at the end."""
    servers: list[SeaweedServer] = []

    def factory() -> SeaweedServer:
        server = SeaweedServer(tmp_path / f"seaweed-{len(servers)}")
        servers.append(server)
        return server.start()

    yield factory
    for server in servers:
        server.close()


@pytest.fixture
def fault_proxy(s3_server: SeaweedServer) -> Iterator[FaultProxy]:
    """A pass-through proxy in front of the session server; faults are switched by the test.
    Point clients at ``fault_proxy.endpoint_url``."""
    with FaultProxy(s3_server.s3_port) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandaloneCluster]:
    """A master on 127.0.0.1 and single-core workers on 127.0.0.2 and 127.0.0.3, for the whole session
    (tests/spark's cluster scenarios and tests/faults' cluster trials share it)."""
    cluster = SparkStandaloneCluster(tmp_path_factory.mktemp("spark-cluster"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def airflow_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowHarness]:
    """A fresh AIRFLOW_HOME with a migrated SQLite DB (``airflow db migrate`` runs once: ~8 s)."""
    harness = AirflowHarness.create(tmp_path_factory.mktemp("airflow_home"))
    print(f"\nairflow db migrate: {harness.migrate_seconds:.1f} s")
    yield harness


@pytest.fixture(scope="session")
def connect_server(request: pytest.FixtureRequest) -> str:
    """A real Spark Connect server (``sc://127.0.0.1:port``) for the session, served from the driver of the
    shared classic session (``spark``): about 0.2 s.

    Clients in the test process: ``connect_spark``. Airflow tasks (``run_dag`` subprocesses) connect with
    ``AIRFLOW_CONN_<ID>='{"conn_type": "spark_connect", "host": "127.0.0.1", "port": <port>}'``.
    """
    from ckpt_testkit.connect_server import start_in_session

    return start_in_session(request.getfixturevalue("spark"))


@pytest.fixture(scope="session")
def spark_event_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the in-process session writes Spark's event log (the progress oracle reads it)."""
    return tmp_path_factory.mktemp("spark-events")


@pytest.fixture(scope="session")
def spark(spark_event_log: Path) -> Iterator[Any]:
    """The one classic local Spark (2 cores, small memory) of a test process: tests/spark's in-process tests
    and ``connect_server`` share it, so whichever asks first builds it with every conf (a second builder
    would get the first's context back, without its confs).

    Local mode runs each task once (``local[2]`` = ``spark.task.maxFailures`` 1).
    """
    import os
    import sys

    from pyspark.sql import SparkSession

    from airflow_ckpt_provider.contract import CONF_PYTHON_DAEMON, WORKER_DAEMON_MODULE
    from ckpt_testkit.spark_cluster import SPARK_HOME
    from ckpt_testkit.spark_events import event_log_confs

    os.environ.setdefault("SPARK_HOME", SPARK_HOME)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder
    for name, value in event_log_confs(spark_event_log).items():
        builder = builder.config(name, value)
    session = (
        builder.master("local[2]")
        .appName("ckpt-spark-tests")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        # One input file per scan task (the tests' files are tiny), so faults can target a file's task.
        .config("spark.sql.files.openCostInBytes", str(128 * 1024 * 1024))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        # Python tasks through the package's worker daemon, as the submit operator runs them.
        .config(CONF_PYTHON_DAEMON, WORKER_DAEMON_MODULE)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def connect_spark(connect_server: str) -> Iterator[Any]:
    """A fresh Spark Connect session on ``connect_server`` (Connect mode in this process while the test runs;
    do not use the classic ``spark`` fixture's frames in the same test)."""
    from ckpt_testkit.connect_server import connect_client

    with connect_client(connect_server) as session:
        yield session
