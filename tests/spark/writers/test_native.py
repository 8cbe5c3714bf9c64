"""The native writer (Spark's own Parquet writer + the package's commit protocol), in the real local Spark.

Each scenario compares the committed output with a reference computed without
failures and checks what the store holds. The store is on local disk and on the
S3 server; the output is on local disk (Spark here has no S3 connector).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark import CheckpointedJob, WriteSummary
from airflow_ckpt_provider.spark.paths import file_key
from airflow_ckpt_provider.store.errors import EpochConflictError, InvalidArgumentError, UnsupportedError
from tests.spark.helpers import FakeOperator, Target, assert_exactly_once, done_keys, make_inputs
from tests.spark.jobs.pipeline import run_pipeline
from tests.support.errors import raises_reason

pytestmark = pytest.mark.spark


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def native_target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """Output on local disk; the store on local disk, then on the S3 server."""
    if request.param == "local":
        return Target("local", f"file://{tmp_path}/store", f"file://{tmp_path}/out")
    options = dict(request.getfixturevalue("s3_options"))
    bucket = request.getfixturevalue("s3_bucket")
    return Target("s3-store", f"s3://{bucket}/ckpt/{tmp_path.name}", f"file://{tmp_path}/out", options)


def _job(spark: SparkSession, target: Target, epoch: int) -> CheckpointedJob:
    return CheckpointedJob(spark, target.store_uri, epoch=epoch, **target.options)


def _run_files(
    spark: SparkSession, target: Target, epoch: int, inputs: list[str], faults: list[dict[str, Any]] | None = None
) -> WriteSummary:
    """The test pipeline with file keys through Spark's writer, as one submit of ``epoch``."""
    job = _job(spark, target, epoch)
    return run_pipeline(
        spark, job, mode="files", inputs=inputs, output=target.output_uri, faults=faults or (), engine="spark"
    )


def test_native_writer_resumes_after_a_task_failure_exactly_once(
    spark: SparkSession, native_target: Target, tmp_path: Path
) -> None:
    """A failed task with Spark's writer: it deletes its file, finished tasks are sealed, the rerun resumes."""
    target = native_target
    inputs = make_inputs(tmp_path / "in")
    operator = FakeOperator(target)
    store = operator.store
    epoch1 = operator.begin()
    faults = [{"partition": 5, "attempt": 0, "action": "raise", "at": "end"}]
    with pytest.raises(Exception, match="injected fault"):
        _run_files(spark, target, epoch1, inputs, faults)
    operator.end(epoch1, 1)
    written = target.output_files()
    failed_task_files = [f for f in written if Path(f).name.startswith("part-00005-")]
    assert not failed_task_files, "the failed task must delete its own file before the failure propagates"
    assert not [f for f in Path(tmp_path / "out").rglob("*") if f.name.endswith(".crc")], "no .crc side files"

    epoch2 = operator.begin()
    done_before = done_keys(store)
    everything = {file_key(p) for p in inputs}
    assert 0 < len(done_before) < len(everything), "finished tasks of the failed run must be sealed"
    summary = _run_files(spark, target, epoch2, inputs)
    operator.end(epoch2, 0)
    assert summary.engine == "spark"
    assert summary.keys == len(everything - done_before), "the rerun must process exactly the pending files"
    assert summary.sealed_partitions == summary.partitions == summary.expected_partitions
    assert not summary.degraded
    assert done_keys(store) == everything
    result = store.commit(output_roots=[target.output_uri])
    assert not result.unknown_files
    assert_exactly_once(target, inputs)


def test_auto_engine_picks_spark_for_file_keys_and_row_keys(spark: SparkSession, tmp_path: Path) -> None:
    target = Target("local", f"file://{tmp_path}/store", f"file://{tmp_path}/out")
    inputs = make_inputs(tmp_path / "in", files=3)
    operator = FakeOperator(target)
    spark.sparkContext.setJobGroup("users-group", "the caller's own job group")
    try:
        files = run_pipeline(
            spark, _job(spark, target, operator.begin()), mode="files", inputs=inputs, output=target.output_uri
        )
        assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") == "users-group", "the caller's group is back"
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        spark.sparkContext.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
    assert files.engine == "spark"
    # The files carry the write's token (the name intent the commit matches).
    names = [Path(p).name for p in target.output_files()]
    assert len(names) == 3 and len({n.split("-")[2] for n in names}) == 1

    # Row keys too: the JVM records each task's keys as it writes them.
    rows_target = Target("local", f"file://{tmp_path}/store2", f"file://{tmp_path}/out2")
    rows = run_pipeline(
        spark,
        _job(spark, rows_target, FakeOperator(rows_target).begin()),
        mode="rows",
        inputs=inputs,
        output=rows_target.output_uri,
    )
    assert rows.engine == "spark"
    assert rows.keys == 24 and rows.sealed_partitions == rows.partitions


