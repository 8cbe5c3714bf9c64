"""Resume scenarios in local mode, in the test process's real SparkSession (local[2]).

Each compares the committed output with a reference computed without failures
(every input row exactly once) and checks that the rerun processed only the keys
no valid checkpoint held.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from airflow_ckpt_provider.spark import CheckpointedJob, ParquetSink, WriteContext
from airflow_ckpt_provider.spark.paths import arrow_path, file_key
from airflow_ckpt_provider.store import FileMetadata
from tests.spark.helpers import (
    FakeOperator,
    Target,
    assert_exactly_once,
    done_keys,
    input_accounts,
    make_inputs,
    reference,
)
from tests.spark.jobs.pipeline import run_pipeline

pytestmark = pytest.mark.spark

INPUT_SCHEMA = StructType(
    [StructField("event_id", LongType()), StructField("account", StringType()), StructField("amount", DoubleType())]
)


def _job(spark: SparkSession, target: Target, epoch: int) -> CheckpointedJob:
    return CheckpointedJob(spark, target.store_uri, epoch=epoch, **target.options)


def _all_keys(mode: str, inputs: list[str]) -> set[str]:
    return {file_key(p) for p in inputs} if mode == "files" else input_accounts(inputs)


@pytest.mark.parametrize(
    ("mode", "target"), [("files", "local"), pytest.param("rows", "s3", marks=pytest.mark.s3)], indirect=["target"]
)
def test_task_failure_fails_the_run_and_the_rerun_resumes(
    spark: SparkSession, target: Target, tmp_path: Path, mode: str
) -> None:
    """A failed task: it raises on its first attempt; local[2] allows one attempt, so the job fails."""
    inputs = make_inputs(tmp_path / "in")
    operator = FakeOperator(target)
    store = operator.store
    epoch1 = operator.begin()
    # Partition 2 fails after its rows went to the writer (its file exists when it fails).
    faults = [{"partition": 2, "attempt": 0, "action": "raise", "at": "end"}]
    with pytest.raises(Exception, match="injected fault"):
        run_pipeline(
            spark, _job(spark, target, epoch1), mode=mode, inputs=inputs, output=target.output_uri, faults=faults
        )
    operator.end(epoch1, 1)

    # The new epoch's base is what counts as done: an attempt of the failed run may still seal until then.
    epoch2 = operator.begin()
    done_before = done_keys(store)
    everything = _all_keys(mode, inputs)
    assert 0 < len(done_before) < len(everything), "the failed run should have sealed some partitions, not all"
    summary = run_pipeline(spark, _job(spark, target, epoch2), mode=mode, inputs=inputs, output=target.output_uri)
    operator.end(epoch2, 0)

    assert summary.keys == len(everything - done_before), "the rerun must process exactly the pending keys"
    assert summary.sealed_partitions == summary.partitions == summary.expected_partitions
    assert not summary.degraded
    assert done_keys(store) == everything
    result = store.commit(output_roots=[target.output_uri])
    assert not result.unknown_files
    assert_exactly_once(target, inputs)


def test_failed_write_task_deletes_its_own_files(spark: SparkSession, local_target: Target, tmp_path: Path) -> None:
    """A task that fails after creating its files removes them before the failure propagates (no commit needed)."""
    inputs = make_inputs(tmp_path / "in", files=2)
    operator = FakeOperator(local_target)
    job = _job(spark, local_target, operator.begin())
    sink = ParquetSink()

    def failing_writer(batches: Iterator[pa.RecordBatch], ctx: WriteContext) -> list[FileMetadata]:
        files = sink(batches, ctx)
        assert files and all(Path(arrow_path(f.path)).exists() for f in files)
        raise RuntimeError("writer failed after creating its files")

    with pytest.raises(Exception, match="writer failed after creating its files"):
        job.write(job.read_parquet(inputs, min_partitions=1), failing_writer, output=local_target.output_uri)
    intents = [b.key for b in operator.store.blobs.list("attempts/") if "/intents/" in b.key]
    assert intents, "the task recorded its intent before writing"
    assert local_target.output_files() == [], "the failed attempt's files must be deleted by the task itself"
    assert operator.store.inspection.list_checkpoints() == [], "a failed attempt seals nothing"


def test_resume_with_skewed_partitions(spark: SparkSession, local_target: Target, tmp_path: Path) -> None:
    """Skew: one account holds 90% of the rows: one large partition, several empty ones."""
    target = local_target
    inputs = make_inputs(tmp_path / "in", files=4, rows_per_file=200, accounts=3, skew=0.9)
    operator = FakeOperator(target)
    epoch1 = operator.begin()
    job1 = _job(spark, target, epoch1)
    # Find the partition holding the big key the way the writer does (same hash, same count).
    faults = [{"action": "raise", "at": "end", "attempt": 0, "partition": None}]
    big = _partition_of(spark, job1, inputs, " acct-000", 8)
    faults[0]["partition"] = big
    with pytest.raises(Exception, match="injected fault"):
        run_pipeline(spark, job1, mode="rows", inputs=inputs, output=target.output_uri, faults=faults, num_partitions=8)
    operator.end(epoch1, 1)
    # The new epoch's base is what counts as done: an attempt of the failed run may still seal until then.
    epoch2 = operator.begin()
    done_before = done_keys(operator.store)
    assert " acct-000" not in done_before
    summary = run_pipeline(
        spark, _job(spark, target, epoch2), mode="rows", inputs=inputs, output=target.output_uri, num_partitions=8
    )
    operator.end(epoch2, 0)
    assert summary.partitions == summary.sealed_partitions == 8, "empty partitions seal empty checkpoints"
    assert summary.keys == 3 - len(done_before)
    assert operator.store.inspection.progress().sealed_partitions == 8
    operator.store.commit(output_roots=[target.output_uri])
    assert_exactly_once(target, inputs)


def _partition_of(spark: SparkSession, job: CheckpointedJob, inputs: list[str], account: str, count: int) -> int:
    from pyspark.sql import functions as F

    from airflow_ckpt_provider.spark import SOURCE_KEY_COLUMN

    df = job.co_partition(job.skip_completed(spark.read.parquet(*inputs), "account"), num_partitions=count)
    row = df.where(F.col("account") == account).select(F.spark_partition_id().alias("p")).first()
    assert row is not None
    assert SOURCE_KEY_COLUMN in df.columns
    return int(row["p"])


@pytest.mark.parametrize("mode", ["files", "rows"])
def test_empty_input(spark: SparkSession, local_target: Target, tmp_path: Path, mode: str) -> None:
    """Empty input: the job succeeds, writes nothing, commits nothing."""
    operator = FakeOperator(local_target)
    epoch = operator.begin()
    job = _job(spark, local_target, epoch)
    if mode == "files":
        df = job.read_parquet([], schema=INPUT_SCHEMA)
    else:
        empty = tmp_path / "empty.parquet"
        spark.createDataFrame([], INPUT_SCHEMA).coalesce(1).write.parquet(str(empty))
        df = job.skip_completed(spark.read.parquet(str(empty)), "account")
    summary = job.write_parquet(df, local_target.output_uri, num_partitions=2)
    operator.end(epoch, 0)
    assert (summary.rows, summary.files, summary.keys) == (0, 0, 0)
    assert summary.sealed_partitions == summary.partitions
    result = operator.store.commit(output_roots=[local_target.output_uri])
    assert result.committed_files == ()
    assert local_target.output_files() == []


@pytest.mark.parametrize(
    ("mode", "target"), [pytest.param("files", "s3", marks=pytest.mark.s3), ("rows", "local")], indirect=["target"]
)
def test_input_entirely_done(spark: SparkSession, target: Target, tmp_path: Path, mode: str) -> None:
    """Nothing left to do: a rerun after a complete run processes nothing and reads no input file."""
    inputs = make_inputs(tmp_path / "in", files=4)
    operator = FakeOperator(target)
    epoch1 = operator.begin()
    first = run_pipeline(spark, _job(spark, target, epoch1), mode=mode, inputs=inputs, output=target.output_uri)
    operator.end(epoch1, 0)
    assert first.keys == len(_all_keys(mode, inputs))

    epoch2 = operator.begin()
    job2 = _job(spark, target, epoch2)
    again = run_pipeline(spark, job2, mode=mode, inputs=inputs, output=target.output_uri)
    operator.end(epoch2, 0)
    assert (again.rows, again.files, again.keys) == (0, 0, 0)
    if mode == "files":
        assert job2.result()["input"]["files_pending"] == 0
        assert job2.result()["input"]["bytes_pending"] == 0
    operator.store.commit(output_roots=[target.output_uri])
    assert_exactly_once(target, inputs)
    assert len(target.read_output()) == len(reference(inputs))
