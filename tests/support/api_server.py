"""A real ``airflow api-server`` for the UI suite: its own AIRFLOW_HOME, SQLite DB, users.

The server runs in a subprocess, like a deployment: the plugin is loaded through the
installed package's ``airflow.plugins`` entry point, users log in through the simple
auth manager, and the audit log is read back from the metadata DB file.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.airflow_harness import AirflowHarness

DAG_ID = "ckpt_ui_demo"
SPARK_TASK = "spark_job"
OTHER_TASK = "report"
PASSWORDS = {"admin": "admin-pw-1", "viewer": "viewer-pw-1", "editor": "editor-pw-1"}
#: An ``aws`` connection whose endpoint nobody listens on (a store that cannot be reached).
UNREACHABLE_CONN_ID = "ckpt_unreachable"
UNREACHABLE_SECRET = "unreachable-secret-key-0123456789"
ROLES = {"admin": "admin", "viewer": "viewer", "editor": "user"}

DAG_SOURCE = f'''
"""A DAG whose task instances the Checkpoints views show (the stores are filled by the tests)."""
import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

with DAG("{DAG_ID}", schedule=None, start_date=pendulum.datetime(2024, 1, 1), catchup=False):
    EmptyOperator(task_id="{SPARK_TASK}") >> EmptyOperator(task_id="{OTHER_TASK}")
'''


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ApiServer:
    harness: AirflowHarness
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    startup_seconds: float = 0.0
    _tokens: dict[str, str] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def home(self) -> Path:
        return self.harness.home

    @classmethod
    def start(cls, harness: AirflowHarness, *, timeout: float = 180) -> ApiServer:
        port = free_port()
        log_path = harness.home / "api-server.log"
        started = time.monotonic()
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "airflow", "api-server", "-H", "127.0.0.1", "-p", str(port), "-w", "1"],
                env=harness.env,
                cwd=harness.home,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        server = cls(harness=harness, port=port, process=process, log_path=log_path)
        deadline = started + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"airflow api-server exited with {process.returncode}:\n{server.log_tail()}")
            try:
                if httpx.get(f"{server.base_url}/api/v2/monitor/health", timeout=2).status_code == 200:
                    server.startup_seconds = time.monotonic() - started
                    return server
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        server.stop()
        raise RuntimeError(f"airflow api-server not ready after {timeout:.0f} s:\n{server.log_tail()}")

    def log_tail(self, chars: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    # ------------------------------------------------------------------ HTTP

    def token(self, user: str) -> str:
        """A JWT from ``POST /auth/token`` (the simple auth manager's login)."""
        if user not in self._tokens:
            response = httpx.post(
                f"{self.base_url}/auth/token",
                json={"username": user, "password": PASSWORDS[user]},
                timeout=30,
            )
            assert response.status_code == 201, response.text
            self._tokens[user] = response.json()["access_token"]
        return self._tokens[user]

    def client(self, user: str | None = None) -> httpx.Client:
        headers = {} if user is None else {"Authorization": f"Bearer {self.token(user)}"}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=60)

    def trigger_run(self, run_id: str) -> None:
        """A DAG run through the public API; its task instances exist at once (state none)."""
        with self.client("admin") as client:
            response = client.post(f"/api/v2/dags/{DAG_ID}/dagRuns", json={"dag_run_id": run_id, "logical_date": None})
            assert response.status_code == 200, response.text

    def push_xcom(self, run_id: str, task_id: str, key: str, value: Any) -> None:
        with self.client("admin") as client:
            response = client.post(
                f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries",
                json={"key": key, "value": value},
            )
            assert response.status_code == 201, response.text

    # ------------------------------------------------------------------ metadata DB

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(self.harness.db_path)) as db:
            return list(db.execute(sql, params))

    def audit_entries(self, run_id: str) -> list[dict[str, Any]]:
        rows = self.query(
            "SELECT event, owner, dag_id, task_id, run_id, extra FROM log "
            "WHERE event LIKE 'checkpoints.%' AND run_id = ? ORDER BY id",
            run_id,
        )
        return [
            {"event": e, "owner": o, "dag_id": d, "task_id": t, "run_id": r, "extra": json.loads(x)}
            for e, o, d, t, r, x in rows
        ]

    def set_task_state(self, run_id: str, task_id: str, state: str) -> None:
        with closing(sqlite3.connect(self.harness.db_path)) as db:
            db.execute(
                "UPDATE task_instance SET state = ? WHERE dag_id = ? AND run_id = ? AND task_id = ?",
                (state, DAG_ID, run_id, task_id),
            )
            db.commit()

    def default_store_path(self, run_id: str, task_id: str = SPARK_TASK) -> Path:
        """Where the operator's default store of this task instance lives (run ids here need no escaping)."""
        return self.home / "checkpoints" / DAG_ID / task_id / run_id


def start_ui_airflow(home: Path) -> ApiServer:
    """Migrate a fresh Airflow, install the demo DAG, serialize it, start the API server."""
    harness = AirflowHarness.create(home)
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    harness.env.update(
        {
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in ROLES.items()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__API__EXPOSE_CONFIG": "False",
            f"AIRFLOW_CONN_{UNREACHABLE_CONN_ID.upper()}": json.dumps(
                {
                    "conn_type": "aws",
                    "login": "unreachable-access-key",
                    "password": UNREACHABLE_SECRET,
                    "extra": {"endpoint_url": f"http://127.0.0.1:{free_port()}", "region_name": "us-east-1"},
                }
            ),
        }
    )
    (harness.dags_folder / f"{DAG_ID}.py").write_text(DAG_SOURCE)
    proc = harness.airflow("dags", "reserialize")
    if proc.returncode != 0:
        raise RuntimeError(f"airflow dags reserialize failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return ApiServer.start(harness)
