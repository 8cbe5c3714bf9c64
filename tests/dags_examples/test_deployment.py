"""The example DAGs in a real distributed deployment, as users run Airflow on more than one machine.

Started here, each a process of its own: PostgreSQL (the metadata DB) and Redis (the Celery broker)
from the Debian packages; ``airflow api-server``, ``scheduler``, ``dag-processor`` and ``triggerer``;
and Celery workers, each with its own ``AIRFLOW_HOME`` (its own local disk: DAGs folder, logs,
``$AIRFLOW_HOME/checkpoints``) and its own queue: worker A (``default``), worker B (``retries``: a
cluster policy routes every try after the first there, Airflow's way of sending retries elsewhere),
and worker C (``unshared``), deployed without ``[ckpt] base_uri``. Stores and output live on the
suite's S3 server (SeaweedFS, ``[ckpt] base_uri = s3://…``); Spark is a standalone cluster (two
workers, the master's REST server on). Everything the test does goes through the public REST API as
a logged-in user, as a user would:

1. Example 1 (``ckpt_daily_events``, client mode on the cluster): the first try fails in the job's
   own UDF on worker A; the Checkpoints tab (the API server, reading S3) shows the partitions it
   sealed; the user corrects the record in the Variable the DAG reads and clears the task (a run's
   conf cannot change on Clear); the try runs on worker B, which has never seen A's disk, and
   resumes: it skips what A's try sealed. The commit (on A) commits both tries' work; a plain
   pyarrow reader sees each event once.
2. A backfill of that day (``reprocess_behavior="completed"``, run by the scheduler): Airflow clears
   the committed run, whose re-run replaces the committed output instead of appending to it.
3. Example 3 (``ckpt_cluster_sensor``, cluster deploy mode): the driver runs on a Spark worker, the
   deferrable sensor waits in the triggerer (not in a worker slot) until every partition sealed,
   the commit closes the epoch.
4. Example 1 on worker C, whose store would be the embedded default: the submit fails fast with
   ``InvalidArgumentError`` (``store_not_shared``) naming ``[ckpt] base_uri``: no spark-submit, no
   store on C's disk.

The suite runs this once (a rerun would cost the whole deployment again); the LocalExecutor
deployment it replaced proved the REST clear and the backfill, kept here in steps 1 and 2.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from airflow_ckpt_provider.store import EpochStatus, open_store
from ckpt_testkit.seaweed import SeaweedServer
from ckpt_testkit.spark_cluster import SparkStandaloneCluster, free_port
from tests.support.airflow_harness import AirflowHarness
from tests.support.api_server import ApiServer
from tests.support.servers import SKIP_VARIABLE, PostgresServer, RedisServer, missing_servers

pytestmark = [
    pytest.mark.airflow,
    pytest.mark.spark,
    pytest.mark.cluster,
    pytest.mark.s3,
    pytest.mark.deployment,
    pytest.mark.timeout(1500),
    # Minutes of processes on a 2-core machine: the suite runs it once (no rerun), and says why it failed.
    pytest.mark.flaky(reruns=0),
]

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"
DAG_ID = "ckpt_daily_events"
CLUSTER_DAG = "ckpt_cluster_sensor"
EVENTS = 8_000  # 2,000 a partition: the failed partition still writes its file in several Arrow batches
DAY = "2024-11-05"
PASSWORD = "deploy-admin-password"
S3_CONN = "ckpt_s3"
CORRECTIONS = "ckpt_daily_events_corrections"
#: Queues: worker A serves the default one; tries after the first go to B; C serves runs that ask for it.
QUEUE_A, QUEUE_B, QUEUE_C = "default", "retries", "unshared"

#: The deployment's cluster policy (airflow_local_settings.py of the scheduler and the API server, where
#: task instances are created and cleared): Airflow's documented way to route retries to another queue.
LOCAL_SETTINGS = f'''
"""Cluster policy of the deployment test: tries after the first run on worker B; a run whose conf
names a queue runs there (worker C, deployed without [ckpt] base_uri)."""


def task_instance_mutation_hook(task_instance, dag_run=None):
    conf = (getattr(dag_run, "conf", None) or {{}}) if dag_run is not None else {{}}
    if conf.get("queue"):
        task_instance.queue = conf["queue"]
    elif (task_instance.try_number or 0) >= 1:  # None while the instance is being created
        task_instance.queue = "{QUEUE_B}"
'''


@dataclass
class Worker:
    name: str
    queue: str
    home: Path
    hostname: str
    process: subprocess.Popen[bytes] | None = None

    @property
    def checkpoints(self) -> Path:
        """The worker's embedded default location: its own disk."""
        return self.home / "checkpoints"

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
        found = [
            p
            for p in (self.home / "logs").rglob(f"attempt={try_number}*.log")
            if f"dag_id={dag_id}" in str(p) and f"run_id={run_id}" in str(p) and f"task_id={task_id}" in str(p)
        ]
        return "\n".join(p.read_text(errors="replace") for p in found)


