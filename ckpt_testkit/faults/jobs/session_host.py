"""A resident Spark driver that runs the campaign's job many times (one JVM, many trials).

Starting a JVM and a SparkSession costs far more than the tiny job itself, so the
campaign keeps one session per backend run and sends it jobs as JSON lines on
stdin: ``{"spec": …, "options": …, "failpoints": "…", "run_id": "…"}``. Each
answer is one stdout line ``FAULT_HOST {"ok": …, "result" | "error": …}``.

Failpoints reach the executors through ``armed_daemon.py`` (this session's
``spark.python.daemon.module``): before each job the host writes the run's spec
to the file named by ``CKPT_FAULT_ARM_FILE`` and every Python worker re-arms from
it before each task.

Python workers of one job can outlive it: a worker of a failed job may still
run its killed task, and workers of a job with failpoints were seen firing them
after the job had returned, reported as the next job's failure. So every job
that had crash failpoints armed or failed is followed by a move to a fresh worker pool
(PySpark keys its pools by the workers' environment, so a new
``CKPT_FAULT_POOL`` value is a new pool), and the old pool's processes — this
host's descendants — are killed by pid. Unarmed jobs that succeed share a pool.

The same spec is armed in this driver too, for the driver-side ``raise``
failpoints (``store.begin_epoch.*``); ``exit`` failpoints of the driver are run
with spark-submit instead, since they end this process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))

from pyspark.sql import SparkSession

from airflow_ckpt_provider import failpoints
from ckpt_testkit.faults.jobs.armed_daemon import ARM_FILE_ENV
from ckpt_testkit.faults.jobs.fault_job import run_job
from ckpt_testkit.spark_events import event_log_confs

REPLY_PREFIX = "FAULT_HOST "
POOL_ENV = "CKPT_FAULT_POOL"
DAEMON_MODULE = "ckpt_testkit.faults.jobs.armed_daemon"


def _descendants_running(marker: str) -> list[int]:
    """Pids of this process's descendants whose command line starts with ``marker``."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                commands[int(entry)] = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
    me = os.getpid()

    def descends(pid: int) -> bool:
        for _ in range(64):
            pid = parents.get(pid, 0)
            if pid == me:
                return True
            if pid <= 1:
                return False
        return False

    return [pid for pid, command in commands.items() if command.startswith(marker) and descends(pid)]


class WorkerPools:
    """Moves the session to a fresh Python worker pool after an armed or failed job (see the module doc)."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.number = 0
        self.dirty = False

    def fresh_if_dirty(self) -> None:
        if not self.dirty:
            return
        tracker = self.spark.sparkContext.statusTracker()
        deadline = time.monotonic() + 30
        while tracker.getActiveStageIds() and time.monotonic() < deadline:
            time.sleep(0.1)
        # Daemon and workers (forks of it) alike; never the JVM, whose command line names the module too.
        old = _descendants_running(f"{sys.executable} -m {DAEMON_MODULE} ")
        self.number += 1
        self.spark.sparkContext.environment[POOL_ENV] = str(self.number)
        for pid in old:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.dirty = False


def _error_text(exc: BaseException) -> str:
    parts = [f"{type(exc).__name__}: {exc}"]
    java = getattr(exc, "java_exception", None)
    if java is not None:
        parts.append(str(java))
    text = "\n".join(parts)
    # Keep the informative head and the tail (where Python worker tracebacks end).
    return text if len(text) < 6000 else text[:3000] + "\n…\n" + text[-3000:]


def handle(spark: SparkSession, pools: WorkerPools, command: dict[str, Any]) -> dict[str, Any]:
    began = time.monotonic()
    pools.fresh_if_dirty()
    switch_seconds = time.monotonic() - began
    spec_failpoints = str(command.get("failpoints") or "")
    arm_file = os.environ[ARM_FILE_ENV]
    with open(arm_file + ".tmp", "w") as handle:
        json.dump({"run_id": command.get("run_id") or str(time.monotonic()), "failpoints": spec_failpoints}, handle)
    os.replace(arm_file + ".tmp", arm_file)  # workers never read a half-written spec
    os.environ[failpoints.ENV_VAR] = spec_failpoints
    failpoints.reload_from_env()
    started = time.monotonic()
    # Workers armed to crash must not serve the next job (a sleep failpoint only slows it: harmless).
    pools.dirty = "=raise" in spec_failpoints or "=exit" in spec_failpoints
    try:
        result = run_job(spark, command["spec"], command.get("options") or {})
        return {"ok": True, "result": result, "seconds": time.monotonic() - started, "pool_seconds": switch_seconds}
    except Exception as exc:
        pools.dirty = True
        return {
            "ok": False,
            "error": _error_text(exc),
            "error_type": type(exc).__name__,
            "traceback": traceback.format_exc()[-3000:],
            "seconds": time.monotonic() - started,
            "pool_seconds": switch_seconds,
        }
    finally:
        os.environ.pop(failpoints.ENV_VAR, None)
        failpoints.disable_all()


def main() -> int:
    os.environ.setdefault(ARM_FILE_ENV, os.path.join(tempfile.gettempdir(), f"ckpt-fault-arm-{os.getpid()}.json"))
    builder = SparkSession.builder
    if os.environ.get("FAULT_HOST_EVENT_LOG"):
        # Spark's own record of which tasks finished, for the campaign's progress oracle.
        for name, value in event_log_confs(Path(os.environ["FAULT_HOST_EVENT_LOG"])).items():
            builder = builder.config(name, value)
    spark = (
        builder.master(os.environ.get("FAULT_HOST_MASTER", "local[2]"))
        .appName("ckpt-fault-host")
        .config("spark.driver.memory", "768m")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        # One tiny input file per scan task (else Spark packs all 8 into 2 tasks): more tasks to crash.
        .config("spark.sql.files.maxPartitionBytes", "2048")
        .config("spark.sql.files.openCostInBytes", "1024")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.python.daemon.module", DAEMON_MODULE)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    print(REPLY_PREFIX + json.dumps({"ready": True}), flush=True)
    pools = WorkerPools(spark)
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = handle(spark, pools, json.loads(line))
        print(REPLY_PREFIX + json.dumps(reply, default=str), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
