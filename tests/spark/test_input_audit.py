"""The skip audit (spark/job/skip_audit.py) and the commit's guard against lost input (store/input_audit.py).

The shortcuts are right as the code stands (tests/spark/test_reprocess_histories.py), so to show the
guard catches a wrong one these tests break our own shortcut on purpose: ``input_records`` is
monkeypatched back to what it did before records vouched only for unfiltered input (a task's record
vouches for its input even when that input was filtered). That is the bug the guard is for, injected;
nothing else is mocked.

History (the third reproduction of the reprocess data loss, tiny): run, commit, ``cleanup(RETAIN)``, a
run with nothing pending (its checkpoints then vouch wrongly), reprocess by commit 1, a rerun.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession

from airflow_ckpt_provider.spark import row_source
from airflow_ckpt_provider.spark.job import partitioning, skip_audit
from airflow_ckpt_provider.store.errors import RefusedError
from ckpt_testkit.histories import StoreHistory, use_session
from tests.support.errors import raises_reason

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module", autouse=True)
def _session(spark: SparkSession) -> Iterator[None]:
    use_session(spark)
    yield


@pytest.fixture
def wrong_shortcut(monkeypatch: pytest.MonkeyPatch) -> None:
    """Input records that vouch for filtered input (the shortcut bug, put back on purpose)."""

    def vouch_always(source: row_source.RowSource, **kwargs: Any) -> row_source.InputRecords | None:
        unfiltered = dataclasses.replace(source, anti_joined=False, pruned=frozenset(), skipped_buckets=frozenset())
        return row_source.input_records(unfiltered, **kwargs)

    monkeypatch.setattr(partitioning, "input_records", vouch_always)


def _history(mode: str) -> StoreHistory:
    machine = StoreHistory()
    machine.start(mode, "spark", 8)
    for step in ("run", "commit", "retain_cleanup", "run"):
        getattr(machine, step)()
    machine.reprocess_by_commit(1)
    return machine


@pytest.mark.parametrize("mode", ["grouped", "unique"])
def test_the_audit_catches_a_wrong_shortcut_and_the_rerun_reads_exactly(mode: str, wrong_shortcut: None) -> None:
    """Buckets (grouped) and files (unique) vouched for wrongly: the rerun after the reprocess still
    processes every pending key (without the audit it processed 0) and records the finding."""
    machine = _history(mode)
    try:
        pending = len(machine._input_keys() - set(machine.done))
        machine.run()  # the oracle: it processed exactly the pending keys, the store and output agree
        machine.store_and_output_agree_with_the_model()
        assert machine.store.epochs.skip_audit_epochs(since=1) == [machine._epoch]
        assert pending > 0
        machine.commit()  # resolved: the keys it found are done, so the commit goes through and check is ok
    finally:
        machine.teardown()


def test_the_commit_refuses_when_the_run_did_not_read_exactly(
    wrong_shortcut: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback broken too (the run keeps the wrong shortcut): its commit refuses with the way out,
    ``check()`` reports the skipped keys, and discard + rerun + commit recovers every key."""
    machine = _history("unique")
    try:
        with monkeypatch.context() as broken:
            broken.setattr(skip_audit, "fall_back", lambda done: done)
            assert machine._run(frozenset()) == 0  # what the wrong shortcut does: no pending key processed
        with raises_reason(RefusedError, "input_skipped", match="did not read its input exactly") as refused:
            machine.store.commit(output_roots=[machine.output])
        assert "airflow-ckpt discard" in str(refused.value)
        report = machine.store.inspection.check()
        assert any("pending input keys skipped" in p for p in report.problems), report.problems

        machine.discard_uncommitted()
        machine.run()
        machine.commit()
        machine.store_and_output_agree_with_the_model()
    finally:
        machine.teardown()
