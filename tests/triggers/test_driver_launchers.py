"""The driver watch on YARN, through the Spark provider's own ResourceManager call.

No YARN cluster can run here, so a small HTTP server on loopback answers
``GET /ws/v1/cluster/apps/{id}`` the way the ResourceManager's REST API does (its documented
``app.state`` / ``app.finalStatus``). What runs for real: the submit's recorded
:class:`DriverRef`, the provider's ``SparkSubmitOperator`` built from the connection and
deploy mode, its YARN backend and its HTTP call. (The standalone branch runs against a real
cluster in tests/dags_examples/test_ckpt_cluster_sensor.py; Kubernetes has no test here.)
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from airflow_ckpt_provider.triggers.driver import DriverRef, driver_state

pytestmark = pytest.mark.airflow

APP_ID = "application_1700000000000_0042"


@pytest.fixture
def resource_manager() -> Iterator[dict[str, tuple[str, str]]]:
    """Application id -> (state, finalStatus), served as the RM's REST API serves them."""
    apps: dict[str, tuple[str, str]] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            app_id = self.path.rsplit("/", 1)[-1]
            if not self.path.startswith("/ws/v1/cluster/apps/") or app_id not in apps:
                self.send_error(404)
                return
            state, final = apps[app_id]
            body = json.dumps({"app": {"id": app_id, "state": state, "finalStatus": final}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    apps["__address__"] = (f"http://127.0.0.1:{server.server_address[1]}", "")
    try:
        yield apps
    finally:
        server.shutdown()
        server.server_close()


def test_a_yarn_driver_is_asked_through_the_resource_manager(
    resource_manager: dict[str, tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    address = resource_manager["__address__"][0]
    # The deploy mode is the operator's (deploy_mode="cluster" in the DAG), not the connection's:
    # the watch must ask as that submit did, so it comes from what the submit recorded.
    connection = {"conn_type": "spark", "host": "yarn", "extra": {"yarn_resourcemanager_webapp_address": address}}
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_YARN", json.dumps(connection))
    # What a detached YARN submit records (XCom "driver"), read back as the sensor reads it.
    ref = DriverRef.from_json(
        {"conn_id": "ckpt_yarn", "external_id": APP_ID, "deploy_mode": "cluster", "yarn_track_via_rm_api": True}
    )
    assert ref is not None

    resource_manager[APP_ID] = ("RUNNING", "UNDEFINED")
    running = driver_state(ref)
    assert (running.status, running.active, running.gone) == ("RUNNING", True, False)

    resource_manager[APP_ID] = ("KILLED", "KILLED")  # e.g. yarn application -kill, or the AM lost
    killed = driver_state(ref)
    assert (killed.active, killed.succeeded, killed.gone) == (False, False, True)

    resource_manager[APP_ID] = ("FINISHED", "SUCCEEDED")
    finished = driver_state(ref)
    assert (finished.succeeded, finished.gone) == (True, False)
