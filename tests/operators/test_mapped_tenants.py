"""Dynamic task mapping with CheckpointedSparkSubmitOperator: real metadata DB, real spark-submit.

Three tenants whose integer row keys overlap (every tenant's ``order_no`` starts at 0),
each a mapped instance on its default store location. Tenant B's own transformation (a
Python UDF) raises on a bad record in the first run; the same DAG run, run again, must
resume only B's remaining keys, while A and C processed everything the first time and
nothing the second. A plain Parquet reader then sees each tenant's orders exactly once.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_ckpt_provider.store import EpochStatus, open_store
from tests.cli.console import airflow_ckpt
from tests.support.airflow_harness import AirflowHarness

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.extended, pytest.mark.timeout(3000)]

DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"
TENANTS = {"a": 300, "b": 400, "c": 500}  # as in dags/tenants_dag.py
#: Tenant B's record that its UDF rejects: not in the first of its 4 hash partitions (local[1]
#: runs them in order), so the partitions before it seal and the rerun has something to skip.
BAD = "b:137"
#: Three spark-submits one after the other in one dag.test(); generous for a loaded 2-core machine.
RUN_TIMEOUT = 1500


def _orders(directory: Path) -> list[tuple[int, str]]:
    """Every (order_no, tenant) a plain Parquet reader sees under ``directory``."""
    rows: list[tuple[int, str]] = []
    for path in sorted(directory.glob("*.parquet")):
        table = pq.read_table(path, columns=["order_no", "tenant"])
        rows.extend(zip(table.column("order_no").to_pylist(), table.column("tenant").to_pylist(), strict=True))
    return sorted(rows)


def _per_tenant(harness: AirflowHarness, dag_id: str, run_id: str, task_id: str, key: str) -> dict[str, Any]:
    return {name: harness.xcom(dag_id, run_id, task_id, key, map_index=index) for index, name in enumerate(TENANTS)}


def test_mapped_tenants_each_resume_from_their_own_store(airflow_harness: AirflowHarness, tmp_path: Path) -> None:
    airflow_harness.install_dag(DAGS / "tenants_dag.py", DAGS / "tenant_job.py")
    output = tmp_path / "out"
    day = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)

    first = airflow_harness.run_dag(
        "ckpt_tenants",
        logical_date=day,
        env={"TENANTS_OUTPUT": str(output), "TENANTS_BAD_KEY": BAD},
        timeout=RUN_TIMEOUT,
    )
    assert first.state == "failed", first.output[-6000:]
    states = airflow_harness.mapped_task_instances("ckpt_tenants", first.run_id, "tenants")
    assert {i: s for i, (s, _) in states.items()} == {0: "success", 1: "failed", 2: "success"}
    assert "order 137 of tenant b is malformed" in first.output

    plans = _per_tenant(airflow_harness, "ckpt_tenants", first.run_id, "tenants", "checkpoint_plan")
    uris = {name: plan["checkpoint_uri"] for name, plan in plans.items()}
    assert len(set(uris.values())) == 3, uris  # one store per mapped instance, by default
    for index, name in enumerate(TENANTS):
        assert uris[name].endswith(f"/map_index={index}"), uris[name]
        assert plans[name]["keys_skipped"] == 0
    results = _per_tenant(airflow_harness, "ckpt_tenants", first.run_id, "tenants", "return_value")
    for name in ("a", "c"):  # all of their rows, although B (or A) processed the same order numbers
        assert results[name]["keys"] == TENANTS[name], results[name]

    stores = {name: open_store(uri) for name, uri in uris.items()}
    for index, name in enumerate(TENANTS):
        epoch = stores[name].current_epoch()
        assert epoch is not None and epoch.number == 1
        assert epoch.metadata["owner"]["map_index"] == index
    failed_epoch = stores["b"].current_epoch()
    assert failed_epoch is not None and failed_epoch.status is EpochStatus.FAILED
    done_b = set(stores["b"].get_checkpointed_keys().column(0).to_pylist())
    assert 0 < len(done_b) < TENANTS["b"] and 137 not in done_b  # progress kept up to B's bad record

    # The CLI names one mapped instance's store with --map-index, and refuses to guess without it.
    argv = ["progress", "--dag-id", "ckpt_tenants", "--task-id", "tenants", "--run-id", first.run_id, "--json"]
    progress_b = airflow_ckpt(*argv, "--map-index", "1", env=airflow_harness.env)
    assert progress_b.code == 0, progress_b.err
    assert json.loads(progress_b.out)["store_uri"] == uris["b"]
    assert json.loads(progress_b.out)["keys_done"] == len(done_b)
    unnamed = airflow_ckpt(*argv, env=airflow_harness.env)
    assert unnamed.code == 2 and "pass --map-index" in unnamed.err, unnamed.err

    # The same DAG run again, without the bad record (dag.test() clears every task instance).
    second = airflow_harness.run_dag(
        "ckpt_tenants", logical_date=day, env={"TENANTS_OUTPUT": str(output)}, timeout=RUN_TIMEOUT
    )
    assert second.run_id == first.run_id and second.state == "success", second.output[-6000:]
    plans = _per_tenant(airflow_harness, "ckpt_tenants", second.run_id, "tenants", "checkpoint_plan")
    results = _per_tenant(airflow_harness, "ckpt_tenants", second.run_id, "tenants", "return_value")
    assert {name: plan["checkpoint_uri"] for name, plan in plans.items()} == uris
    assert plans["b"]["epoch"] == 2 and plans["b"]["keys_skipped"] == len(done_b)
    assert results["b"]["keys"] == TENANTS["b"] - len(done_b)  # only B's remaining keys
    for name in ("a", "c"):  # nothing left to do: every key of their own store is done
        assert plans[name]["keys_skipped"] == TENANTS[name], plans[name]
        assert results[name]["keys"] == 0, results[name]

    commits = _per_tenant(airflow_harness, "ckpt_tenants", second.run_id, "commit", "return_value")
    for name, rows in TENANTS.items():
        assert commits[name]["checkpoint_uri"] == uris[name]
        assert commits[name]["rows_committed"] == rows, commits[name]
        assert _orders(output / name) == [(i, name) for i in range(rows)]  # exactly once

    # An unmapped clear given the mapped task's id works on every instance's store and says so.
    cleared = airflow_harness.xcom("ckpt_tenants", second.run_id, "clear_all")
    assert cleared["map_indexes"] == [0, 1, 2]
    assert [s["checkpoint_uri"] for s in cleared["stores"]] == list(uris.values())
    assert "tenants is mapped: clearing the stores of its 3 instances" in second.output
    for name, rows in TENANTS.items():  # committed output is never cleared
        assert _orders(output / name) == [(i, name) for i in range(rows)]


def test_mapped_task_group_commits_each_tenant_and_resumes_the_failed_one(
    airflow_harness: AirflowHarness, tmp_path: Path
) -> None:
    airflow_harness.install_dag(DAGS / "tenants_group_dag.py", DAGS / "tenant_job.py")
    output = tmp_path / "out"
    day = dt.datetime(2024, 5, 2, tzinfo=dt.UTC)
    dag_id = "ckpt_tenants_group"

    first = airflow_harness.run_dag(
        dag_id, logical_date=day, env={"TENANTS_OUTPUT": str(output), "TENANTS_BAD_KEY": BAD}, timeout=RUN_TIMEOUT
    )
    assert first.state == "failed", first.output[-6000:]
    submits = airflow_harness.mapped_task_instances(dag_id, first.run_id, "tenant.submit")
    commits = airflow_harness.mapped_task_instances(dag_id, first.run_id, "tenant.commit")
    assert {i: s for i, (s, _) in submits.items()} == {0: "success", 1: "failed", 2: "success"}
    assert {i: s for i, (s, _) in commits.items()} == {0: "success", 1: "upstream_failed", 2: "success"}
    plan_b = airflow_harness.xcom(dag_id, first.run_id, "tenant.submit", "checkpoint_plan", map_index=1)
    done_b = set(open_store(plan_b["checkpoint_uri"]).get_checkpointed_keys().column(0).to_pylist())
    assert 0 < len(done_b) < TENANTS["b"]
    for index, name in enumerate(TENANTS):
        if name == "b":
            continue
        result = airflow_harness.xcom(dag_id, first.run_id, "tenant.submit", map_index=index)
        commit = airflow_harness.xcom(dag_id, first.run_id, "tenant.commit", map_index=index)
        assert result["keys"] == TENANTS[name] and commit["rows_committed"] == TENANTS[name]
        assert commit["checkpoint_uri"] == result["checkpoint_uri"]  # the store of the same map index
        sensed = airflow_harness.xcom(dag_id, first.run_id, "tenant.sensor", map_index=index)
        assert sensed["checkpoint_uri"] == result["checkpoint_uri"] and sensed["keys_done"] == TENANTS[name]
        assert _orders(output / name) == [(i, name) for i in range(TENANTS[name])]

    # "Clear -> only failed": B's submit and commit run again; A and C are done.
    second = airflow_harness.run_dag(
        dag_id, logical_date=day, env={"TENANTS_OUTPUT": str(output)}, only_failed=True, timeout=RUN_TIMEOUT
    )
    assert second.run_id == first.run_id and second.state == "success", second.output[-6000:]
    epochs = {
        index: airflow_harness.xcom(dag_id, second.run_id, "tenant.submit", "checkpoint_plan", map_index=index)["epoch"]
        for index in range(3)
    }
    assert epochs == {0: 1, 1: 2, 2: 1}  # only B submitted again; A and C kept their run-1 plan and output
    plan_b = airflow_harness.xcom(dag_id, second.run_id, "tenant.submit", "checkpoint_plan", map_index=1)
    result_b = airflow_harness.xcom(dag_id, second.run_id, "tenant.submit", map_index=1)
    assert plan_b["keys_skipped"] == len(done_b) and result_b["keys"] == TENANTS["b"] - len(done_b)
    commit_b = airflow_harness.xcom(dag_id, second.run_id, "tenant.commit", map_index=1)
    # No orphan count to expect: row keys write through Spark's own writer, whose failed task
    # removes its files itself (abortTask); exactly-once below is what matters.
    assert commit_b["rows_committed"] == TENANTS["b"]
    for name, rows in TENANTS.items():
        assert _orders(output / name) == [(i, name) for i in range(rows)]  # exactly once

    # An unmapped commit given the mapped submit's id commits every instance's store and says so.
    commit_all = airflow_harness.xcom(dag_id, second.run_id, "commit_all")
    assert commit_all["map_indexes"] == [0, 1, 2] and commit_all["rows_committed"] == sum(TENANTS.values())
    assert all(s["already_committed"] for s in commit_all["stores"])  # by each group's own commit
    assert "tenant.submit is mapped: committing the stores of its 3 instances" in second.output
