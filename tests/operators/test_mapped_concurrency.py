"""Mapped instances of one task running at the same time: real metadata DB, real spark-submit.

Each instance runs as its own ``airflow tasks test ... --map-index N`` process, as two
workers of a real deployment would run them. Given one shared ``checkpoint_uri`` the second
fails fast with the fencing error and changes nothing, and only the first instance's own
retry may take over its open epoch; `{{ ti.map_index }}` in the templated checkpoint_uri
gives each instance its own store again. Two instances at once on their default store
locations, one crashing and the other finishing undisturbed, are the campaign's mapped
trials (tests/faults/test_mapped_trials.py).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_ckpt_provider.store import EpochStatus, open_store
from ckpt_testkit.faults.mapped_trials import instance_succeeded, start_instance
from tests.support.airflow_harness import AirflowHarness

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(2400)]

DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"
DAG_ID = "ckpt_tenants"
ROWS = {0: 300, 1: 400}  # tenants a and b of dags/tenants_dag.py


@pytest.fixture(scope="module")
def run_id(airflow_harness: AirflowHarness) -> str:
    """A DAG run of the tenants DAG (each Airflow CLI call costs a process)."""
    airflow_harness.install_dag(DAGS / "tenants_dag.py", DAGS / "tenant_job.py")
    run_id = "concurrent_shared"
    for args in [("dags", "reserialize"), ("dags", "trigger", DAG_ID, "-r", run_id)]:
        done = airflow_harness.airflow(*args, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return run_id


def _wait_until(condition: Callable[[], bool], what: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.5)


def _valid_keys(uri: str) -> list[int]:
    return sorted(open_store(uri).get_checkpointed_keys().column(0).to_pylist())


def test_a_shared_checkpoint_uri_fences_the_other_instance_and_only_the_owner_takes_over(
    airflow_harness: AirflowHarness, run_id: str, tmp_path: Path
) -> None:
    shared = str(tmp_path / "shared-store")
    # TENANTS_HOLD: map index 0 seals its first write task, then waits in its second until it is
    # killed, so it is surely still running while map index 1's `airflow tasks test` starts up and
    # fails, however loaded the machine (a fixed per-row delay ran out under load 25).
    env = {"TENANTS_OUTPUT": str(tmp_path / "out"), "TENANTS_STORE": shared, "TENANTS_HOLD": "1"}
    store = open_store(shared)

    first = start_instance(airflow_harness, run_id, 0, env, tmp_path / "first.log")
    try:
        _wait_until(lambda: len(store.inspection.valid_checkpoints()) >= 1, "map index 0 sealed a checkpoint")
        # Map index 1 starts while map index 0 is running: it must fail fast, not take over.
        second = start_instance(airflow_harness, run_id, 1, env, tmp_path / "second.log")
        second.wait(timeout=600)
        assert first.poll() is None, "map index 0 should still be running"
        refused = (tmp_path / "second.log").read_text()
        assert "EpochConflictError" in refused and "its own store" in refused and "map index 0" in refused, refused[
            -3000:
        ]
        assert not instance_succeeded(tmp_path / "second.log")
        epochs = store.epochs.all()
        assert [(e.number, e.status) for e in epochs] == [(1, EpochStatus.OPEN)]
        assert epochs[0].metadata["owner"]["map_index"] == 0

        # Map index 0's worker dies (SIGKILL, its spark-submit with it): its epoch stays open.
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    sealed = _valid_keys(shared)
    assert 0 < len(sealed) < ROWS[0]

    # Map index 1 again: still refused (the open epoch is another instance's), nothing changed.
    again = start_instance(airflow_harness, run_id, 1, env, tmp_path / "again.log")
    again.wait(timeout=600)
    assert "Give each mapped instance its own store" in (tmp_path / "again.log").read_text()
    assert [(e.number, e.status) for e in store.epochs.all()] == [(1, EpochStatus.OPEN)]
    assert _valid_keys(shared) == sealed  # nothing lost

    # Map index 0's retry is the same owner: it takes over its epoch and finishes the rest. At the
    # same time, the remedy the error names: `{{ ti.map_index }}` in the templated checkpoint_uri
    # gives map index 1 a store of its own, rendered per instance, while map index 0 runs.
    retry = start_instance(airflow_harness, run_id, 0, {**env, "TENANTS_HOLD": "0"}, tmp_path / "retry.log")
    templated = {**env, "TENANTS_STORE": shared + "-{{ ti.map_index }}", "TENANTS_HOLD": "0"}
    own = start_instance(airflow_harness, run_id, 1, templated, tmp_path / "own.log")
    codes = {"retry": retry.wait(timeout=1800), "own": own.wait(timeout=1800)}
    log = (tmp_path / "retry.log").read_text()
    assert codes == {"retry": 0, "own": 0}, log[-3000:] + (tmp_path / "own.log").read_text()[-3000:]
    assert instance_succeeded(tmp_path / "retry.log") and instance_succeeded(tmp_path / "own.log"), log[-3000:]
    assert f"skipping {len(sealed)} keys already done" in log, log[-3000:]
    epochs = store.epochs.all()
    assert [(e.number, e.status) for e in epochs] == [(1, EpochStatus.FAILED), (2, EpochStatus.SUCCEEDED)]
    assert _valid_keys(shared) == list(range(ROWS[0]))  # each of map index 0's keys exactly once, none of 1's
    assert _valid_keys(shared + "-1") == list(range(ROWS[1]))
