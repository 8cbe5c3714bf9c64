"""Dynamic task mapping and mapped task groups with our submit operator: real metadata DB, real spark-submit.

Two tenants whose integer row keys overlap (every tenant's ``order_no`` starts at 0), each
a mapped instance on its default store location, once as a mapped task (``tenants``) and
once as a mapped task group (``tenant``: submit -> sensor -> commit), in one DAG
(dags/tenants_dag.py). Tenant B's own transformation (a Python UDF) raises on a bad record
in the first run; "Clear -> only failed" of the same DAG run must resume only B's remaining
keys, while A processed everything the first time (and, in the group, committed it while B
failed). A plain Parquet reader then sees each tenant's orders exactly once.

Both tests inspect the same two DAG runs (a module fixture; every spark-submit costs a JVM
on a 2-core CI machine): what the first run left behind is recorded before the second one.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_ckpt_provider.store import Epoch, EpochStatus, open_store
from tests.cli.console import Outcome, airflow_ckpt
from tests.support.airflow_harness import AirflowHarness, DagRunOutcome

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(3000)]

DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"
DAG_ID = "ckpt_tenants"
TENANTS = {"a": 300, "b": 400}  # as in dags/tenants_dag.py
#: Tenant B's record that its UDF rejects: not in the first of its 4 hash partitions (local[1]
#: runs them in order), so the partitions before it seal and the rerun has something to skip.
BAD = "b:137"
#: Four spark-submits one after the other in one dag.test(); generous for a loaded 2-core machine.
RUN_TIMEOUT = 1500


def _orders(directory: Path) -> list[tuple[int, str]]:
    """Every (order_no, tenant) a plain Parquet reader sees under ``directory``."""
    rows: list[tuple[int, str]] = []
    for path in sorted(directory.glob("*.parquet")):
        table = pq.read_table(path, columns=["order_no", "tenant"])
        rows.extend(zip(table.column("order_no").to_pylist(), table.column("tenant").to_pylist(), strict=True))
    return sorted(rows)


def _done_keys(uri: str) -> set[int]:
    return set(open_store(uri).get_checkpointed_keys().column(0).to_pylist())


@dataclass
class FirstRun:
    """What the failed first run left behind, recorded before the second run changes it."""

    outcome: DagRunOutcome
    states: dict[str, dict[int, str | None]]  # task id -> map index -> state
    xcoms: dict[tuple[str, str, int], Any]  # (task id, key, map index) -> value
    epochs: dict[str, Epoch | None]  # tenant -> current epoch of the mapped task's store
    done_b: set[int]  # B's sealed keys in the mapped task's store
    group_done_b: set[int]  # B's sealed keys in the group's store
    group_orders: dict[str, list[tuple[int, str]]]  # the group's committed output, per tenant
    progress_b: Outcome
    progress_unnamed: Outcome


@dataclass
class TenantRuns:
    output: Path
    first: FirstRun
    second: DagRunOutcome


def _record_first_run(harness: AirflowHarness, first: DagRunOutcome, output: Path) -> FirstRun:
    tasks = ("tenants", "commit", "tenant.submit", "tenant.sensor", "tenant.commit")
    states = {
        task: {i: s for i, (s, _) in harness.mapped_task_instances(DAG_ID, first.run_id, task).items()}
        for task in tasks
    }
    xcoms = {
        (task, key, index): harness.xcom(DAG_ID, first.run_id, task, key, map_index=index)
        for task in tasks
        for key in ("return_value", "checkpoint_plan")
        for index in range(len(TENANTS))
    }
    uris = {
        name: (xcoms[("tenants", "checkpoint_plan", i)] or {}).get("checkpoint_uri") for i, name in enumerate(TENANTS)
    }
    group_b = (xcoms[("tenant.submit", "checkpoint_plan", 1)] or {}).get("checkpoint_uri")
    argv = ["progress", "--dag-id", DAG_ID, "--task-id", "tenants", "--run-id", first.run_id, "--json"]
    return FirstRun(
        outcome=first,
        states=states,
        xcoms=xcoms,
        epochs={name: open_store(uri).current_epoch() if uri else None for name, uri in uris.items()},
        done_b=_done_keys(uris["b"]) if uris["b"] else set(),
        group_done_b=_done_keys(group_b) if group_b else set(),
        group_orders={name: _orders(output / "group" / name) for name in TENANTS},
        # The CLI names one mapped instance's store with --map-index, and refuses to guess without it.
        # Generous timeouts: the CLI imports Airflow, which took over 120 s on a loaded 2-core machine.
        progress_b=airflow_ckpt(*argv, "--map-index", "1", env=harness.env, timeout=600),
        progress_unnamed=airflow_ckpt(*argv, env=harness.env, timeout=600),
    )


@pytest.fixture(scope="module")
def tenant_runs(airflow_harness: AirflowHarness, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TenantRuns]:
    """The DAG run with B's bad record, then the same run cleared "only failed" without it."""
    airflow_harness.install_dag(DAGS / "tenants_dag.py", DAGS / "tenant_job.py")
    output = tmp_path_factory.mktemp("tenants") / "out"
    day = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    outcome = airflow_harness.run_dag(
        DAG_ID, logical_date=day, env={"TENANTS_OUTPUT": str(output), "TENANTS_BAD_KEY": BAD}, timeout=RUN_TIMEOUT
    )
    first = _record_first_run(airflow_harness, outcome, output)
    # "Clear -> only failed": B's submits (and everything downstream of them) run again; A's are done.
    second = airflow_harness.run_dag(
        DAG_ID, logical_date=day, env={"TENANTS_OUTPUT": str(output)}, only_failed=True, timeout=RUN_TIMEOUT
    )
    yield TenantRuns(output, first, second)


