"""The processes of a trial: the resident Spark host, one-off spark-submits, and commit steps.

Every process is started here in its own process group and only ever stopped by
its own id (``killpg`` of a group this module created), so a SIGKILL takes the
driver with its JVM and Python workers, like a lost machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from airflow_ckpt_provider.contract import parse_result_line
from airflow_ckpt_provider.failpoints import ENV_VAR as FAILPOINTS_ENV
from airflow_ckpt_provider.failpoints import EXIT_CODE
from ckpt_testkit.faults.jobs.armed_daemon import ARM_FILE_ENV
from ckpt_testkit.faults.jobs.commit_step import RESULT_PREFIX as COMMIT_PREFIX
from ckpt_testkit.faults.jobs.fault_job import OPTIONS_ENV
from ckpt_testkit.faults.jobs.session_host import REPLY_PREFIX
from ckpt_testkit.spark_cluster import SPARK_HOME, spark_env

REPO_ROOT = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).parent / "jobs"


@dataclass
class RunOutcome:
    """How one submit (or commit) ended."""

    ok: bool
    where: str  # "host", "submit" or "commit"
    seconds: float
    result: dict[str, Any] | None = None
    error: str = ""
    returncode: int | None = None
    killed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def short_error(self, limit: int = 300) -> str:
        if self.returncode == EXIT_CODE:
            return f"exit code {EXIT_CODE} (an exit failpoint ended the process)"
        for marker in ("InjectedFault", "EpochConflictError", "EpochFencedError", "exited unexpectedly", "Error"):
            index = self.error.find(marker)
            if index >= 0:
                return self.error[max(0, index - 40) : index + limit].replace("\n", " ")
        return self.error[:limit].replace("\n", " ")


def _env(options: Mapping[str, Any], failpoints: str) -> dict[str, str]:
    extra = {"PYTHONPATH": str(REPO_ROOT), OPTIONS_ENV: json.dumps(dict(options)), FAILPOINTS_ENV: failpoints}
    return spark_env(extra)


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL a process this module started and its whole group (its JVM and Python workers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


class SparkHost:
    """Client of ``jobs/session_host.py``: one resident local[2] driver, restarted when needed."""

    def __init__(self, log_dir: Path, *, master: str = "local[2]") -> None:
        self.log_dir = log_dir
        self.master = master
        self._proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._log: IO[str] | None = None
        self.starts = 0
        #: Spark's event log of the resident session (the progress oracle reads it).
        self.event_dir = log_dir / "events"

    def _reader(self, stream: IO[str], lines: queue.Queue[str | None]) -> None:
        for line in stream:
            if line.startswith(REPLY_PREFIX):
                lines.put(line[len(REPLY_PREFIX) :])
        lines.put(None)

    def start(self, timeout: float = 240) -> None:
        self.stop()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_dir / f"spark-host-{self.starts}.log", "w")  # noqa: SIM115 - lives with the host
        self.starts += 1
        env = _env({}, "")
        env["FAULT_HOST_MASTER"] = self.master
        env["FAULT_HOST_EVENT_LOG"] = str(self.event_dir)
        env[ARM_FILE_ENV] = str(self.log_dir / f"arm-{self.starts}.json")
        self._proc = subprocess.Popen(
            [sys.executable, str(JOBS / "session_host.py")],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            cwd=str(REPO_ROOT),
            start_new_session=True,
        )
        self._lines = queue.Queue()
        assert self._proc.stdout is not None
        threading.Thread(target=self._reader, args=(self._proc.stdout, self._lines), daemon=True).start()
        ready = self._next(timeout)
        if ready is None:
            raise RuntimeError(f"the Spark host did not start; see {self.log_dir}")

    def _next(self, timeout: float) -> dict[str, Any] | None:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            return None
        return None if line is None else json.loads(line)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                assert proc.stdin is not None
                proc.stdin.close()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                kill_group(proc)
            kill_group(proc)  # leftover Python workers of the group, if any
        if self._log is not None:
            self._log.close()
            self._log = None

    def run(
        self,
        spec: Mapping[str, Any],
        options: Mapping[str, Any],
        failpoints: str = "",
        run_id: str = "",
        timeout: float = 300,
    ) -> RunOutcome:
        """Run the job once in the resident session. A hang or a dead host is an outcome, not an exception."""
        if self._proc is None or self._proc.poll() is not None:
            self.start()
        assert self._proc is not None and self._proc.stdin is not None
        command = {"spec": dict(spec), "options": dict(options), "failpoints": failpoints, "run_id": run_id}
        started = time.monotonic()
        self._proc.stdin.write(json.dumps(command) + "\n")
        self._proc.stdin.flush()
        reply = self._next(timeout)
        seconds = time.monotonic() - started
        if reply is None:
            hung = self._proc.poll() is None
            self.stop()
            what = f"no answer within {timeout:.0f}s (hung)" if hung else "the Spark host died"
            return RunOutcome(False, "host", seconds, error=what, extra={"host_lost": True, "hung": hung})
        return RunOutcome(
            bool(reply["ok"]),
            "host",
            seconds,
            result=reply.get("result"),
            error=str(reply.get("error", "")),
            extra={"pool_seconds": reply.get("pool_seconds", 0.0), "job_seconds": reply.get("seconds", 0.0)},
        )


def submit_argv(spec: Mapping[str, Any], master: str = "local[2]", conf: Mapping[str, str] | None = None) -> list[str]:
    extra = [arg for name, value in (conf or {}).items() for arg in ("--conf", f"{name}={value}")]
    return [
        os.path.join(SPARK_HOME, "bin", "spark-submit"),
        "--master",
        master,
        "--driver-memory",
        "768m",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.ui.showConsoleProgress=false",
        "--conf",
        "spark.sql.shuffle.partitions=4",
        "--conf",
        "spark.sql.files.maxPartitionBytes=2048",  # one tiny input file per scan task, as in the host
        "--conf",
        "spark.sql.files.openCostInBytes=1024",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.driver.bindAddress=127.0.0.1",
        *extra,
        str(JOBS / "fault_job.py"),
        json.dumps(dict(spec)),
    ]


def run_submit(
    spec: Mapping[str, Any],
    options: Mapping[str, Any],
    failpoints: str = "",
    *,
    log_prefix: Path,
    master: str = "local[2]",
    kill_when: Callable[[], bool] | None = None,
    timeout: float = 400,
    conf: Mapping[str, str] | None = None,
    on_poll: Callable[[], None] | None = None,
) -> RunOutcome:
    """spark-submit the job in its own process group; SIGKILL the group as soon as ``kill_when()`` is true.

    ``conf``: more ``--conf`` settings (a standalone cluster's); ``on_poll``: called while the job runs
    (every 0.1 s), e.g. to kill one of the cluster's executors. stdout and stderr go to
    ``{log_prefix}.out`` / ``.err`` (read back for the result line and errors).
    """
    log_prefix.parent.mkdir(parents=True, exist_ok=True)
    out_path, err_path = Path(f"{log_prefix}.out"), Path(f"{log_prefix}.err")
    started = time.monotonic()
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(
            submit_argv(spec, master, conf),
            env=_env(options, failpoints),
            stdout=out,
            stderr=err,
            text=True,
            cwd=str(REPO_ROOT),
            start_new_session=True,
        )
        killed = False
        while proc.poll() is None:
            if kill_when is not None and kill_when():
                kill_group(proc)
                killed = True
                break
            if time.monotonic() - started > timeout:
                kill_group(proc)
                break
            if on_poll is not None:
                on_poll()
            time.sleep(0.1)
        kill_group(proc)  # a driver that exited leaves no Python worker behind
    seconds = time.monotonic() - started
    stdout, stderr = out_path.read_text(), err_path.read_text()
    ok = proc.returncode == 0 and not killed
    # The Python driver's own output (tracebacks included) reaches spark-submit's stdout.
    error = "" if ok else ("SIGKILL" if killed else _error_lines(stderr + "\n" + stdout))
    return RunOutcome(
        ok, "submit", seconds, result=parse_result_line(stdout), error=error, returncode=proc.returncode, killed=killed
    )


def _error_lines(stderr: str) -> str:
    """The informative part of a driver's stderr: Python tracebacks and error lines, not JVM stack frames."""
    keep = [line for line in stderr.splitlines() if not line.lstrip().startswith("at ") and "WARN" not in line]
    return "\n".join(keep)[-6000:]


def run_commit(spec: Mapping[str, Any], options: Mapping[str, Any], failpoints: str = "") -> RunOutcome:
    """The commit task in its own process (an ``exit`` failpoint ends it mid-commit)."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(JOBS / "commit_step.py"), json.dumps(dict(spec))],
        env=_env(options, failpoints),
        capture_output=True,
        text=True,
        cwd=str(REPO_ROOT),
        timeout=300,
    )
    seconds = time.monotonic() - started
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith(COMMIT_PREFIX):
            result = json.loads(line[len(COMMIT_PREFIX) :])
    ok = proc.returncode == 0 and result is not None
    error = "" if ok else _error_lines(proc.stderr)
    return RunOutcome(ok, "commit", seconds, result=result, error=error, returncode=proc.returncode)
