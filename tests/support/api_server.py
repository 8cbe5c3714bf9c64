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
import uuid
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ckpt_testkit.seaweed import SeaweedServer
from tests.support.airflow_harness import AirflowHarness
from tests.support.hanging_endpoint import HangingEndpoint
from tests.support.per_dag_auth_manager import RIGHTS_ENV

DAG_ID = "ckpt_ui_demo"
SPARK_TASK = "spark_job"
OTHER_TASK = "report"
#: A DAG with a mapped submit (two instances, one store each) and a commit mapped over it.
#: A TaskFlow task (``@task.checkpointed_pyspark``) and its commit: the views treat it as a submit task.
TASKFLOW_DAG = "ckpt_ui_taskflow"
TASKFLOW_TASK = "orders"
TASKFLOW_COMMIT = "commit_orders"
MAPPED_DAG = "ckpt_ui_mapped"
MAPPED_TASK = "tenants"
MAPPED_COMMIT = "commit_tenants"
PASSWORDS = {
    "admin": "admin-pw-1",
    "viewer": "viewer-pw-1",
    "editor": "editor-pw-1",
    "alice": "alice-pw-1",
}
#: An ``aws`` connection whose endpoint nobody listens on (a store that cannot be reached).
UNREACHABLE_CONN_ID = "ckpt_unreachable"
UNREACHABLE_SECRET = "unreachable-secret-key-0123456789"
ROLES = {"admin": "admin", "viewer": "viewer", "editor": "user", "alice": "user"}

# The attack suite's DAGs (tests/plugins/test_attacks.py). Two teams: alice may edit team A's
# DAG and nothing else (per-DAG rights through tests/support/per_dag_auth_manager.py).
TEAM_A = "ckpt_team_a"
TEAM_B = "ckpt_team_b"
DAG_RIGHTS = {"alice": {TEAM_A: "edit"}}
#: Team A's task whose DAG file names team B's store (a DAG author's mistake, or an attack).
POINTS_AT_B_TASK = "points_at_b"
#: Stores on an S3 endpoint that accepts connections and never answers.
HANGING_DAG = "ckpt_hanging_store"
HANGING_CONN_ID = "ckpt_hanging"
HANGING_SECRET = "hanging-secret-key-0123456789"
#: A connection whose endpoint URL carries a password (it must never reach a log).
LEAKY_CONN_ID = "ckpt_leaky_endpoint"
LEAKY_ENDPOINT_PASSWORD = "endpoint-url-pw-5678"
#: Team A's task whose store is on the suite's SeaweedFS (the S3 attacks of docs/security.md).
S3_TASK = "s3_evil"
S3_CONN_ID = "ckpt_seaweed"
#: Tasks whose store paths need escaping in a URI.
ODD_DAG = "ckpt_odd_paths"
ODD_TASK = "odd_store"
SIBLING_TASK = "sibling_store"
ODD_SEGMENT = "store#2 ?x=%2F y \u00fc\u6f22"
#: The server's own (default chain) AWS identity: it must never be used for a store.
SERVER_DEFAULT_ACCESS_KEY = "SERVER-DEFAULT-IDENTITY-KEY"

DAG_SOURCE = f'''
"""A DAG whose task instances the Checkpoints views show (the tasks never run; the tests fill the stores)."""
import os

import pendulum
from airflow.sdk import DAG, task

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator

# Where the tests write the task's output: the only places its actions may delete (docs/security.md).
HOME = os.environ["AIRFLOW_HOME"]

with DAG("{DAG_ID}", schedule=None, start_date=pendulum.datetime(2024, 1, 1), catchup=False):
    spark = CheckpointedSparkSubmitOperator(
        task_id="{SPARK_TASK}", application="job.py", output_roots=[f"{{HOME}}/out"]
    )
    spark >> CheckpointCommitOperator(task_id="{OTHER_TASK}", spark_task_id="{SPARK_TASK}")

with DAG("{MAPPED_DAG}", schedule=None, start_date=pendulum.datetime(2024, 1, 1), catchup=False):
    tenants = CheckpointedSparkSubmitOperator.partial(task_id="{MAPPED_TASK}", application="job.py").expand(
        application_args=[["--tenant", "a"], ["--tenant", "b"]]
    )
    tenants >> CheckpointCommitOperator.partial(task_id="{MAPPED_COMMIT}", spark_task_id="{MAPPED_TASK}").expand(
        output_roots=[["/tmp/a"], ["/tmp/b"]]
    )

with DAG("{TASKFLOW_DAG}", schedule=None, start_date=pendulum.datetime(2024, 1, 1), catchup=False):

    @task.checkpointed_pyspark(output_roots=[f"{{HOME}}/out"])
    def {TASKFLOW_TASK}(spark=None, ckpt_job=None):
        raise AssertionError("never runs: the tests fill its store")

    {TASKFLOW_TASK}() >> CheckpointCommitOperator(task_id="{TASKFLOW_COMMIT}", spark_task_id="{TASKFLOW_TASK}")
'''


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


