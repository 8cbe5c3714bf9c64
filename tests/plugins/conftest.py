"""One real Airflow API server (with the Checkpoints plugin) for the whole UI suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ckpt_testkit.seaweed import SeaweedServer
from tests.support.api_server import ApiServer, start_ui_airflow


@pytest.fixture(scope="session")
def ui_server(tmp_path_factory: pytest.TempPathFactory, s3_server: SeaweedServer) -> Iterator[ApiServer]:
    server = start_ui_airflow(tmp_path_factory.mktemp("ui_airflow_home"), s3=s3_server)
    print(f"\nairflow api-server ready in {server.startup_seconds:.1f} s on {server.base_url}")
    try:
        yield server
    finally:
        server.stop()
