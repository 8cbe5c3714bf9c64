"""The native writer's driver-side sealer: one task's failed seal does not cost the others their progress.

Spark's writer commits each task on an executor and the driver seals one checkpoint per committed task
(``_Sealer``). These tests hand the sealer the commit messages the JVM sends (as one drained batch) and
seal into a real store on local disk; no Spark job is needed to decide what gets sealed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_ckpt_provider import failpoints
from airflow_ckpt_provider.failpoints import InjectedFault
from airflow_ckpt_provider.spark.writers.native import NativeWrite, _Sealer
from airflow_ckpt_provider.store import open_store
from airflow_ckpt_provider.store.errors import IncompleteRunError

TASKS = 4


@pytest.fixture(autouse=True)
def _no_failpoints() -> object:
    yield
    failpoints.disable_all()


def _sealer(tmp_path: Path) -> tuple[_Sealer, list[str]]:
    store = open_store(f"file://{tmp_path}/store")
    output = f"file://{tmp_path}/out"
    epoch = store.epochs.begin(owner="t", output_roots=[output]).number
    write = NativeWrite(
        store=store,
        epoch=epoch,
        output_root=output,
        spark_path=output,
        task_files=tuple((f"file:///in/part-{p}.parquet",) for p in range(TASKS)),
    )
    cancelled: list[str] = []
    return _Sealer(write, drain=lambda: "", on_fenced=lambda: cancelled.append("cancel")), cancelled


def _commits(partitions: range | list[int]) -> str:
    """The JVM's messages for committed tasks: one JSON line each."""
    return "\n".join(
        json.dumps(
            {
                "partition": p,
                "root": "file:///spark/out",
                "files": [{"path": f"file:///spark/out/part-{p:05d}.parquet", "size": 10, "rows": 3}],
                "attempt": 0,
                "task_attempt_id": p,
            }
        )
        for p in partitions
    )


@pytest.mark.parametrize("point", ["spark.native.after_seal", "spark.native.before_seal"])
def test_one_failed_seal_leaves_the_other_committed_tasks_sealed(tmp_path: Path, point: str) -> None:
    sealer, cancelled = _sealer(tmp_path)
    failpoints.enable(point, "raise", hit=1)
    sealer.seal_pending(_commits(range(TASKS)))
    assert isinstance(sealer.error, InjectedFault)  # the write fails with it...
    assert cancelled == ["cancel"]  # ...and its job is cancelled once
    # ...but every other committed task keeps its progress (after_seal: the failing one is sealed too).
    expected = set(range(TASKS)) if point.endswith("after_seal") else set(range(1, TASKS))
    assert {r.partition for r in sealer.reports.values() if r.sealed} >= set(range(1, TASKS))
    sealed = {c.partition for c in sealer.write.store.inspection.valid_checkpoints()}
    assert sealed == expected
    # Tasks that commit after the error (the next drain, or at the end of the write) are sealed as well.
    sealer.seal_pending(_commits([0]) if point.endswith("before_seal") else "")
    assert {c.partition for c in sealer.write.store.inspection.valid_checkpoints()} == set(range(TASKS))


def test_a_write_whose_plan_changed_seals_nothing_more(tmp_path: Path) -> None:
    sealer, cancelled = _sealer(tmp_path)
    sealer.seal_pending(_commits([0, TASKS + 5, 1]))  # a task the plan did not show: its keys are unknown
    assert isinstance(sealer.error, IncompleteRunError)
    assert cancelled == ["cancel"]
    sealer.seal_pending(_commits([2, 3]))
    assert {c.partition for c in sealer.write.store.inspection.valid_checkpoints()} == {0}