ATTACK_DAGS_SOURCE = """
\"\"\"DAGs of the attack suite: their tasks never run; the stores are filled by the tests.\"\"\"
import pendulum
from airflow.sdk import DAG

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator

START = pendulum.datetime(2024, 1, 1)
TEAM_B_STORE = {team_b_store!r}

with DAG({team_a!r}, schedule=None, start_date=START, catchup=False):
    CheckpointedSparkSubmitOperator(task_id="spark_job", application="job.py", output_roots=[{poisoned_out!r}])
    # An S3 store on the suite's SeaweedFS whose writers (alice's executors) forge its records.
    CheckpointedSparkSubmitOperator(
        task_id={s3_task!r},
        application="job.py",
        checkpoint_uri={s3_store!r},
        aws_conn_id={s3_conn!r},
        output_roots=[{s3_out!r}],
    )
    CheckpointedSparkSubmitOperator(task_id={points_at_b!r}, application="job.py", checkpoint_uri=TEAM_B_STORE)

with DAG({team_b!r}, schedule=None, start_date=START, catchup=False):
    CheckpointedSparkSubmitOperator(task_id="spark_job", application="job.py", checkpoint_uri=TEAM_B_STORE)

with DAG({hanging!r}, schedule=None, start_date=START, catchup=False):
    CheckpointedSparkSubmitOperator(
        task_id="spark_job",
        application="job.py",
        checkpoint_uri="s3://hanging-bucket/stores/shared",
        aws_conn_id={hanging_conn!r},
    )
    CheckpointCommitOperator(task_id="commit", spark_task_id="spark_job", aws_conn_id={hanging_conn!r})
    CheckpointedSparkSubmitOperator(
        task_id="missing_connection",
        application="job.py",
        checkpoint_uri="s3://hanging-bucket/stores/missing",
        aws_conn_id="no_such_connection",
    )
    CheckpointedSparkSubmitOperator(
        task_id="leaky_endpoint",
        application="job.py",
        checkpoint_uri="s3://hanging-bucket/stores/leaky",
        aws_conn_id={leaky_conn!r},
    )
    CheckpointedSparkSubmitOperator(
        task_id="credentials_in_uri",
        application="job.py",
        checkpoint_uri="s3://user:hunter2secret@bucket/prefix?X-Amz-Signature=abc",
    )
    CheckpointedSparkSubmitOperator(
        task_id="unreachable",
        application="job.py",
        checkpoint_uri="s3://ckpt-bucket/stores/unreachable",
        aws_conn_id={unreachable_conn!r},
    )

with DAG({odd!r}, schedule=None, start_date=START, catchup=False):
    CheckpointedSparkSubmitOperator(
        task_id={odd_task!r}, application="job.py", checkpoint_uri={odd_store!r}, output_roots=[{odd_out!r}]
    )
    CheckpointedSparkSubmitOperator(
        task_id={sibling_task!r}, application="job.py", checkpoint_uri={sibling_store!r}, output_roots=[{sibling_out!r}]
    )
"""


@dataclass
class ApiServer:
    harness: AirflowHarness
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    startup_seconds: float = 0.0
    hanging: HangingEndpoint | None = None
    _s3_bucket: str = ""
    _tokens: dict[str, str] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def home(self) -> Path:
        return self.harness.home

    @classmethod
    def start(cls, harness: AirflowHarness, *, timeout: float = 420) -> ApiServer:
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
        if self.hanging is not None:
            self.hanging.close()

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

    def trigger_run(self, run_id: str, dag_id: str = DAG_ID) -> None:
        """A DAG run through the public API; its task instances exist at once (state none)."""
        with self.client("admin") as client:
            response = client.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"dag_run_id": run_id, "logical_date": None})
            assert response.status_code == 200, response.text

    def push_xcom(
        self, run_id: str, task_id: str, key: str, value: Any, *, dag_id: str = DAG_ID, user: str = "admin"
    ) -> None:
        with self.client(user) as client:
            response = client.post(
                f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries",
                json={"key": key, "value": value},
            )
            assert response.status_code == 201, response.text

    # ------------------------------------------------------------------ metadata DB

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(self.harness.db_path)) as db:
            return list(db.execute(sql, params))

    def audit_entries(self, run_id: str) -> list[dict[str, Any]]:
        return self._audit("run_id = ?", run_id)

    def audit_entries_of_dag(self, dag_id: str) -> list[dict[str, Any]]:
        return self._audit("dag_id = ?", dag_id)

    def _audit(self, where: str, *params: Any) -> list[dict[str, Any]]:
        rows = self.query(
            "SELECT event, owner, dag_id, task_id, run_id, extra FROM log "
            f"WHERE event LIKE 'checkpoints.%' AND {where} ORDER BY id",
            *params,
        )
        return [
            {"event": e, "owner": o, "dag_id": d, "task_id": t, "run_id": r, "extra": json.loads(x or "{}")}
            for e, o, d, t, r, x in rows
        ]

    def set_task_state(self, run_id: str, task_id: str, state: str) -> None:
        with closing(sqlite3.connect(self.harness.db_path)) as db:
            db.execute(
                "UPDATE task_instance SET state = ? WHERE dag_id = ? AND run_id = ? AND task_id = ?",
                (state, DAG_ID, run_id, task_id),
            )
            db.commit()

    def default_store_path(self, run_id: str, task_id: str = SPARK_TASK, dag_id: str = DAG_ID) -> Path:
        """Where the operator's default store of this task instance lives: its job's (runs made here have no
        logical date, so ``run={run_id}``; the harness reads the run's logical date from the DB)."""
        return Path(self.harness.default_store_uri(dag_id, task_id, run_id))

    @property
    def s3_bucket(self) -> str:
        """The SeaweedFS bucket of team A's S3 store (tests/plugins/conftest.py starts the server)."""
        return self._s3_bucket

    @property
    def team_b_store(self) -> Path:
        return self.home / "team_b" / "shared_store"

    @property
    def odd_store(self) -> Path:
        """A store whose path holds '#', '?', '%2F', spaces and non-ASCII letters."""
        return self.home / "odd" / ODD_SEGMENT

    @property
    def sibling_store(self) -> Path:
        """The store an unescaped ``file://`` URI of :attr:`odd_store` would name instead."""
        return self.home / "odd" / "store"


