"""Dynamic task mapping and mapped task groups with our submit operator: real metadata DB, real spark-submit.

Two tenants whose integer row keys overlap (every tenant's ``order_no`` starts at 0), each
a mapped instance on its default store location, as a mapped task (``tenants``: a and b) and
as a mapped task group (``tenant``: submit -> sensor -> commit), in one DAG
(dags/tenants_dag.py). Tenant B's own transformation (a Python UDF) raises on a bad record
in the first run. Then the same date is run again with a new run id (a second trigger, or
``airflow dags test`` again), without the bad record: every mapped instance is the same job as
in the first run, so finds its own store: B resumes its remaining keys; A, which finished
but was not committed (the mapped commit waits for every tenant), skips everything, so its
files stay as they were; in the group, A committed in the first run and its submit skips
(``on_rerun="skip"``) while B resumes. A plain Parquet reader then sees each tenant's orders
exactly once.

Both tests inspect the same two DAG runs (a module fixture; every spark-submit costs a JVM
on a 2-core CI machine): what the first run left behind is recorded before the second one. The
mapped task has two instances, not more: a third finished one (a tenant c) proved nothing A does not
and cost two spark-submits; three tenants, one failing while the others finish, is example 4
(tests/dags_examples/test_ckpt_tenant_orders.py).
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
TENANTS = {"a": 300, "b": 400}  # the mapped task's (TENANTS_MAPPED of dags/tenants_dag.py)
GROUP_TENANTS = {"a": 300, "b": 400}  # the mapped task group's
ENV = {"TENANTS_MAPPED": ",".join(f"{name}:{rows}" for name, rows in TENANTS.items()), "TENANTS_GROUP_ON_RERUN": "skip"}
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
    files: dict[str, set[Path]]  # every Parquet file of the mapped task's output, per tenant
    group_files: dict[str, set[Path]]  # the same for the group's
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
        for index in range(len(TENANTS) if task in ("tenants", "commit") else len(GROUP_TENANTS))
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
        epochs={name: open_store(uri).epochs.current() if uri else None for name, uri in uris.items()},
        done_b=_done_keys(uris["b"]) if uris["b"] else set(),
        group_done_b=_done_keys(group_b) if group_b else set(),
        group_orders={name: _orders(output / "group" / name) for name in GROUP_TENANTS},
        files={name: set((output / name).glob("*.parquet")) for name in TENANTS},
        group_files={name: set((output / "group" / name).glob("*.parquet")) for name in GROUP_TENANTS},
        # The CLI names one mapped instance's store with --map-index, and refuses to guess without it.
        # Generous timeouts: the CLI imports Airflow, which took over 120 s on a loaded 2-core machine.
        progress_b=airflow_ckpt(*argv, "--map-index", "1", env=harness.env, timeout=600),
        progress_unnamed=airflow_ckpt(*argv, env=harness.env, timeout=600),
    )


@pytest.fixture(scope="module")
def tenant_runs(airflow_harness: AirflowHarness, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TenantRuns]:
    """The DAG run with B's bad record, then the same date run again (a new run id) without it."""
    airflow_harness.install_dag(DAGS / "tenants_dag.py", DAGS / "tenant_job.py")
    output = tmp_path_factory.mktemp("tenants") / "out"
    day = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    env = {**ENV, "TENANTS_OUTPUT": str(output)}
    outcome = airflow_harness.run_dag(
        DAG_ID, logical_date=day, env={**env, "TENANTS_BAD_KEY": BAD}, timeout=RUN_TIMEOUT
    )
    first = _record_first_run(airflow_harness, outcome, output)
    # The same date again, as a second trigger or `airflow dags test` again: a new run id (and
    # dag.test() drops the first run from the metadata DB, which is why it was recorded above).
    second = airflow_harness.run_dag(
        DAG_ID, logical_date=day, run_after=day + dt.timedelta(hours=1), env=env, timeout=RUN_TIMEOUT
    )
    yield TenantRuns(output, first, second)


