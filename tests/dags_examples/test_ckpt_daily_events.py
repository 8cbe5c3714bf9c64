"""Example DAG 1 (ckpt_daily_events) and its CheckpointedJob: a failure and its fix as a user plays them.

Real metadata DB, real spark-submit on local[2], the embedded default store (no ``checkpoint_uri``,
no ``[ckpt] base_uri``: ``$AIRFLOW_HOME/checkpoints``), as a LocalExecutor user has it; the second
case runs with ``[core] executor = CeleryExecutor`` configured, as ``airflow dags test`` on a Celery
deployment's machine does: the task runs in the test's own process, so the local store is accepted
(hooks/store_visibility.py). The first try meets a
bad record: the job's own UDF raises on it until the record is corrected in the Airflow
Variable the DAG reads at every try (the test sets it, as a user would in Admin > Variables,
while the task waits for its retry), or, as the second case, the writer of that partition
dies half-way through its file on the first try only (like a killed executor), leaving an
orphan that only the commit can remove. Either way Airflow's retry resumes by itself: the
run's params never change (a Clear could not change them either).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_ckpt_provider.store import EpochStatus, open_store
from airflow_ckpt_provider.store.deletion_guard import canonical_uri
from tests.support.airflow_harness import AirflowHarness

# Up to three spark-submits in one dag.test() (a try, maybe a second before the correction lands, the resume).
pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(2400)]

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"
EVENTS = 20_000
CORRECTIONS = "ckpt_daily_events_corrections"
BAD_RECORD = re.compile(r"event (\d+) has the amount 'N/A', not a number\. Correct it in the Airflow Variable")


def _event_ids(directory: Path) -> list[int]:
    return sorted(
        i for p in directory.rglob("*.parquet") for i in pq.read_table(p, columns=["event_id"]).column(0).to_pylist()
    )


@pytest.mark.parametrize("fail_in", ["udf", "writer"])
def test_the_retry_resumes_once_the_record_is_corrected_or_the_crash_passed(
    airflow_harness: AirflowHarness, tmp_path: Path, fail_in: str
) -> None:
    airflow_harness.install_dag(EXAMPLES / "ckpt_daily_events.py", EXAMPLES / "jobs")
    # A day per case: the default location ($AIRFLOW_HOME/checkpoints/{dag}/{task}/date={day}) is shared by
    # every run of the same DAG on the same day in this session's Airflow.
    env = {"CKPT_EXAMPLE_LAKE": str(tmp_path / "lake")}
    if fail_in == "writer":
        env["AIRFLOW__CORE__EXECUTOR"] = "CeleryExecutor"  # dags test runs the task here all the same
    day = dt.datetime(2024, 10, 2 if fail_in == "udf" else 3, tzinfo=dt.UTC)
    output = tmp_path / "lake" / "daily_events" / f"day={day:%Y-%m-%d}"
    corrected: list[str] = []

    def correct_the_record(proc: subprocess.Popen[str], log: Path) -> None:
        """Once the first try failed on the record, correct it where the DAG reads corrections."""
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            found = BAD_RECORD.search(log.read_text(errors="replace"))
            if found:
                value = json.dumps({found.group(1): "0.00"})
                done = airflow_harness.airflow("variables", "set", CORRECTIONS, value, env=env)
                assert done.returncode == 0, done.stderr[-2000:]
                corrected.append(found.group(1))
                return
            time.sleep(0.5)

    try:
        run = airflow_harness.run_dag(
            "ckpt_daily_events",
            logical_date=day,
            conf={"events": EVENTS, "partitions": 4, "fail_in": fail_in, "fail_partition": 2},
            env=env,
            while_running=correct_the_record if fail_in == "udf" else None,
            timeout=2000,
        )
    finally:
        airflow_harness.airflow("variables", "delete", CORRECTIONS, env=env)
    assert run.state == "success", run.output[-4000:]
    state, tries = airflow_harness.task_instances("ckpt_daily_events", run.run_id)["process_events"]
    assert state == "success" and tries >= 2  # the first try failed, a retry finished the job
    if fail_in == "udf":
        assert len(corrected) == 1, "the job's own UDF failed the first try and named the record"

    plan = airflow_harness.xcom("ckpt_daily_events", run.run_id, "process_events", "checkpoint_plan")
    default = airflow_harness.default_store_uri("ckpt_daily_events", "process_events", run.run_id)
    assert plan["checkpoint_uri"] == canonical_uri(default)  # the embedded default, on this host's disk
    store = open_store(plan["checkpoint_uri"])
    epochs = store.epochs.all()
    assert epochs[0].status is EpochStatus.FAILED and epochs[-1].number == plan["epoch"] == tries
    # The retry resumed (a try that failed again on the record sealed empty checkpoints for the done partitions).
    assert 0 < plan["keys_skipped"] < EVENTS and plan["checkpoints_skipped"] > 0
    result = airflow_harness.xcom("ckpt_daily_events", run.run_id, "process_events")
    assert result["keys"] == EVENTS - plan["keys_skipped"]  # only the rest
    commit = airflow_harness.xcom("ckpt_daily_events", run.run_id, "commit")
    assert (commit["rows_committed"], commit["unknown_files"]) == (EVENTS, 0)
    if fail_in == "writer":
        assert commit["orphans_deleted"] >= 1  # the half-written file of the crashed writer
    ids = _event_ids(output)
    assert len(ids) == EVENTS and len(set(ids)) == EVENTS  # each key's row exactly once
    if fail_in == "udf":
        table = pq.read_table(output, columns=["event_id", "amount"]).to_pydict()
        amounts = dict(zip(table["event_id"], table["amount"], strict=True))
        assert amounts[int(corrected[0])] == 0.0  # the corrected record, as corrected
    assert store.inspection.list_checkpoints() == []