@dataclass
class Deployment:
    core: AirflowHarness
    server: ApiServer
    workers: dict[str, Worker]
    cluster: SparkStandaloneCluster
    s3: SeaweedServer
    bucket: str
    logs: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _token: str = ""

    @property
    def api(self) -> httpx.Client:
        if not self._token:
            response = httpx.post(
                f"{self.server.base_url}/auth/token", json={"username": "admin", "password": PASSWORD}, timeout=60
            )
            assert response.status_code == 201, response.text
            self._token = str(response.json()["access_token"])
        return httpx.Client(
            base_url=self.server.base_url, headers={"Authorization": f"Bearer {self._token}"}, timeout=60
        )

    def wait(self, what: str, check: Callable[[], Any], timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(1)
        raise AssertionError(f"timed out waiting for {what}\n{self.log_tails()}")

    def log_tails(self) -> str:
        files = [*sorted(self.logs.glob("*.log")), self.server.log_path]
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}" for p in files if p.is_file())

    def lake(self) -> pafs.S3FileSystem:
        endpoint = self.s3.endpoint_url.split("://", 1)[1]
        return pafs.S3FileSystem(
            access_key=self.s3.access_key,
            secret_key=self.s3.secret_key,
            endpoint_override=endpoint,
            scheme="http",
            region="us-east-1",
        )


