"""Reprocess by row keys with real Spark runs (the test process's SparkSession, local[2]), on a local
store and on the S3 server, with the ``retain`` policy (keys compacted into the snapshot).

A committed run; a reprocess of 3 accounts: the checkpoints holding them become pending and their
files leave the output; the next run processes exactly those checkpoints' keys; after its commit a
plain pyarrow reader sees every input row exactly once. And an undo before the next run restores
the files (byte for byte) and the done keys exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from airflow_ckpt_provider.spark import CheckpointedJob
from airflow_ckpt_provider.spark.paths import arrow_filesystem
from airflow_ckpt_provider.store import RetentionPolicy, Selection
from tests.spark.helpers import FakeOperator, Target, assert_exactly_once, done_keys, make_inputs, reference
from tests.spark.jobs.pipeline import run_pipeline

pytestmark = pytest.mark.spark

CHOSEN = [" acct-003", " acct-011", " acct-017"]  # row keys as the job reads them (before its trim)


def _job(spark: SparkSession, target: Target, epoch: int) -> CheckpointedJob:
    return CheckpointedJob(spark, target.store_uri, epoch=epoch, **target.options)


def _committed_run(spark: SparkSession, target: Target, tmp_path: Path) -> tuple[FakeOperator, list[str]]:
    inputs = make_inputs(tmp_path / "in")
    operator = FakeOperator(target)
    epoch = operator.begin()
    run_pipeline(spark, _job(spark, target, epoch), mode="rows", inputs=inputs, output=target.output_uri)
    operator.end(epoch, 0)
    operator.store.commit(output_roots=[target.output_uri])
    operator.store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    assert_exactly_once(target, inputs)
    return operator, inputs


def _output_bytes(target: Target) -> dict[str, bytes]:
    filesystem = arrow_filesystem(target.output_uri, target.options)
    contents = {}
    for path in target.output_files():
        with filesystem.open_input_stream(path) as stream:
            contents[path.rsplit("/", 1)[-1]] = stream.read()
    return contents


@pytest.mark.parametrize("target", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
def test_reprocess_three_keys_then_the_next_run_redoes_exactly_their_checkpoints(
    spark: SparkSession, target: Target, tmp_path: Path
) -> None:
    operator, inputs = _committed_run(spark, target, tmp_path)
    store = operator.store
    keys_before = done_keys(store)
    files_before = _output_bytes(target)

    plan = store.reprocessing.preview(Selection(keys=CHOSEN))
    result = store.reprocessing.run(Selection(keys=CHOSEN), expected=plan)

    pending = keys_before - done_keys(store)
    assert set(CHOSEN) <= pending and len(pending) == plan.keys  # whole checkpoints, nothing else
    assert len(pending) < len(keys_before)
    retracted = {p.rsplit("/", 1)[-1] for p in result.moved}
    assert retracted and retracted == {f.path.rsplit("/", 1)[-1] for f in plan.files}
    assert set(_output_bytes(target)) == set(files_before) - retracted
    # A reader of the output now sees exactly the rows of the keys still done (no half checkpoint).
    pending_accounts = {a.strip().upper() for a in pending}
    assert target.read_output() == [r for r in reference(inputs) if r[1] not in pending_accounts]
    assert store.inspection.check().ok, store.inspection.check()

    epoch = operator.begin()
    summary = run_pipeline(spark, _job(spark, target, epoch), mode="rows", inputs=inputs, output=target.output_uri)
    operator.end(epoch, 0)
    assert summary.keys == len(pending)  # exactly the pending checkpoints' keys were processed
    store.commit(output_roots=[target.output_uri])
    store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    assert_exactly_once(target, inputs)  # every input row once, by a plain pyarrow reader
    assert done_keys(store) == keys_before and store.inspection.check().ok


@pytest.mark.parametrize("target", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
def test_undo_before_the_next_run_restores_files_and_checkpoints_exactly(
    spark: SparkSession, target: Target, tmp_path: Path
) -> None:
    operator, inputs = _committed_run(spark, target, tmp_path)
    store = operator.store
    keys_before = done_keys(store)
    files_before = _output_bytes(target)

    store.reprocessing.run(Selection(keys=CHOSEN))
    assert done_keys(store) != keys_before and _output_bytes(target) != files_before
    store.reprocessing.undo()

    assert done_keys(store) == keys_before
    assert _output_bytes(target) == files_before  # same files, same bytes
    assert store.inspection.check().ok, store.inspection.check()
    epoch = operator.begin()
    summary = run_pipeline(spark, _job(spark, target, epoch), mode="rows", inputs=inputs, output=target.output_uri)
    operator.end(epoch, 0)
    assert summary.keys == 0  # nothing pending after the undo
    store.commit(output_roots=[target.output_uri])
    assert_exactly_once(target, inputs)
