"""Store credentials reach the Spark job, and nowhere else an operator or a user can read.

A DAG run against an S3 store (SeaweedFS, started by the suite) whose ``aws`` connection
holds the keys. While it runs, the process list is sampled; afterwards the task logs
(the run's output) and every metadata-DB table a task writes to are scanned. The job
must have used the keys (it sealed checkpoints in the S3 store), so the scan is not
vacuous.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.store import open_store
from tests.support.airflow_harness import AirflowHarness

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.s3]

DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"
TABLES = (
    "xcom",
    "rendered_task_instance_fields",
    "task_state_store",
    "trigger",
    "task_instance",
    "task_instance_history",
    "dag_run",
    "serialized_dag",
    "log",
)


def test_secret_never_shows(airflow_harness: AirflowHarness, s3_server: Any, s3_bucket: str, tmp_path: Path) -> None:
    airflow_harness.install_dag(DAGS / "handoff_dag.py", DAGS / "handoff_job.py")
    secret = s3_server.secret_key
    connection = {
        "conn_type": "aws",
        "login": s3_server.access_key,
        "password": secret,
        "extra": {"endpoint_url": s3_server.endpoint_url, "region_name": s3_server.region},
    }
    store_uri = f"s3://{s3_bucket}/ckpt/handoff"
    env = {
        "HANDOFF_OUTPUT": str(tmp_path / "out"),
        "HANDOFF_STORE": store_uri,
        "HANDOFF_AWS_CONN": "ckpt_s3",
        "AIRFLOW_CONN_CKPT_S3": json.dumps(connection),
    }
    command_lines: list[str] = []

    def sample_process_list(proc: subprocess.Popen[str], output: Path) -> None:
        while proc.poll() is None:
            listing = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=False).stdout
            command_lines.extend(line for line in listing.splitlines() if "spark" in line.lower())
            time.sleep(0.2)

    run = airflow_harness.run_dag(
        "ckpt_handoff",
        logical_date=dt.datetime(2024, 5, 1, tzinfo=dt.UTC),
        env=env,
        while_running=sample_process_list,
    )
    assert run.state == "success", run.output[-4000:]

    # The job reached the store with the keys: its checkpoints were sealed, then committed.
    store = open_store(store_uri, **s3_server.options())
    assert store.inspection.progress().committed
    assert airflow_harness.xcom("ckpt_handoff", run.run_id, "commit")["rows_committed"] == 40

    # We did watch the real spark-submit, with the store conf on its command line ...
    submits = [line for line in command_lines if "spark.ckpt.store.uri=" + store_uri in line]
    assert submits, f"no spark-submit process was seen while the DAG ran: {sorted(set(command_lines))[:20]}"
    # The submit ran its Python tasks through the package's worker daemon (a default of the operator).
    assert all("spark.python.daemon.module=airflow_ckpt_provider.spark.worker_daemon" in line for line in submits)
    assert [line for line in command_lines if "-m airflow_ckpt_provider.spark.worker_daemon" in line]
    # ... and no secret on any command line, in the task logs, or in the metadata DB.
    assert not [line for line in command_lines if secret in line]
    assert secret not in run.output
    assert "Spark-Submit cmd" in run.output
    leaks = [row for row in airflow_harness.dump_tables(*TABLES) if secret in row]
    assert leaks == []