def _unchanged(before: set[Path], directory: Path) -> bool:
    """Every file of ``before`` is still there, and no file added since holds a row."""
    now = set(directory.glob("*.parquet"))
    return before <= now and all(pq.read_metadata(p).num_rows == 0 for p in now - before)


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
        assert uris[name].endswith(f"/date=2024-05-01/map_index={index}"), uris[name]
        assert plans[name]["keys_skipped"] == 0
    result_a = first.xcoms[("tenants", "return_value", 0)]
    assert result_a["keys"] == TENANTS["a"], result_a  # all of A's rows, although B processed the same numbers

    for index, name in enumerate(TENANTS):
        epoch = first.epochs[name]
        assert epoch is not None and epoch.number == 1
        assert epoch.metadata["owner"]["map_index"] == index
        # B failed; A finished, uncommitted: the mapped commit waits for every tenant.
        assert epoch.status is (EpochStatus.FAILED if name == "b" else EpochStatus.SUCCEEDED), epoch
    done_b = first.done_b
    assert 0 < len(done_b) < TENANTS["b"] and 137 not in done_b  # progress kept up to B's bad record

    assert first.progress_b.code == 0, first.progress_b.err
    assert json.loads(first.progress_b.out)["store_uri"] == uris["b"]
    assert json.loads(first.progress_b.out)["keys_done"] == len(done_b)
    unnamed = first.progress_unnamed
    assert unnamed.code == 2 and "pass --map-index" in unnamed.err, unnamed.err

    # The same date again, a new run id, without the bad record: every instance is the same job as
    # before and finds its own store. B resumes; A had finished, so it skips every key.
    assert second.run_id != first.outcome.run_id and second.state == "success", second.output[-6000:]
    plans = {
        name: airflow_harness.xcom(DAG_ID, second.run_id, "tenants", "checkpoint_plan", map_index=i)
        for i, name in enumerate(TENANTS)
    }
    assert {name: plan["checkpoint_uri"] for name, plan in plans.items()} == uris
    for index, (name, rows) in enumerate(TENANTS.items()):
        skipped = len(done_b) if name == "b" else rows
        assert (plans[name]["rerun"]["action"], plans[name]["epoch"], plans[name]["keys_skipped"]) == (
            "resume",
            2,
            skipped,
        ), plans[name]
        result = airflow_harness.xcom(DAG_ID, second.run_id, "tenants", map_index=index)
        assert result["keys"] == rows - skipped  # B: only its remaining keys; A: none

    for index, (name, rows) in enumerate(TENANTS.items()):
        committed = airflow_harness.xcom(DAG_ID, second.run_id, "commit", map_index=index)
        assert committed["checkpoint_uri"] == uris[name]
        assert committed["rows_committed"] == rows, committed
        assert _orders(output / name) == [(i, name) for i in range(rows)]  # exactly once
    # A's first run's output is what got committed: no file rewritten.
    assert _unchanged(first.files["a"], output / "a")

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
    assert 0 < len(done_b) < GROUP_TENANTS["b"]
    # A's group committed in the first run, while B's failed.
    result = first.xcoms[("tenant.submit", "return_value", 0)]
    commit = first.xcoms[("tenant.commit", "return_value", 0)]
    assert result["keys"] == GROUP_TENANTS["a"] and commit["rows_committed"] == GROUP_TENANTS["a"]
    assert commit["checkpoint_uri"] == result["checkpoint_uri"]  # the store of the same map index
    assert result["checkpoint_uri"] != first.xcoms[("tenant.submit", "checkpoint_plan", 1)]["checkpoint_uri"]
    sensed = first.xcoms[("tenant.sensor", "return_value", 0)]
    assert sensed["checkpoint_uri"] == result["checkpoint_uri"] and sensed["keys_done"] == GROUP_TENANTS["a"]
    assert first.group_orders["a"] == [(i, "a") for i in range(GROUP_TENANTS["a"])]

    # The same date again (a new run id): A's output is committed and the group's submit has
    # on_rerun="skip", so nothing is submitted for A; B resumes from its own store.
    assert second.run_id != first.outcome.run_id and second.state == "success", second.output[-6000:]
    result_a = airflow_harness.xcom(DAG_ID, second.run_id, "tenant.submit", map_index=0)
    assert result_a["skipped"] is True and result_a["rerun"]["action"] == "skip", result_a
    assert result_a["checkpoint_uri"] == result["checkpoint_uri"]
    commit_a = airflow_harness.xcom(DAG_ID, second.run_id, "tenant.commit", map_index=0)
    assert commit_a["already_committed"] and commit_a["rows_committed"] == GROUP_TENANTS["a"]
    assert set((output / "group" / "a").glob("*.parquet")) == first.group_files["a"]  # untouched
    store_a = open_store(result_a["checkpoint_uri"])
    assert [e.number for e in store_a.epochs.all()] == [1]  # nothing was submitted
    assert (current := store_a.epochs.current()) is not None and current.status is EpochStatus.COMMITTED
    plan_b = airflow_harness.xcom(DAG_ID, second.run_id, "tenant.submit", "checkpoint_plan", map_index=1)
    result_b = airflow_harness.xcom(DAG_ID, second.run_id, "tenant.submit", map_index=1)
    assert (plan_b["rerun"]["action"], plan_b["epoch"], plan_b["keys_skipped"]) == ("resume", 2, len(done_b))
    assert result_b["keys"] == GROUP_TENANTS["b"] - len(done_b)
    commit_b = airflow_harness.xcom(DAG_ID, second.run_id, "tenant.commit", map_index=1)
    # No orphan count to expect: row keys write through Spark's own writer, whose failed task
    # removes its files itself (abortTask); exactly-once below is what matters.
    assert commit_b["rows_committed"] == GROUP_TENANTS["b"]
    for name, rows in GROUP_TENANTS.items():
        assert _orders(output / "group" / name) == [(i, name) for i in range(rows)]  # exactly once

    # An unmapped commit given the mapped submit's id commits every instance's store and says so.
    commit_all = airflow_harness.xcom(DAG_ID, second.run_id, "commit_all")
    assert commit_all["map_indexes"] == [0, 1] and commit_all["rows_committed"] == sum(GROUP_TENANTS.values())
    assert all(s["already_committed"] for s in commit_all["stores"])  # by each group's own commit
    assert "tenant.submit is mapped: committing the stores of its 2 instances" in second.output
