"""Example DAG 1 in a real deployment, as a user plays it: no ``dag.test()``.

The four Airflow processes run as separate processes on a free port (``api-server``,
``scheduler``, ``dag-processor``, ``triggerer``), LocalExecutor, SQLite, the simple auth
manager. Everything the test does goes through the public REST API: unpause, trigger a run
with a bad record, see the Spark task's first try fail, correct the record in the Airflow
Variable the DAG reads, resume with the clear call (a run's conf cannot change on Clear),
and wait for the commit. A plain pyarrow reader then sees every event exactly once. Then a
backfill over that day and the day before (``reprocess_behavior="completed"``, made with the REST
API as ``airflow backfill create`` makes it, and run by the scheduler): Airflow clears the committed
run of the day, which replaces its output, and runs the day before for the first time. The reader
then sees each day's events once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from tests.support.airflow_harness import AirflowHarness
from tests.support.api_server import ApiServer

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(1500)]

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"
DAG_ID = "ckpt_daily_events"
EVENTS = 8_000  # 2,000 a partition: the failed partition still writes its file in several Arrow batches
PASSWORD = "deploy-admin-password"


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[tuple[ApiServer, Path]]:
    harness = AirflowHarness.create(tmp_path / "home")
    harness.install_dag(EXAMPLES / "ckpt_daily_events.py", EXAMPLES / "jobs")
    passwords = harness.home / "passwords.json"
    passwords.write_text(json.dumps({"admin": PASSWORD}))
    lake = tmp_path / "lake"
    harness.env.update(
        {
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            # Parsed once, when the dag-processor finds the file: a re-parse every 30 s (the default)
            # only costs CPU here, nothing in the DAG file changes.
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
            # The example is @daily with catchup=False: unpausing it would also start its latest
            # scheduled run (200,000 events) beside the test's own. Manual runs still run.
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "CKPT_EXAMPLE_LAKE": str(lake),
            # The api-server checks the task tokens the scheduler's workers carry: one secret for all.
            "AIRFLOW__API_AUTH__JWT_SECRET": "deployment-test-jwt-secret",
        }
    )
    server = ApiServer.start(harness)
    harness.env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = f"{server.base_url}/execution/"
    others: list[subprocess.Popen[bytes]] = []
    try:
        for component in ("scheduler", "dag-processor", "triggerer"):
            with open(harness.home / f"{component}.log", "wb") as log:
                others.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "airflow", component],
                        env=harness.env,
                        cwd=harness.home,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        yield server, lake / "daily_events"
    finally:
        for proc in others:  # only the processes this fixture started, by their handle
            proc.terminate()
        for proc in others:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        server.stop()


def _token(server: ApiServer) -> str:
    response = httpx.post(f"{server.base_url}/auth/token", json={"username": "admin", "password": PASSWORD}, timeout=60)
    assert response.status_code == 201, response.text
    return str(response.json()["access_token"])


def _wait(what: str, check: Any, timeout: float, logs: Path) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(2)
    tails = "\n".join(
        f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(logs.glob("*.log")) if p.is_file()
    )
    raise AssertionError(f"timed out waiting for {what}\n{tails}")


def test_fail_correct_clear_commit_through_the_rest_api(deployment: tuple[ApiServer, Path]) -> None:
    server, lake = deployment
    home = server.home
    api = httpx.Client(
        base_url=f"{server.base_url}/api/v2", headers={"Authorization": f"Bearer {_token(server)}"}, timeout=60
    )
    _wait("the DAG to be parsed", lambda: api.get(f"/dags/{DAG_ID}").status_code == 200, 600, home)
    assert api.patch(f"/dags/{DAG_ID}", json={"is_paused": False}).status_code == 200
    conf = {"events": EVENTS, "partitions": 4, "fail_partition": 2}
    created = api.post(f"/dags/{DAG_ID}/dagRuns", json={"logical_date": "2024-11-05T00:00:00Z", "conf": conf})
    assert created.status_code == 200, created.text
    run_id = created.json()["dag_run_id"]

    def spark_task() -> dict[str, Any]:
        return dict(api.get(f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/process_events").json())

    first = _wait(
        "the first try to fail",
        lambda: (ti := spark_task()).get("state") in ("up_for_retry", "failed") and ti,
        900,
        home,
    )
    assert first["try_number"] == 1, first

    # The user reads the error in the task log, corrects the record, and clears the task.
    log = api.get(f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/process_events/logs/1", params={"full_content": True})
    found = next(
        (word for word in log.text.replace('"', " ").split() if word.isdigit() and len(word) == 14),
        None,
    )
    assert found is not None and "ckpt_daily_events_corrections" in log.text, log.text[-3000:]
    variable = {"key": "ckpt_daily_events_corrections", "value": json.dumps({found: "0.00"})}
    assert api.post("/variables", json=variable).status_code == 201
    cleared = api.post(
        f"/dags/{DAG_ID}/clearTaskInstances",
        json={"dag_run_id": run_id, "task_ids": ["process_events"], "dry_run": False, "only_failed": False},
    )
    assert cleared.status_code == 200, cleared.text

    run = _wait(
        "the run to end",
        lambda: (r := api.get(f"/dags/{DAG_ID}/dagRuns/{run_id}").json()).get("state") in ("success", "failed") and r,
        900,
        home,
    )
    assert run["state"] == "success", run
    commit = api.get(f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/commit/xcomEntries/return_value").json()
    summary = commit["value"] if isinstance(commit["value"], dict) else json.loads(commit["value"])
    assert summary["rows_committed"] == EVENTS and summary["unknown_files"] == 0
    plan_entry = api.get(
        f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/process_events/xcomEntries/checkpoint_plan"
    ).json()
    plan = plan_entry["value"] if isinstance(plan_entry["value"], dict) else json.loads(plan_entry["value"])
    assert plan["keys_skipped"] > 0  # the cleared try resumed

    runs = api.get(f"/dags/{DAG_ID}/dagRuns").json()
    assert [r["dag_run_id"] for r in runs["dag_runs"]] == [run_id]  # the scheduler started no run of its own

    table = pq.read_table(lake / "day=2024-11-05", columns=["event_id", "amount"]).to_pydict()
    assert len(table["event_id"]) == EVENTS and len(set(table["event_id"])) == EVENTS  # exactly once
    amounts = dict(zip(table["event_id"], table["amount"], strict=True))
    assert amounts[int(found)] == 0.0
    committed = set((lake / "day=2024-11-05").glob("*.parquet"))
    assert summary["files_committed"] == len(committed)

    # A backfill of 2024-11-04..05 that reprocesses completed runs: the day above is cleared (the
    # same run id) and run again, the day before runs for the first time; the scheduler runs both.
    created = api.post(
        "/backfills",
        json={
            "dag_id": DAG_ID,
            "from_date": "2024-11-04T00:00:00Z",
            "to_date": "2024-11-05T00:00:00Z",
            "reprocess_behavior": "completed",
            "max_active_runs": 2,
            "dag_run_conf": {"events": EVENTS, "partitions": 4},
        },
    )
    assert created.status_code == 200, created.text

    def backfill_runs() -> dict[str, dict[str, Any]]:
        found = api.get(f"/dags/{DAG_ID}/dagRuns").json()["dag_runs"]
        return {r["logical_date"][:10]: r for r in found if r["run_type"] == "backfill"}

    runs_by_day = _wait(
        "the backfill's runs to end",
        lambda: len(r := backfill_runs()) == 2 and all(x["state"] in ("success", "failed") for x in r.values()) and r,
        900,
        home,
    )
    assert {day: r["state"] for day, r in runs_by_day.items()} == {"2024-11-04": "success", "2024-11-05": "success"}
    assert runs_by_day["2024-11-05"]["dag_run_id"] == run_id  # Airflow cleared the run, as Clear does

    def xcom(run: str, task: str, key: str) -> dict[str, Any]:
        entry = api.get(f"/dags/{DAG_ID}/dagRuns/{run}/taskInstances/{task}/xcomEntries/{key}").json()
        return entry["value"] if isinstance(entry["value"], dict) else dict(json.loads(entry["value"]))

    for day, action in (("2024-11-05", "replace"), ("2024-11-04", "first")):
        run = runs_by_day[day]["dag_run_id"]
        plan = xcom(run, "process_events", "checkpoint_plan")
        assert plan["rerun"]["action"] == action and plan["keys_skipped"] == 0, plan
        assert plan["checkpoint_uri"].endswith(f"/ckpt_daily_events/process_events/date={day}")
        commit = xcom(run, "commit", "return_value")
        assert commit["rows_committed"] == EVENTS and commit["unknown_files"] == 0, commit
        assert commit["files_replaced"] == (len(committed) if action == "replace" else 0), commit
        table = pq.read_table(lake / f"day={day}", columns=["event_id", "amount"]).to_pydict()
        assert len(table["event_id"]) == EVENTS and len(set(table["event_id"])) == EVENTS  # exactly once
        if action == "replace":  # the run again read the correction the user made
            assert dict(zip(table["event_id"], table["amount"], strict=True))[int(found)] == 0.0
    assert not committed & set((lake / "day=2024-11-05").glob("*.parquet"))  # replaced, not appended
