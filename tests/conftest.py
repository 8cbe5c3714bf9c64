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


#: The test files that take longest (seconds of one xdist worker, measured on 2 cores), longest first.
#: scripts/test.sh runs files whole on two workers (``--dist loadfile --no-loadscope-reorder``) in
#: collection order; starting with these leaves short files to fill in at the end, so the two
#: workers finish together instead of one running a long cluster file alone while the other idles.
#: A file missing here only starts later; refresh the list from ``--durations=0`` when it drifts.
LONGEST_FILES = (
    "tests/dags_examples/test_deployment.py",
    "tests/operators/test_mapped_tenants.py",
    "tests/dags_examples/test_ckpt_rewind_incremental.py",
    "tests/faults/test_mapped_trials.py",
    "tests/operators/test_mapped_concurrency.py",
    "tests/spark/test_resume_scenarios_submit.py",
    "tests/faults/test_failpoint_trials.py",
    "tests/spark/test_resume_scenarios_cluster.py",
    "tests/dags_examples/test_ckpt_cluster_sensor.py",
    "tests/faults/test_cluster_trials.py",
    "tests/dags_examples/test_ckpt_daily_events.py",
    "tests/operators/test_rerun.py",
    "tests/operators/test_taskflow_rerun.py",
    "tests/dags_examples/test_ckpt_connect_orders.py",
    "tests/dags_examples/test_ckpt_tenant_orders.py",
    "tests/operators/test_taskflow_redo.py",
    "tests/store/test_segments.py",
    "tests/cli/test_cli_airflow.py",
    "tests/faults/test_user_code_failpoints.py",
    "tests/store/test_reprocess_safety.py",
    "tests/test_provider_info.py",
    "tests/faults/test_races.py",
    "tests/store/test_loose_tail.py",
    "tests/spark/test_job.py",
    "tests/operators/test_openlineage.py",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the longest files first (see :data:`LONGEST_FILES`); every other file keeps its place after them."""
    rank = {name: index for index, name in enumerate(LONGEST_FILES)}
    root = config.rootpath

    def order(item: pytest.Item) -> int:
        return rank.get(item.path.relative_to(root).as_posix(), len(rank))

    items.sort(key=order)  # stable: the tests of a file, and the other files, keep their order