def _aws_connection(login: str, password: str, endpoint_url: str) -> str:
    return json.dumps(
        {
            "conn_type": "aws",
            "login": login,
            "password": password,
            "extra": {"endpoint_url": endpoint_url, "region_name": "us-east-1"},
        }
    )


def start_ui_airflow(home: Path, s3: SeaweedServer | None = None) -> ApiServer:
    """Migrate a fresh Airflow, install the demo and attack DAGs, serialize them, start the API server.

    The server runs a per-DAG auth manager (the simple one plus per-DAG rights for alice), and
    has its own default AWS identity in its environment, pointed at the hanging endpoint: a store
    read that fell back to it would show that key at the endpoint.
    """
    harness = AirflowHarness.create(home)
    s3_bucket = s3.create_bucket(f"ui-{uuid.uuid4().hex[:16]}") if s3 is not None else "no-s3-server"
    if s3 is not None:
        harness.env[f"AIRFLOW_CONN_{S3_CONN_ID.upper()}"] = _aws_connection(
            s3.access_key, s3.secret_key, s3.endpoint_url
        )
    hanging = HangingEndpoint()
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    unreachable = f"http://127.0.0.1:{free_port()}"
    leaky = f"http://leaky-user:{LEAKY_ENDPOINT_PASSWORD}@127.0.0.1:{free_port()}"
    harness.env.update(
        {
            "AIRFLOW__CORE__AUTH_MANAGER": "tests.support.per_dag_auth_manager.PerDagAuthManager",
            RIGHTS_ENV: json.dumps(DAG_RIGHTS),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in ROLES.items()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__API__EXPOSE_CONFIG": "False",
            f"AIRFLOW_CONN_{UNREACHABLE_CONN_ID.upper()}": _aws_connection(
                "unreachable-access-key", UNREACHABLE_SECRET, unreachable
            ),
            f"AIRFLOW_CONN_{HANGING_CONN_ID.upper()}": _aws_connection(
                "hanging-access-key", HANGING_SECRET, hanging.endpoint_url
            ),
            f"AIRFLOW_CONN_{LEAKY_CONN_ID.upper()}": _aws_connection("leaky-access-key", "leaky-secret", leaky),
            "AWS_ACCESS_KEY_ID": SERVER_DEFAULT_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": "server-default-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_S3": hanging.endpoint_url,
        }
    )
    (harness.dags_folder / f"{DAG_ID}.py").write_text(DAG_SOURCE)
    odd_root = home / "odd"
    (harness.dags_folder / "ckpt_attack_dags.py").write_text(
        ATTACK_DAGS_SOURCE.format(
            team_a=TEAM_A,
            team_b=TEAM_B,
            team_b_store=str(home / "team_b" / "shared_store"),
            points_at_b=POINTS_AT_B_TASK,
            hanging=HANGING_DAG,
            hanging_conn=HANGING_CONN_ID,
            leaky_conn=LEAKY_CONN_ID,
            unreachable_conn=UNREACHABLE_CONN_ID,
            odd=ODD_DAG,
            odd_task=ODD_TASK,
            odd_store=str(odd_root / ODD_SEGMENT),
            sibling_task=SIBLING_TASK,
            sibling_store=str(odd_root / "store"),
            odd_out=str(home / "odd-out"),
            poisoned_out=str(home / "out-poisoned"),
            s3_task=S3_TASK,
            s3_store=f"s3://{s3_bucket}/stores/a_evil",
            s3_out=f"s3://{s3_bucket}/out/a",
            s3_conn=S3_CONN_ID,
            sibling_out=str(home / "sibling-out"),
        )
    )
    proc = harness.airflow("dags", "reserialize")
    if proc.returncode != 0:
        hanging.close()
        raise RuntimeError(f"airflow dags reserialize failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    try:
        server = ApiServer.start(harness)
    except BaseException:
        hanging.close()
        raise
    server.hanging = hanging
    server._s3_bucket = s3_bucket
    return server