def test_mapped_tenants_each_resume_from_their_own_store(
    airflow_harness: AirflowHarness, tenant_runs: TenantRuns
) -> None:
    first, second, output = tenant_runs.first, tenant_runs.second, tenant_runs.output
    assert first.outcome.state == "failed", first.outcome.output[-6000:]
    assert first.states["tenants"] == {0: "success", 1: "failed"}
    assert "order 137 of tenant b is malformed" in first.outcome.output

    plans = {name: first.xcoms[("tenants", "checkpoint_plan", i)] for i, name in enumerate(TENANTS)}
    uris = {name: plan["checkpoint_uri"] for name, plan in plans.items()}
    assert len(set(uris.values())) == len(TENANTS), uris  # one store per mapped instance, by default
    for index, name in enumerate(TENANTS):
        assert uris[name].endswith(f"/map_index={index}"), uris[name]
        assert plans[name]["keys_skipped"] == 0
    result_a = first.xcoms[("tenants", "return_value", 0)]
    assert result_a["keys"] == TENANTS["a"], result_a  # all of A's rows, although B processed the same numbers

    for index, name in enumerate(TENANTS):
        epoch = first.epochs[name]
        assert epoch is not None and epoch.number == 1
        assert epoch.metadata["owner"]["map_index"] == index
    failed_epoch = first.epochs["b"]
    assert failed_epoch is not None and failed_epoch.status is EpochStatus.FAILED
    done_b = first.done_b
    assert 0 < len(done_b) < TENANTS["b"] and 137 not in done_b  # progress kept up to B's bad record

    assert first.progress_b.code == 0, first.progress_b.err
    assert json.loads(first.progress_b.out)["store_uri"] == uris["b"]
    assert json.loads(first.progress_b.out)["keys_done"] == len(done_b)
    unnamed = first.progress_unnamed
    assert unnamed.code == 2 and "pass --map-index" in unnamed.err, unnamed.err

    # The same DAG run again, without the bad record: B resumes from its own store, A's was done.
    assert second.run_id == first.outcome.run_id and second.state == "success", second.output[-6000:]
    plans = {
        name: airflow_harness.xcom(DAG_ID, second.run_id, "tenants", "checkpoint_plan", map_index=i)
        for i, name in enumerate(TENANTS)
    }
    assert {name: plan["checkpoint_uri"] for name, plan in plans.items()} == uris
    assert plans["a"]["epoch"] == 1  # not submitted again
    assert plans["b"]["epoch"] == 2 and plans["b"]["keys_skipped"] == len(done_b)
    result_b = airflow_harness.xcom(DAG_ID, second.run_id, "tenants", map_index=1)
    assert result_b["keys"] == TENANTS["b"] - len(done_b)  # only B's remaining keys

    for index, (name, rows) in enumerate(TENANTS.items()):
        committed = airflow_harness.xcom(DAG_ID, second.run_id, "commit", map_index=index)
        assert committed["checkpoint_uri"] == uris[name]
        assert committed["rows_committed"] == rows, committed
        assert _orders(output / name) == [(i, name) for i in range(rows)]  # exactly once

    # An unmapped clear given the mapped task's id works on every instance's store and says so.
    cleared = airflow_harness.xcom(DAG_ID, second.run_id, "clear_all")
    assert cleared["map_indexes"] == [0, 1]
    assert [s["checkpoint_uri"] for s in cleared["stores"]] == list(uris.values())
    assert "tenants is mapped: clearing the stores of its 2 instances" in second.output
    for name, rows in TENANTS.items():  # committed output is never cleared
        assert _orders(output / name) == [(i, name) for i in range(rows)]


