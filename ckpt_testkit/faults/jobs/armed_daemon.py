"""PySpark's worker daemon, with failpoints armed per task from a file (``spark.python.daemon.module``).

The resident Spark host runs many jobs in one session, each with its own
failpoints. Python workers are reused across jobs and read ``CKPT_FAILPOINTS``
only at import, so before every task this daemon's workers re-read the file named
by ``CKPT_FAULT_ARM_FILE`` (``{"run_id": …, "failpoints": …}``, written by the
host before each job) and reload the registry when the run changed, once the
task has arrived (a reused worker waits for it, maybe across runs): every
task of a run sees that run's failpoints, hit counters restart at zero per run
and worker, and nothing of an earlier run can fire.

The daemon also imports the task's modules once before forking, so each forked
worker starts without paying for pyarrow, boto3 and this package again.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pyspark.daemon as spark_daemon
from pyspark.worker import main as worker_main

from airflow_ckpt_provider import failpoints

ARM_FILE_ENV = "CKPT_FAULT_ARM_FILE"
_armed_run: str | None = None


def _arm() -> None:
    global _armed_run
    path = os.environ.get(ARM_FILE_ENV)
    if not path:
        return
    try:
        with open(path) as handle:
            armed = json.load(handle)
    except (OSError, ValueError):
        armed = {"run_id": None, "failpoints": ""}  # never keep an earlier run's failpoints
    run_id = armed.get("run_id")
    if run_id != _armed_run or run_id is None:
        os.environ[failpoints.ENV_VAR] = str(armed.get("failpoints") or "")
        failpoints.reload_from_env()
        _armed_run = run_id
    with open(path + ".log", "a") as log:  # which worker ran which run's task, for post-mortems
        log.write(f"{os.getpid()} {run_id} {armed.get('failpoints')!r}\n")


def armed_worker_main(infile: Any, outfile: Any) -> None:
    # A reused worker comes back here as soon as its last task ends and may wait minutes for the next,
    # which can belong to a later run: arm once the task has arrived (peek blocks for its first byte
    # without consuming it), not when the wait begins. Armed at the wait's start, a worker reused from
    # an unarmed run ran the next run's tasks unarmed (a crash "armed, never fired"), and a worker of
    # an armed run carried its failpoints into the next job.
    infile.peek(1)
    _arm()
    worker_main(infile, outfile)


def _preload() -> None:
    import boto3  # noqa: F401
    import pyarrow.compute
    import pyarrow.fs
    import pyarrow.parquet  # noqa: F401

    import airflow_ckpt_provider.spark.writers.arrow_task
    import airflow_ckpt_provider.store.blobs.s3  # noqa: F401


if __name__ == "__main__":
    _preload()
    spark_daemon.worker_main = armed_worker_main  # type: ignore[attr-defined]
    spark_daemon.manager()
