"""An isolated Airflow installation for tests: its own AIRFLOW_HOME, SQLite metadata DB,
DAGs folder and connections (``AIRFLOW_CONN_*`` env vars only).

Every DAG run happens in a fresh ``python -m tests.support.run_dag`` process: Airflow
reads its configuration once per process, so a subprocess is the only way to give each
test its own connections and environment without leaking into other tests (the UI and
CLI suites run their own Airflow in the same pytest process).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


@dataclass
class DagRunOutcome:
    run_id: str
    state: str
    output: str
    seconds: float
    returncode: int

    @property
    def succeeded(self) -> bool:
        return self.state == "success"


@dataclass
class AirflowHarness:
    home: Path
    migrate_seconds: float = 0.0
    env: dict[str, str] = field(default_factory=dict)

    @property
    def dags_folder(self) -> Path:
        return self.home / "dags"

    @property
    def db_path(self) -> Path:
        return self.home / "airflow.db"

    @classmethod
    def create(cls, home: Path, database_url: str | None = None) -> AirflowHarness:
        """A migrated installation in ``home``: its SQLite DB, or the metadata DB at ``database_url``."""
        home.mkdir(parents=True, exist_ok=True)
        harness = cls(home=home)
        harness.dags_folder.mkdir(exist_ok=True)
        # Job scripts copied next to the DAGs are Spark applications, not DAG files.
        (harness.dags_folder / ".airflowignore").write_text("jobs/\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "CKPT_", "AWS_"))}
        env.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(harness.dags_folder),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
                # Parsing a DAG file imports Airflow's Spark and OpenLineage providers: 30 s (the
                # default) ran out under load 23, and the DAG "could not be found".
                "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "300",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url or f"sqlite:///{harness.db_path}",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
                # spark-submit and the job's Python must be this venv's.
                "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
                "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable,
                "PYTHONPATH": str(ROOT),
                # Keep the JVMs modest: other suites run Spark at the same time on 2 cores.
                "SPARK_LOCAL_IP": "127.0.0.1",
                "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
                "AIRFLOW_CONN_SPARK_SERIAL": json.dumps({"conn_type": "spark", "host": "local[1]"}),
            }
        )
        harness.env = env
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            env=env,
            cwd=home,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        harness.migrate_seconds = time.monotonic() - started
        return harness

    # ------------------------------------------------------------------ DAGs

    def install_dag(self, source: Path, *extra: Path) -> Path:
        """Copy a DAG file (and files it needs, e.g. job scripts) into the DAGs folder."""
        target = self.dags_folder / source.name
        shutil.copy(source, target)
        for path in extra:
            destination = self.dags_folder / path.name
            if path.is_dir():
                shutil.copytree(path, destination, dirs_exist_ok=True)
            else:
                shutil.copy(path, destination)
        return target

    def run_dag(
        self,
        dag_id: str,
        *,
        logical_date: dt.datetime,
        run_after: dt.datetime | None = None,
        conf: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 600,
        while_running: Callable[[subprocess.Popen[str], Path], None] | None = None,
        only_failed: bool = False,
        outside_repository: bool = False,
    ) -> DagRunOutcome:
        """One ``dag.test()`` run in a fresh process. Same ``run_after`` ⇒ same run id.

        ``dag.test()`` clears every task instance of an existing run first; ``only_failed``
        clears only the failed and upstream-failed ones, as the UI's "Clear -> Only failed"
        does, so finished instances keep their state and XComs.

        ``outside_repository`` runs the process with neither the repository root on its path nor
        as its working directory, as a deployment runs it: there the root's
        ``airflow_ckpt_provider.egg-info`` (from the editable install) shows the package a second
        and third time, and Airflow's task-side plugin loader stops at the first repeated plugin
        name, so the plugins after it (OpenLineage's listener) never reach the tasks.

        ``while_running(process, output_path)`` runs in a thread during the run (to act on,
        or inspect, the run while it is in flight).
        """
        run_after = run_after or logical_date
        result_path = self.home / f"result-{time.monotonic_ns()}.json"
        runner = (
            [str(ROOT / "tests" / "support" / "run_dag.py")] if outside_repository else ["-m", "tests.support.run_dag"]
        )
        run_env = {**self.env, **(env or {})}
        if outside_repository:
            kept = [p for p in run_env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p) != ROOT]
            run_env["PYTHONPATH"] = os.pathsep.join(kept)
        argv = [
            sys.executable,
            *runner,
            dag_id,
            logical_date.isoformat(),
            run_after.isoformat(),
            str(result_path),
            json.dumps(dict(conf or {})),
            "only_failed" if only_failed else "",
        ]
        started = time.monotonic()
        output_path = self.home / f"output-{time.monotonic_ns()}.log"
        with open(output_path, "w+", encoding="utf-8") as output:
            proc = subprocess.Popen(
                argv,
                env=run_env,
                cwd=self.home if outside_repository else ROOT,
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
            )
            watcher = None
            if while_running is not None:
                watcher = threading.Thread(target=while_running, args=(proc, output_path), daemon=True)
                watcher.start()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if watcher is not None:
                watcher.join(timeout=30)
            output.seek(0)
            text = output.read()
        seconds = time.monotonic() - started
        if not result_path.exists():
            raise RuntimeError(f"dag.test() of {dag_id} did not finish (rc={proc.returncode}):\n{text[-6000:]}")
        result = json.loads(result_path.read_text())
        state = str(result["state"]).rsplit(".", 1)[-1].lower()
        return DagRunOutcome(result["run_id"], state, text, seconds, proc.returncode)

    def airflow(
        self, *args: str, env: Mapping[str, str] | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """The ``airflow`` CLI against this installation."""
        return subprocess.run(
            [sys.executable, "-m", "airflow", *args],
            env={**self.env, **(env or {})},
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start_airflow(self, *args: str, output: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """The ``airflow`` CLI in a process group of its own (its spark-submit and JVM included), output
        to ``output``: for a test that kills a run (:meth:`kill_group`)."""
        with open(output, "wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "airflow", *args],
                env={**self.env, **(env or {})},
                cwd=self.home,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @staticmethod
    def kill_group(proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the process group :meth:`start_airflow` started (by its id), as a lost worker dies."""
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)

    # ------------------------------------------------------------------ metadata DB

    def run_of(self, dag_id: str, logical_date: dt.datetime) -> tuple[str, str]:
        """(run id, state) of the run of ``logical_date`` (Airflow keeps one run per logical date)."""
        rows = [
            (run_id, state)
            for run_id, state, logical in self._query(
                "SELECT run_id, state, logical_date FROM dag_run WHERE dag_id=?", dag_id
            )
            if logical and dt.datetime.fromisoformat(str(logical)).replace(tzinfo=dt.UTC) == logical_date
        ]
        assert len(rows) == 1, rows
        return str(rows[0][0]), str(rows[0][1])

    def _query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(self.db_path)) as db:
            return list(db.execute(sql, params))

    def default_store_uri(self, dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> str:
        """The store a task instance's operator uses by default: its job's (the run's logical date, read here)."""
        from airflow_ckpt_provider.hooks.default_location import JobIdentity, default_location

        rows = self._query("SELECT logical_date FROM dag_run WHERE dag_id=? AND run_id=?", dag_id, run_id)
        logical = dt.datetime.fromisoformat(str(rows[0][0])) if rows and rows[0][0] else None
        job = JobIdentity(dag_id, task_id, run_id, logical, map_index)
        return default_location(str(self.home / "checkpoints"), job)

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", *, map_index: int = -1) -> Any:
        rows = self._query(
            "SELECT value FROM xcom WHERE dag_id=? AND run_id=? AND task_id=? AND key=? AND map_index=?",
            dag_id,
            run_id,
            task_id,
            key,
            map_index,
        )
        return json.loads(rows[0][0]) if rows else None

    def mapped_task_instances(self, dag_id: str, run_id: str, task_id: str) -> dict[int, tuple[str | None, int]]:
        """map_index -> (state, try_number) of one mapped task."""
        rows = self._query(
            "SELECT map_index, state, try_number FROM task_instance WHERE dag_id=? AND run_id=? AND task_id=?",
            dag_id,
            run_id,
            task_id,
        )
        return {map_index: (state, tries) for map_index, state, tries in rows}

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, tuple[str | None, int]]:
        """task_id -> (state, try_number)."""
        rows = self._query(
            "SELECT task_id, state, try_number FROM task_instance WHERE dag_id=? AND run_id=?", dag_id, run_id
        )
        return {task_id: (state, tries) for task_id, state, tries in rows}

    def dump_tables(self, *tables: str) -> Iterator[str]:
        """Every row of ``tables`` as text (for secret scans)."""
        for table in tables:
            for row in self._query(f"SELECT * FROM {table}"):
                yield f"{table}: {row!r}"


class StatsdListener:
    """A UDP socket on loopback that collects what Airflow's StatsD client sends."""

    def __init__(self) -> None:
        import socket

        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.settimeout(0.2)
        self.port = int(self._socket.getsockname()[1])
        self.packets: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._socket.recv(65536)
            except TimeoutError:
                continue
            self.packets.extend(data.decode("utf-8", "replace").splitlines())

    def env(self) -> dict[str, str]:
        return {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        }

    def metrics(self, prefix: str) -> list[str]:
        return [packet for packet in self.packets if packet.startswith(prefix)]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._socket.close()