def _start(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as output:
        return subprocess.Popen(argv, env=env, cwd=cwd, stdout=output, stderr=subprocess.STDOUT)


def _stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for proc in processes:  # only the processes this test started, by their handle
        if proc.poll() is None:
            proc.terminate()
    for proc in processes:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def deployment(tmp_path: Path, s3_server: SeaweedServer) -> Iterator[Deployment]:
    if os.environ.get(SKIP_VARIABLE) == "1":
        pytest.skip(f"{SKIP_VARIABLE}=1")
    missing = missing_servers()
    assert not missing, f"install {' '.join(missing)} (scripts/test.sh does, with apt-get)"
    started = time.monotonic()
    logs = tmp_path / "logs"
    logs.mkdir()
    # The Spark cluster starts while PostgreSQL, Redis and the metadata DB's migration do.
    rest_port = free_port()
    cluster = SparkStandaloneCluster(
        tmp_path / "spark",
        worker_cores=2,
        worker_memory="2g",
        # Two applications at once (a client-mode job and a cluster-mode driver's), two cores each.
        master_options=(
            "-Dspark.master.rest.enabled=true -Dspark.master.rest.host=127.0.0.1 "
            f"-Dspark.master.rest.port={rest_port} -Dspark.deploy.defaultCores=2"
        ),
    )
    cluster_ready: list[BaseException | None] = []
    starting = threading.Thread(target=lambda: cluster_ready.append(_try(cluster.start)), daemon=True)
    starting.start()
    postgres = PostgresServer()
    redis = RedisServer(tmp_path / "redis")
    processes: list[subprocess.Popen[bytes]] = []
    server: ApiServer | None = None
    try:
        postgres.start()
        redis.start()
        core = AirflowHarness.create(tmp_path / "core", database_url=postgres.sqlalchemy_url)
        migrated = time.monotonic()
        core.install_dag(EXAMPLES / f"{DAG_ID}.py", EXAMPLES / "jobs")
        core.install_dag(EXAMPLES / f"{CLUSTER_DAG}.py")
        (core.home / "config").mkdir(exist_ok=True)
        (core.home / "config" / "airflow_local_settings.py").write_text(LOCAL_SETTINGS)
        passwords = core.home / "passwords.json"
        passwords.write_text(json.dumps({"admin": PASSWORD}))
        bucket = s3_server.create_bucket(f"deploy-{uuid.uuid4().hex[:12]}")
        starting.join(timeout=300)
        assert cluster_ready == [None], f"the Spark cluster did not start: {cluster_ready}"
        log_port = free_port()
        core.env.update(
            {
                "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
                "AIRFLOW__CELERY__BROKER_URL": redis.url,
                "AIRFLOW__CELERY__RESULT_BACKEND": postgres.celery_result_backend,
                "AIRFLOW__CORE__PARALLELISM": "8",
                "AIRFLOW__CORE__AUTH_MANAGER": (
                    "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                # Parsed once, when the dag-processor finds the file: nothing in the DAG files changes.
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
                # The examples are @daily with catchup=False: unpausing would also start their latest
                # scheduled run beside the test's own. Manual and backfill runs still run.
                "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
                "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
                # The api-server checks the task tokens the workers carry: one secret for all.
                "AIRFLOW__API_AUTH__JWT_SECRET": "deployment-test-jwt-secret",
                # ... and the API server signs its requests for a worker's log server with this one.
                "AIRFLOW__API__SECRET_KEY": "deployment-test-secret-key",
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": "tests.support.servers.worker_hostname",
                # Worker A serves its task logs there; the API server reads them from there.
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_port),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
                # Every store and every output on S3: what every process (worker, Spark, triggerer,
                # API server) can reach. Credentials through one Airflow connection.
                "AIRFLOW__CKPT__BASE_URI": f"s3://{bucket}/ckpt",
                "AIRFLOW__CKPT__AWS_CONN_ID": S3_CONN,
                f"AIRFLOW_CONN_{S3_CONN.upper()}": json.dumps(
                    {
                        "conn_type": "aws",
                        "login": s3_server.access_key,
                        "password": s3_server.secret_key,
                        "extra": {"endpoint_url": s3_server.endpoint_url, "region_name": "us-east-1"},
                    }
                ),
                "CKPT_EXAMPLE_LAKE": f"s3://{bucket}/lake",
                "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
                    {"conn_type": "spark", "host": "spark://127.0.0.1", "port": cluster.master_port}
                ),
                "AIRFLOW_CONN_SPARK_CLUSTER": json.dumps(
                    {
                        "conn_type": "spark",
                        "host": "spark://127.0.0.1",
                        "port": cluster.master_port,
                        "extra": {"deploy-mode": "cluster", "rest-port": rest_port},
                    }
                ),
            }
        )
        server = ApiServer.start(core)
        core.env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = f"{server.base_url}/execution/"
        for component in ("scheduler", "dag-processor", "triggerer"):
            argv = [sys.executable, "-m", "airflow", component]
            processes.append(_start(argv, core.env, core.home, logs / f"{component}.log"))
        workers: dict[str, Worker] = {}
        for name, queue in (("a", QUEUE_A), ("b", QUEUE_B), ("c", QUEUE_C)):
            worker = Worker(name, queue, tmp_path / f"worker-{name}", f"worker-{name}.deployment.invalid")
            if name == "a":
                worker.hostname = "localhost"  # its log server is the one the API server reads
            (worker.home / "dags").mkdir(parents=True)
            shutil.copytree(core.dags_folder, worker.home / "dags", dirs_exist_ok=True)
            env = {
                **core.env,
                "AIRFLOW_HOME": str(worker.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(worker.home / "dags"),
                "CKPT_WORKER_HOSTNAME": worker.hostname,
            }
            if name == "c":  # deployed without the S3 base: its stores would be the embedded default
                env.pop("AIRFLOW__CKPT__BASE_URI")
            argv = [sys.executable, "-m", "airflow", "celery", "worker", "--queues", queue]
            argv += ["--concurrency", "2" if name != "c" else "1", "--celery-hostname", f"worker_{name}@%h"]
            argv += ["--without-mingle", "--without-gossip"] + ([] if name == "a" else ["--skip-serve-logs"])
            worker.process = _start(argv, env, worker.home, logs / f"worker-{name}.log")
            processes.append(worker.process)
            workers[name] = worker
        deployment = Deployment(core, server, workers, cluster, s3_server, bucket, logs, processes)
        print(
            f"\ndeployment: migrated after {migrated - started:.0f} s, API server up after "
            f"{time.monotonic() - started:.0f} s (its start: {server.startup_seconds:.0f} s)"
        )
        yield deployment
    finally:
        _stop_all(processes)
        if server is not None:
            server.stop()
        starting.join(timeout=300)
        cluster.stop()
        redis.stop()
        postgres.stop()


def _try(action: Callable[[], Any]) -> BaseException | None:
    try:
        action()
    except BaseException as exc:  # reported by the fixture, in the test's thread
        return exc
    return None


def _value(entry: dict[str, Any]) -> dict[str, Any]:
    value = entry["value"]
    return value if isinstance(value, dict) else dict(json.loads(value))


def test_a_celery_deployment_resumes_on_another_worker_and_refuses_an_unshared_store(
    deployment: Deployment,
) -> None:
    d = deployment
    api = d.api
    d.wait("the DAGs to be parsed", lambda: api.get(f"/api/v2/dags/{DAG_ID}").status_code == 200, 600)
    d.wait("the DAGs to be parsed", lambda: api.get(f"/api/v2/dags/{CLUSTER_DAG}").status_code == 200, 600)
    for dag_id in (DAG_ID, CLUSTER_DAG):
        assert api.patch(f"/api/v2/dags/{dag_id}", json={"is_paused": False}).status_code == 200
    runs = f"/api/v2/dags/{DAG_ID}/dagRuns"

    def trigger(dag_id: str, day: str, conf: dict[str, Any]) -> str:
        created = api.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": f"{day}T00:00:00Z", "conf": conf})
        assert created.status_code == 200, created.text
        return str(created.json()["dag_run_id"])

    def task(dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        return dict(api.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}").json())

    def xcom(dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> dict[str, Any]:
        entry = api.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}")
        assert entry.status_code == 200, entry.text
        return _value(entry.json())

    def ended(dag_id: str, run_id: str) -> dict[str, Any] | None:
        run = dict(api.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json())
        return run if run.get("state") in ("success", "failed") else None

    run_id = trigger(DAG_ID, DAY, {"events": EVENTS, "partitions": 4, "fail_partition": 2})
    cluster_run = trigger(CLUSTER_DAG, DAY, {"events": 8_000, "partitions": 4})
    unshared_run = trigger(DAG_ID, "2024-11-06", {"events": 1_000, "partitions": 2, "queue": QUEUE_C})
    # Once its first try failed the run is marked failed, as a user would: its retries would fail alike.
    refusals: list[dict[str, Any]] = []

    def stop_after_the_first_try() -> None:
        with d.api as client:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and not refusals:
                ti = client.get(f"{runs}/{unshared_run}/taskInstances/process_events").json()
                if ti.get("state") in ("up_for_retry", "failed"):
                    refusals.append(ti)
                    client.patch(f"{runs}/{unshared_run}", json={"state": "failed"})
                time.sleep(1)

    watcher = threading.Thread(target=stop_after_the_first_try, daemon=True)
    watcher.start()

    # ---- 1. the first try fails in the job's UDF on worker A.
    first = d.wait(
        "the first try to fail",
        lambda: (ti := task(DAG_ID, run_id, "process_events")).get("state") in ("up_for_retry", "failed") and ti,
        600,
    )
    assert (first["try_number"], first["queue"], first["hostname"]) == (1, QUEUE_A, "localhost")

    # The Checkpoints tab, through the API server, as the logged-in user: what A's try sealed, on S3.
    params = {"dag_id": DAG_ID, "run_id": run_id, "task_id": "process_events"}
    tab = api.get("/checkpoints/api/task", params=params)
    assert tab.status_code == 200, tab.text
    store_uri = tab.json()["store_uri"]
    assert store_uri == f"s3://{d.bucket}/ckpt/{DAG_ID}/process_events/date={DAY}"
    progress = tab.json()["report"]["progress"]
    assert 0 < progress["sealed_partitions"] < 4 and 0 < progress["keys_done"] < EVENTS, progress
    page = api.get("/checkpoints/ui/task", params=params)
    assert page.status_code == 200 and store_uri in page.text

    # The user reads the error in the task log (served by worker A), corrects the record, clears the task.
    log = api.get(f"{runs}/{run_id}/taskInstances/process_events/logs/1", params={"full_content": True})
    found = next((w for w in log.text.replace('"', " ").split() if w.isdigit() and len(w) == 14), None)
    assert found is not None and CORRECTIONS in log.text, log.text[-3000:]
    variable = {"key": CORRECTIONS, "value": json.dumps({found: "0.00"})}
    assert api.post("/api/v2/variables", json=variable).status_code == 201
    cleared = api.post(
        f"/api/v2/dags/{DAG_ID}/clearTaskInstances",
        json={"dag_run_id": run_id, "task_ids": ["process_events"], "dry_run": False, "only_failed": False},
    )
    assert cleared.status_code == 200, cleared.text

    # ---- 4. worker C, whose store would be the embedded default: refused before spark-submit.
    watcher.join(timeout=600)
    assert refusals, f"the submit on worker C did not fail\n{d.log_tails()}"
    refused = refusals[0]
    assert (refused["queue"], refused["hostname"], refused["try_number"]) == (QUEUE_C, d.workers["c"].hostname, 1)
    c_log = d.workers["c"].task_log(DAG_ID, unshared_run, "process_events", 1)
    assert "InvalidArgumentError" in c_log and "embedded default" in c_log, c_log[-3000:]
    assert "runs on CeleryExecutor" in c_log and "base_uri = s3://" in c_log
    assert "Spark-Submit cmd" not in c_log  # no spark-submit ran
    assert not d.workers["c"].checkpoints.exists()  # nothing written to C's disk
    assert ended(DAG_ID, unshared_run) is not None

    run = d.wait("the run to end", lambda: ended(DAG_ID, run_id), 900)
    assert run["state"] == "success", run
    tries = api.get(f"{runs}/{run_id}/taskInstances/process_events/tries").json()["task_instances"]
    where = {t["try_number"]: (t["queue"], t["hostname"], t["state"]) for t in tries}
    # The resume ran on worker B (A's first try failed, its automatic retry possibly too).
    last = max(where)
    assert where[1][:2] == (QUEUE_A, "localhost") and where[last] == (QUEUE_B, d.workers["b"].hostname, "success")
    plan = xcom(DAG_ID, run_id, "process_events", "checkpoint_plan")
    assert plan["checkpoint_uri"] == store_uri and plan["keys_skipped"] >= progress["keys_done"], plan
    result = xcom(DAG_ID, run_id, "process_events")
    assert result["keys"] == EVENTS - plan["keys_skipped"]  # B processed only what A's try had not sealed
    commit = xcom(DAG_ID, run_id, "commit")
    assert commit["rows_committed"] == EVENTS and commit["unknown_files"] == 0, commit
    assert not d.workers["a"].checkpoints.exists() and not d.workers["b"].checkpoints.exists()

    # A plain reader of the output (pyarrow over S3, not this package) sees each event once.
    lake = d.lake()
    output = f"{d.bucket}/lake/daily_events/day={DAY}"
    table = pq.read_table(output, filesystem=lake, columns=["event_id", "amount"]).to_pydict()
    assert len(table["event_id"]) == EVENTS and len(set(table["event_id"])) == EVENTS  # exactly once
    assert dict(zip(table["event_id"], table["amount"], strict=True))[int(found)] == 0.0  # as corrected
    committed = {f.path for f in lake.get_file_info(pafs.FileSelector(output)) if f.path.endswith(".parquet")}
    assert commit["files_committed"] == len(committed)

    # ---- 2. a backfill of the committed day: Airflow clears the run, its re-run replaces the output.
    created = api.post(
        "/api/v2/backfills",
        json={
            "dag_id": DAG_ID,
            "from_date": f"{DAY}T00:00:00Z",
            "to_date": f"{DAY}T00:00:00Z",
            "reprocess_behavior": "completed",
            "max_active_runs": 1,
            "dag_run_conf": {"events": EVENTS, "partitions": 4},
        },
    )
    assert created.status_code == 200, created.text

    def backfilled() -> dict[str, Any] | None:
        history = api.get(f"{runs}/{run_id}/taskInstances/process_events/tries").json()["task_instances"]
        return ended(DAG_ID, run_id) if max(t["try_number"] for t in history) > last else None

    rerun = d.wait("the backfill's run to end", backfilled, 900)
    assert rerun["state"] == "success" and rerun["dag_run_id"] == run_id  # Airflow cleared the run, as Clear does
    plan = xcom(DAG_ID, run_id, "process_events", "checkpoint_plan")
    assert plan["rerun"]["action"] == "replace" and plan["keys_skipped"] == 0, plan
    commit = xcom(DAG_ID, run_id, "commit")
    assert commit["rows_committed"] == EVENTS and commit["files_replaced"] == len(committed), commit
    table = pq.read_table(output, filesystem=lake, columns=["event_id", "amount"]).to_pydict()
    assert len(table["event_id"]) == EVENTS and len(set(table["event_id"])) == EVENTS  # replaced, not appended
    assert dict(zip(table["event_id"], table["amount"], strict=True))[int(found)] == 0.0
    now = {f.path for f in lake.get_file_info(pafs.FileSelector(output)) if f.path.endswith(".parquet")}
    assert not committed & now

    # ---- 3. cluster deploy mode and the deferrable sensor, served by the triggerer.
    cluster = d.wait("the cluster-mode run to end", lambda: ended(CLUSTER_DAG, cluster_run), 900)
    assert cluster["state"] == "success", cluster
    submitted = xcom(CLUSTER_DAG, cluster_run, "submit_to_cluster")
    assert submitted["detached"] is True and submitted["driver_id"].startswith("driver-")
    assert submitted["checkpoint_uri"] == f"s3://{d.bucket}/ckpt/{CLUSTER_DAG}/submit_to_cluster/date={DAY}"
    sensor = task(CLUSTER_DAG, cluster_run, "wait_for_partitions")
    assert sensor["state"] == "success" and sensor["try_number"] == 1
    # The trigger's own log, written by the triggerer into its home (no worker ran the wait).
    trigger_logs = [
        p for p in d.core.home.joinpath("logs").rglob("attempt=1.log.trigger.*.log") if CLUSTER_DAG in str(p)
    ]
    trigger_log = "\n".join(p.read_text(errors="replace") for p in trigger_logs)
    assert "wait_for_partitions" in trigger_log and "partitions sealed" in trigger_log, d.log_tails()
    progress = xcom(CLUSTER_DAG, cluster_run, "wait_for_partitions")
    assert (progress["sealed_partitions"], progress["expected_partitions"]) == (4, 4)
    assert xcom(CLUSTER_DAG, cluster_run, "commit")["rows_committed"] == 8_000
    epoch = open_store(submitted["checkpoint_uri"], **d.s3.options()).epochs.current()
    assert epoch is not None and epoch.status is EpochStatus.COMMITTED and epoch.number == 1
    cluster_output = f"{d.bucket}/lake/cluster_events/day={DAY}"
    ids = pq.read_table(cluster_output, filesystem=lake, columns=["event_id"]).column(0).to_pylist()
    assert len(ids) == 8_000 and len(set(ids)) == 8_000