def test_mapped_task_group_commits_each_tenant_and_resumes_the_failed_one(
    airflow_harness: AirflowHarness, tenant_runs: TenantRuns
) -> None:
    first, second, output = tenant_runs.first, tenant_runs.second, tenant_runs.output
    assert first.outcome.state == "failed", first.outcome.output[-6000:]
    assert first.states["tenant.submit"] == {0: "success", 1: "failed"}
    assert first.states["tenant.commit"] == {0: "success", 1: "upstream_failed"}
    done_b = first.group_done_b
    assert 0 < len(done_b) < TENANTS["b"]
    # A's group committed in the first run, while B's failed.
    result = first.xcoms[("tenant.submit", "return_value", 0)]
    commit = first.xcoms[("tenant.commit", "return_value", 0)]
    assert result["keys"] == TENANTS["a"] and commit["rows_committed"] == TENANTS["a"]
    assert commit["checkpoint_uri"] == result["checkpoint_uri"]  # the store of the same map index
    assert result["checkpoint_uri"] != first.xcoms[("tenant.submit", "checkpoint_plan", 1)]["checkpoint_uri"]
    sensed = first.xcoms[("tenant.sensor", "return_value", 0)]
    assert sensed["checkpoint_uri"] == result["checkpoint_uri"] and sensed["keys_done"] == TENANTS["a"]
    assert first.group_orders["a"] == [(i, "a") for i in range(TENANTS["a"])]

    # "Clear -> only failed": B's submit and commit ran again; A is done.
    assert second.run_id == first.outcome.run_id and second.state == "success", second.output[-6000:]
    epochs = {
        index: airflow_harness.xcom(DAG_ID, second.run_id, "tenant.submit", "checkpoint_plan", map_index=index)["epoch"]
        for index in range(len(TENANTS))
    }
    assert epochs == {0: 1, 1: 2}  # only B submitted again; A kept its run-1 plan and output
    plan_b = airflow_harness.xcom(DAG_ID, second.run_id, "tenant.submit", "checkpoint_plan", map_index=1)
    result_b = airflow_harness.xcom(DAG_ID, second.run_id, "tenant.submit", map_index=1)
    assert plan_b["keys_skipped"] == len(done_b) and result_b["keys"] == TENANTS["b"] - len(done_b)
    commit_b = airflow_harness.xcom(DAG_ID, second.run_id, "tenant.commit", map_index=1)
    # No orphan count to expect: row keys write through Spark's own writer, whose failed task
    # removes its files itself (abortTask); exactly-once below is what matters.
    assert commit_b["rows_committed"] == TENANTS["b"]
    for name, rows in TENANTS.items():
        assert _orders(output / "group" / name) == [(i, name) for i in range(rows)]  # exactly once

    # An unmapped commit given the mapped submit's id commits every instance's store and says so.
    commit_all = airflow_harness.xcom(DAG_ID, second.run_id, "commit_all")
    assert commit_all["map_indexes"] == [0, 1] and commit_all["rows_committed"] == sum(TENANTS.values())
    assert all(s["already_committed"] for s in commit_all["stores"])  # by each group's own commit
    assert "tenant.submit is mapped: committing the stores of its 2 instances" in second.output
