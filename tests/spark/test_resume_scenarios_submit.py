"""Resume scenarios that need their own Spark application, run with spark-submit in local mode.

The test plays the operator: it opens the epoch, submits ``jobs/resumable_job.py``
with the ``spark.ckpt.*`` confs and ``CKPT_STORE_SECRETS``, and ends the epoch.
Reruns run in the test's SparkSession (same code, ``tests/spark/jobs/pipeline.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from airflow_ckpt_provider.spark import CheckpointedJob
from airflow_ckpt_provider.spark.paths import file_key
from tests.spark.helpers import (
    FakeOperator,
    Target,
    assert_exactly_once,
    done_keys,
    finish,
    job_spec,
    kill_group,
    local_submit_argv,
    make_inputs,
    run,
    start,
    wait_for,
)
from tests.spark.jobs.pipeline import run_pipeline

pytestmark = pytest.mark.spark


def _rerun(
    spark: SparkSession, operator: FakeOperator, target: Target, mode: str, inputs: list[str], epoch: int | None = None
):  # type: ignore[no-untyped-def]
    epoch = epoch or operator.begin()
    job = CheckpointedJob(spark, target.store_uri, epoch=epoch, **target.options)
    summary = run_pipeline(spark, job, mode=mode, inputs=inputs, output=target.output_uri, num_partitions=8)
    operator.end(epoch, 0)
    return summary


def _sealed(operator: FakeOperator, epoch: int) -> int:
    return sum(1 for c in operator.store.inspection.valid_checkpoints() if c.epoch == epoch)


@pytest.mark.parametrize(
    ("mode", "target"), [("files", "local"), pytest.param("rows", "s3", marks=pytest.mark.s3)], indirect=["target"]
)
def test_driver_killed_mid_job_then_rerun_resumes(
    spark: SparkSession, target: Target, tmp_path: Path, mode: str
) -> None:
    """A killed driver: SIGKILL it while tasks are writing; the rerun processes only what was not sealed."""
    inputs = make_inputs(tmp_path / "in", files=8)
    operator = FakeOperator(target)
    epoch1 = operator.begin()
    # Every task lingers 1.5 s after handing its rows to the writer, so the kill lands mid-write.
    slow = [{"action": "sleep", "seconds": 1.5, "at": "end"}]
    proc = start(
        local_submit_argv("local[2]", operator.confs(epoch1), job_spec(mode, inputs, target.output_uri, 8)),
        operator.env(faults=slow),
    )
    try:
        wait_for(lambda: _sealed(operator, epoch1) >= 2 or proc.poll() is not None, 180, "two sealed partitions")
        assert proc.poll() is None, f"the job ended before it was killed:\n{finish(proc).tail()}"
    finally:
        kill_group(proc)
        proc.communicate()
    # The killed run never ended its epoch (as after a lost driver); the new epoch's base is what is done.
    epoch2 = operator.begin()
    done_before = done_keys(operator.store)
    everything = {file_key(p) for p in inputs} if mode == "files" else None

    summary = _rerun(spark, operator, target, mode, inputs, epoch=epoch2)
    total = len(everything) if everything is not None else 24
    assert 0 < len(done_before) < total
    assert summary.keys == total - len(done_before), "the rerun must process exactly the keys not yet sealed"
    result = operator.store.commit(output_roots=[target.output_uri])
    assert not result.unknown_files
    assert_exactly_once(target, inputs)


@pytest.mark.parametrize(
    ("mode", "target"),
    # Spark's own writer (local output, here with file keys) and the Arrow writer (S3 output, row keys).
    [pytest.param("rows", "s3", marks=pytest.mark.s3), ("files", "local")],
    indirect=["target"],
)
def test_flaky_tasks_are_retried_within_one_run(tmp_path: Path, target: Target, mode: str) -> None:
    """Flaky tasks: local[2,4] retries failed tasks; failed attempts' files never reach the committed output.

    Local output goes through Spark's own writer (file and row keys), S3 output through the Arrow writer.
    """
    inputs = make_inputs(tmp_path / "in", files=8)
    operator = FakeOperator(target)
    epoch = operator.begin()
    faults = [
        {"partition": 1, "attempt": 0, "action": "raise", "at": "end"},
        {"partition": 3, "attempt": 0, "action": "exit", "at": "end"},  # the Python worker dies: no cleanup
        {"partition": 5, "attempt": 1, "action": "raise", "at": "end"},
        {"partition": 5, "attempt": 0, "action": "raise", "at": "start"},
    ]
    submitted = run(
        local_submit_argv("local[2,4]", operator.confs(epoch), job_spec(mode, inputs, target.output_uri, 8)),
        operator.env(faults=faults),
    )
    assert submitted.returncode == 0, submitted.tail()
    operator.end(epoch, 0)
    assert submitted.result is not None
    keys = 24 if mode == "rows" else 8
    assert submitted.result["keys"] == keys and submitted.result["sealed_partitions"] == 8
    engine = submitted.result["writes"][0]["engine"]
    assert engine == ("arrow" if target.name == "s3" else "spark")
    assert not submitted.result["degraded"]
    sealed = operator.store.inspection.list_checkpoints()
    assert sorted(c.partition for c in sealed) == list(range(8)), "failed attempts seal nothing"
    assert {c.metadata["attempt"] for c in sealed if c.partition in (1, 3)} == {1}
    assert next(c for c in sealed if c.partition == 5).metadata["attempt"] == 2
    operator.store.commit(output_roots=[target.output_uri])
    assert_exactly_once(target, inputs)


# On S3: the fence a zombie's seal races is a conditional write there (each store's fencing on its own:
# tests/store/test_contract.py).
@pytest.mark.s3
@pytest.mark.parametrize("target", ["s3"], indirect=True)
def test_zombie_attempt_sealing_after_the_rerun_began_is_ignored(
    spark: SparkSession, target: Target, tmp_path: Path
) -> None:
    """A zombie: an attempt of the failed run seals after the rerun opened its epoch: never valid.

    One core and the writer as the stage's only Python code, so one reused Python
    worker seals the partitions in order; the failpoint holds its third seal for
    15 s *after* the store's fence check and before the manifest is written. The
    test opens epoch 2 meanwhile, so that seal lands in epoch 1 while epoch 2 is
    open; the next task of the old run is fenced and the old run fails.
    """
    inputs = make_inputs(tmp_path / "in", files=8)
    operator = FakeOperator(target)
    epoch1 = operator.begin()
    # The Arrow writer: its tasks write their own files, so the zombie's files land in the output
    # (Spark's writer leaves a failed job's task files in its staging directory and removes them).
    spec = job_spec("rows", inputs, target.output_uri, 4, python_transform=False, engine="arrow")
    proc = start(
        local_submit_argv("local[1]", operator.confs(epoch1), spec),
        operator.env(failpoints="store.checkpoint.before_manifest=sleep:15@3"),
    )
    store = operator.store
    try:
        stuck: set[str] = set()

        def a_zombie_is_waiting() -> bool:
            staged = {b.key.split("/")[1] for b in store.blobs.list("attempts/") if "/keys/" in b.key}
            sealed = {c.checkpoint_id for c in store.inspection.list_checkpoints()}
            stuck.update(staged - sealed)
            return bool(stuck) and _sealed(operator, epoch1) >= 2

        wait_for(a_zombie_is_waiting, 150, "the third seal to wait before its manifest (one reused Python worker)")
        epoch2 = operator.begin()  # the rerun's submit: from here, epoch 1 is fenced
        base = done_keys(store)
        wait_for(
            lambda: bool(stuck & {c.checkpoint_id for c in store.inspection.list_checkpoints()}), 60, "the zombie seal"
        )
        submitted = finish(proc, timeout=120)
    finally:
        kill_group(proc)
    assert submitted.returncode != 0, "the old run's next task is fenced, so it fails"
    zombies = [c for c in store.inspection.list_checkpoints() if c.checkpoint_id in stuck]
    assert len(zombies) == 1 and zombies[0].epoch == epoch1
    valid = {c.checkpoint_id for c in store.inspection.valid_checkpoints()}
    assert not valid & stuck, "a checkpoint sealed in an old epoch after a new one began is never valid"

    # Through the state reader: the driver's compaction may have folded the manifest into a segment.
    zombie_files = {f.path for f in store.parts.reader.files.files_of(zombies)}
    summary = _rerun(spark, operator, target, "rows", inputs, epoch=epoch2)
    assert summary.keys == 24 - len(base)
    result = store.commit(output_roots=[target.output_uri])
    assert zombie_files and zombie_files <= set(result.deleted_files), "the zombie's files are orphans"
    assert_exactly_once(target, inputs)
