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