def test_engine_spark_where_it_cannot_run_is_a_clear_error_and_writes_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    target = Target("local", f"file://{tmp_path}/store", f"file://{tmp_path}/out")
    inputs = make_inputs(tmp_path / "in", files=2)
    job = _job(spark, target, FakeOperator(target).begin())
    # An output Spark has no Hadoop filesystem for: s3:// here (the bundled jars have no s3a).
    with raises_reason(UnsupportedError, "native_writer", match="engine='arrow'"):
        run_pipeline(spark, job, mode="rows", inputs=inputs, output="s3://bucket/out", engine="spark")
    # A scheme the store cannot confine deletions to is refused before anything runs.
    with raises_reason(InvalidArgumentError, "output_root", match="cannot be an output root"):
        run_pipeline(spark, job, mode="rows", inputs=inputs, output="gs://bucket/out", engine="spark")
    # A shuffle before the writer: the plan no longer says which files each task read.
    files_target = Target("local", f"file://{tmp_path}/store2", f"file://{tmp_path}/out")
    job = _job(spark, files_target, FakeOperator(files_target).begin())
    df = job.read_parquet(inputs).repartition(3)
    with raises_reason(UnsupportedError, "native_writer", match="input files"):
        job.write_parquet(df, target.output_uri, engine="spark")
    with raises_reason(InvalidArgumentError, "option", match="engine="):
        job.write_parquet(job.read_parquet(inputs), target.output_uri, engine="jvm")
    assert target.output_files() == []
    assert job.store.inspection.list_checkpoints() == []


def test_engine_spark_with_every_file_done_writes_nothing_and_succeeds(spark: SparkSession, tmp_path: Path) -> None:
    """A rerun after a driver died once every task had sealed (e.g. while compacting) has no pending input."""
    target = Target("local", f"file://{tmp_path}/store", f"file://{tmp_path}/out")
    inputs = make_inputs(tmp_path / "in", files=2)
    operator = FakeOperator(target)
    first = operator.begin()
    _run_files(spark, target, first, inputs)
    operator.end(first, 0)
    written = sorted(target.output_files())
    rerun = _run_files(spark, target, operator.begin(), inputs)
    assert rerun.rows == 0 and sorted(target.output_files()) == written
    assert_exactly_once(target, inputs)


def test_native_and_arrow_writers_write_the_same_rows_and_layout(spark: SparkSession, tmp_path: Path) -> None:
    """partition_by, max_records_per_file and compression mean the same with both engines."""
    inputs = make_inputs(tmp_path / "in", files=4, rows_per_file=150, accounts=3)
    outputs = {}
    for engine in ("spark", "arrow"):
        target = Target("local", f"file://{tmp_path}/store-{engine}", f"file://{tmp_path}/out-{engine}")
        job = _job(spark, target, FakeOperator(target).begin())
        df = job.read_parquet(inputs).withColumn("bucket", (F.col("event_id") % 2).cast("int"))
        summary = job.write_parquet(
            df, target.output_uri, partition_by=["bucket"], max_records_per_file=40, compression="zstd", engine=engine
        )
        assert summary.engine == engine
        files = target.output_files()
        assert {Path(f).parent.name for f in files} == {"bucket=0", "bucket=1"}
        assert all(pq.ParquetFile(f).metadata.num_rows <= 40 for f in files)
        assert {pq.ParquetFile(f).metadata.row_group(0).column(0).compression for f in files} == {"ZSTD"}
        table = pq.read_table(f"{tmp_path}/out-{engine}")  # a plain reader of the directory
        outputs[engine] = sorted(zip(table["event_id"].to_pylist(), table["bucket"].to_pylist(), strict=True))
        assert summary.rows == len(outputs[engine]) == 600
        assert summary.files == len(files)
    assert outputs["spark"] == outputs["arrow"]


def test_tasks_whose_rows_were_all_filtered_out_are_still_checkpointed(spark: SparkSession, tmp_path: Path) -> None:
    target = Target("local", f"file://{tmp_path}/store", f"file://{tmp_path}/out")
    inputs = make_inputs(tmp_path / "in", files=4, rows_per_file=10)
    operator = FakeOperator(target)
    job = _job(spark, target, operator.begin())
    # Only the first file's event ids (0-9) survive; the other three tasks write nothing.
    summary = job.write_parquet(job.read_parquet(inputs).where("event_id < 10"), target.output_uri, engine="spark")
    assert summary.sealed_partitions == summary.expected_partitions == 4
    assert done_keys(operator.store) == {file_key(p) for p in inputs}
    assert sum(pq.ParquetFile(f).metadata.num_rows for f in target.output_files()) == 10


def test_a_newer_epoch_fences_a_running_native_write(spark: SparkSession, tmp_path: Path) -> None:
    """A submit that takes over the store stops the old run's write: seals refuse it and the job is cancelled."""
    target = Target("local", f"file://{tmp_path}/store", f"file://{tmp_path}/out")
    inputs = make_inputs(tmp_path / "in", files=8)
    operator = FakeOperator(target)
    epoch1 = operator.begin()
    # Every task after the first two sleeps, so the takeover lands mid-job.
    faults = [{"partition": p, "action": "sleep", "seconds": 2} for p in range(2, 8)]
    takeover = threading.Timer(3.0, operator.begin)
    takeover.start()
    started = time.monotonic()
    try:
        with raises_reason(EpochConflictError, "epoch_fenced", match="superseded"):
            _run_files(spark, target, epoch1, inputs, faults)
    finally:
        takeover.join()
    assert time.monotonic() - started < 12, "the write must stop soon after the takeover, not run to its end"
    # Nothing the old run sealed after the takeover counts; its files are orphans of the next commit.
    epoch2 = operator.store.epochs.current()
    assert epoch2 is not None and epoch2.number == epoch1 + 1
    late = [
        c
        for c in operator.store.inspection.list_checkpoints()
        if c.epoch == epoch1 and c.checkpoint_id not in epoch2.base
    ]
    assert late == []
