"""A resident Spark driver that runs the campaign's job many times (one JVM, many trials).

Starting a JVM and a SparkSession costs far more than the tiny job itself, so the
campaign keeps one session per backend run and sends it jobs as JSON lines on
stdin: ``{"spec": …, "options": …, "failpoints": "…", "run_id": "…"}``. Each
answer is one stdout line ``FAULT_HOST {"ok": …, "result" | "error": …}``.

Failpoints reach the executors through ``armed_daemon.py`` (this session's
``spark.python.daemon.module``): before each job the host writes the run's spec
to the file named by ``CKPT_FAULT_ARM_FILE`` and every Python worker re-arms from
it before each task. The same spec is armed in this driver too, for the
driver-side ``raise`` failpoints (``store.begin_epoch.*``); ``exit`` failpoints of
the driver are run with spark-submit instead, since they end this process.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))

from pyspark.sql import SparkSession

from airflow_ckpt_provider import failpoints
from tests.faults.jobs.armed_daemon import ARM_FILE_ENV
from tests.faults.jobs.fault_job import run_job

REPLY_PREFIX = "FAULT_HOST "


def _error_text(exc: BaseException) -> str:
    parts = [f"{type(exc).__name__}: {exc}"]
    java = getattr(exc, "java_exception", None)
    if java is not None:
        parts.append(str(java))
    text = "\n".join(parts)
    # Keep the informative head and the tail (where Python worker tracebacks end).
    return text if len(text) < 6000 else text[:3000] + "\n…\n" + text[-3000:]


def handle(spark: SparkSession, command: dict[str, Any]) -> dict[str, Any]:
    spec_failpoints = str(command.get("failpoints") or "")
    arm_file = os.environ[ARM_FILE_ENV]
    with open(arm_file + ".tmp", "w") as handle:
        json.dump({"run_id": command.get("run_id") or str(time.monotonic()), "failpoints": spec_failpoints}, handle)
    os.replace(arm_file + ".tmp", arm_file)  # workers never read a half-written spec
    os.environ[failpoints.ENV_VAR] = spec_failpoints
    failpoints.reload_from_env()
    started = time.monotonic()
    try:
        result = run_job(spark, command["spec"], command.get("options") or {})
        return {"ok": True, "result": result, "seconds": time.monotonic() - started}
    except Exception as exc:
        return {
            "ok": False,
            "error": _error_text(exc),
            "error_type": type(exc).__name__,
            "traceback": traceback.format_exc()[-3000:],
            "seconds": time.monotonic() - started,
        }
    finally:
        os.environ.pop(failpoints.ENV_VAR, None)
        failpoints.disable_all()


def main() -> int:
    os.environ.setdefault(ARM_FILE_ENV, os.path.join(tempfile.gettempdir(), f"ckpt-fault-arm-{os.getpid()}.json"))
    spark = (
        SparkSession.builder.master(os.environ.get("FAULT_HOST_MASTER", "local[2]"))
        .appName("ckpt-fault-host")
        .config("spark.driver.memory", "768m")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.python.daemon.module", "tests.faults.jobs.armed_daemon")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    print(REPLY_PREFIX + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = handle(spark, json.loads(line))
        print(REPLY_PREFIX + json.dumps(reply, default=str), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
