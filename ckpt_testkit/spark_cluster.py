"""A real Spark standalone cluster for tests: one master and two workers on distinct loopback addresses.

Speculative execution only launches a copy of a task on a *different host* than the
original attempt, so local mode never speculates; two workers on 127.0.0.2 and
127.0.0.3 look like two hosts to the scheduler. Everything runs from pyspark's own
package directory (``SPARK_HOME``) with ``spark-class``; jobs are submitted with
``spark-submit --master spark://127.0.0.1:P``. Only processes started here are
stopped here, by their pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

SPARK_HOME = str(Path(pyspark.__file__).parent)
MASTER_HOST = "127.0.0.1"
WORKER_HOSTS = ("127.0.0.2", "127.0.0.3")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (below 55000, like every port the suite uses)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port < 55000:
            return port
    raise RuntimeError("no free port below 55000")


def spark_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for spark-class / spark-submit: this interpreter for Python, pyspark's SPARK_HOME."""
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": SPARK_HOME,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_NO_DAEMONIZE": "1",
            # Keep Spark off any other address: the only network here is loopback.
            "SPARK_LOCAL_IP": MASTER_HOST,
        }
    )
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    if extra:
        env.update(extra)
    return env


@dataclass
class SparkStandaloneCluster:
    """Master on 127.0.0.1 and one single-core worker per address in ``WORKER_HOSTS``."""

    work_dir: Path
    worker_cores: int = 1
    worker_memory: str = "1g"
    master_port: int = 0
    master_ui_port: int = 0
    #: Java options of the master (``SPARK_MASTER_OPTS``), e.g. its REST server or ``spark.deploy.defaultCores``.
    master_options: str = ""
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://{MASTER_HOST}:{self.master_port}"

    def start(self, timeout: float = 90.0) -> SparkStandaloneCluster:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.master_port = free_port()
        self.master_ui_port = free_port()
        spark_class = os.path.join(SPARK_HOME, "bin", "spark-class")
        self._spawn(
            "master",
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                MASTER_HOST,
                "--port",
                str(self.master_port),
                "--webui-port",
                str(self.master_ui_port),
            ],
            {
                "SPARK_LOCAL_IP": MASTER_HOST,
                **({"SPARK_MASTER_OPTS": self.master_options} if self.master_options else {}),
            },
        )
        self._wait_for(lambda: self._master_state() is not None, timeout, "master to start")
        for host in WORKER_HOSTS:
            worker_dir = self.work_dir / f"worker-{host}"
            worker_dir.mkdir(exist_ok=True)
            self._spawn(
                f"worker-{host}",
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    host,
                    "--port",
                    str(free_port(host)),
                    "--webui-port",
                    str(free_port(host)),
                    "--cores",
                    str(self.worker_cores),
                    "--memory",
                    self.worker_memory,
                    "--work-dir",
                    str(worker_dir),
                    self.master_url,
                ],
                {"SPARK_LOCAL_IP": host},
            )
        self._wait_for(lambda: self.alive_workers() == len(WORKER_HOSTS), timeout, "workers to register")
        return self

    def _spawn(self, name: str, argv: Sequence[str], env: Mapping[str, str]) -> None:
        log = open(self.work_dir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        # spark-class ends in `exec java ...`, so the pid we keep is the JVM itself.
        proc = subprocess.Popen(
            list(argv), env=spark_env(env), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self._procs.append(proc)

    def _master_state(self) -> dict[str, object] | None:
        try:
            with urllib.request.urlopen(f"http://{MASTER_HOST}:{self.master_ui_port}/json/", timeout=2) as resp:
                data: dict[str, object] = json.loads(resp.read())
                return data
        except OSError:
            return None

    def alive_workers(self) -> int:
        state = self._master_state() or {}
        workers = state.get("workers") or []
        assert isinstance(workers, list)
        return sum(1 for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE")

    def applications(self) -> list[dict[str, object]]:
        state = self._master_state() or {}
        apps = list(state.get("activeapps") or []) + list(state.get("completedapps") or [])  # type: ignore[call-overload]
        return [a for a in apps if isinstance(a, dict)]

    def executor_pids(self) -> list[int]:
        """The executor JVMs the workers of this cluster launched (children of the worker JVMs)."""
        return self._worker_children(b"CoarseGrainedExecutorBackend")

    def driver_pids(self) -> list[int]:
        """The driver JVMs of cluster-mode submits the workers of this cluster launched."""
        return self._worker_children(b"org.apache.spark.deploy.worker.DriverWrapper")

    def _worker_children(self, marker: bytes) -> list[int]:
        workers = {proc.pid for proc in self._procs[1:] if proc.poll() is None}
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except (OSError, IndexError, ValueError):
                continue
            if parent in workers and marker in command:
                found.append(int(entry.name))
        return sorted(found)

    def _wait_for(self, ready: object, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if callable(ready) and ready():
                return
            for proc in self._procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited early (code {proc.returncode}); see {self.work_dir}")
            time.sleep(0.5)
        raise TimeoutError(f"timed out waiting for {what}; logs in {self.work_dir}")

    def submit_argv(
        self, script: str | Path, args: Sequence[str] = (), conf: Mapping[str, str] | None = None
    ) -> list[str]:
        """The spark-submit command line for ``script`` on this cluster (client deploy mode)."""
        argv = [
            os.path.join(SPARK_HOME, "bin", "spark-submit"),
            "--master",
            self.master_url,
            "--conf",
            f"spark.driver.host={MASTER_HOST}",
            "--conf",
            f"spark.driver.bindAddress={MASTER_HOST}",
            "--conf",
            "spark.executor.memory=768m",
            "--conf",
            "spark.driver.memory=768m",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}",
        ]
        for name, value in (conf or {}).items():
            argv += ["--conf", f"{name}={value}"]
        return [*argv, str(script), *args]

    def stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        for proc in reversed(self._procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=10)
        self._procs.clear()


@contextlib.contextmanager
def standalone_cluster(work_dir: Path) -> Iterator[SparkStandaloneCluster]:
    cluster = SparkStandaloneCluster(work_dir)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
