"""The Spark-side API on a real local SparkSession: clear errors before any output, keys as read, plans, results."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark import SOURCE_KEY_COLUMN, CheckpointedJob, WriteContext, parse_result_line
from airflow_ckpt_provider.spark.paths import arrow_filesystem
from airflow_ckpt_provider.store import FileMetadata, RetentionPolicy
from airflow_ckpt_provider.store.errors import EpochConflictError, InvalidArgumentError
from airflow_ckpt_provider.store.rerun import RerunAction
from tests.spark.helpers import FakeOperator, Target, assert_exactly_once, done_keys, make_inputs
from tests.spark.jobs.pipeline import run_pipeline
from tests.support.errors import raises_reason

pytestmark = pytest.mark.spark


def _job(spark: SparkSession, target: Target, **kwargs: object) -> CheckpointedJob:
    return CheckpointedJob(spark, target.store_uri, **target.options, **kwargs)  # type: ignore[arg-type]


def _nothing_written(target: Target) -> None:
    assert target.output_files() == []
    assert target.store().inspection.list_checkpoints() == []


def test_null_key_fails_before_any_output(spark: SparkSession, local_target: Target, tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"event_id": [1, 2, 3], "account": ["a", None, "c"], "amount": [1.0, 2.0, 3.0]}), path)
    job = _job(spark, local_target)
    df = job.skip_completed(spark.read.parquet(str(path)), "account")
    with raises_reason(InvalidArgumentError, "null_key", match="null key"):
        job.write_parquet(df, local_target.output_uri)
    _nothing_written(local_target)


def test_missing_key_column_and_partition_column(spark: SparkSession, local_target: Target, tmp_path: Path) -> None:
    inputs = make_inputs(tmp_path / "in", files=1)
    job = _job(spark, local_target)
    source = spark.read.parquet(*inputs)
    with raises_reason(InvalidArgumentError, "key_column_not_found", match="acount"):
        job.skip_completed(source, "acount")
    with raises_reason(InvalidArgumentError, "key_column_not_found", match="no key"):
        job.write_parquet(source, local_target.output_uri)
    with raises_reason(InvalidArgumentError, "key_column_not_found", match="partition_by"):
        job.write_parquet(source, local_target.output_uri, key="account", partition_by=["day"])
    _nothing_written(local_target)


def test_key_type_change_between_runs_is_refused(spark: SparkSession, local_target: Target, tmp_path: Path) -> None:
    inputs = make_inputs(tmp_path / "in", files=1)
    first = _job(spark, local_target)
    first.write_parquet(first.skip_completed(spark.read.parquet(*inputs), "event_id"), local_target.output_uri)
    first.finish()
    written = local_target.output_files()
    second = _job(spark, local_target)
    as_text = spark.read.parquet(*inputs).withColumn("event_id", F.col("event_id").cast("string"))
    with raises_reason(InvalidArgumentError, "key_type_mismatch", match="int64"):
        second.skip_completed(as_text, "event_id")
    assert local_target.output_files() == written, "nothing more was written"


def test_global_aggregation_loses_the_source_key(spark: SparkSession, local_target: Target, tmp_path: Path) -> None:
    inputs = make_inputs(tmp_path / "in", files=1)
    job = _job(spark, local_target)
    df = job.skip_completed(spark.read.parquet(*inputs), "account")
    totals = df.groupBy("account").agg(F.sum("amount").alias("total"))
    with raises_reason(InvalidArgumentError, "source_key_lost", match="groupBy"):
        job.write_parquet(totals, local_target.output_uri, key="account")
    # Grouping by the hidden column too keeps the source key: allowed.
    per_key = df.groupBy("account", SOURCE_KEY_COLUMN).agg(F.sum("amount").alias("total"))
    summary = job.write_parquet(per_key, local_target.output_uri)
    assert summary.keys == 24 and summary.rows == 24


def _transform(df: DataFrame) -> DataFrame:
    return df.withColumn("account", F.upper(F.trim("account"))).withColumn("amount2", F.col("amount") * 2)


@pytest.mark.s3
def test_composite_key_with_keys_read_on_executors(spark: SparkSession, s3_target: Target, tmp_path: Path) -> None:
    """Above the broadcast threshold, done keys are read by executors (never collected) and shuffle-joined."""
    target = s3_target
    inputs = make_inputs(tmp_path / "in", files=4)
    operator = FakeOperator(target)
    source = spark.read.parquet(*inputs).withColumn("bucket", F.col("event_id") % 5)
    key = ["account", "bucket"]
    epoch1 = operator.begin()
    job1 = CheckpointedJob(spark, target.store_uri, epoch=epoch1, broadcast_threshold=0, **target.options)
    # Rows dropped before skip_completed stay pending; rows dropped after it count as done with their task.
    some_keys = job1.skip_completed(source.where(F.col("account") < " acct-010"), key)
    first = job1.write_parquet(_transform(some_keys), target.output_uri, num_partitions=4)
    operator.end(epoch1, 0)
    assert operator.store.key_type() == "struct<account: string, bucket: int64>"
    assert first.keys == 10 * 5

    epoch2 = operator.begin()
    job2 = CheckpointedJob(spark, target.store_uri, epoch=epoch2, broadcast_threshold=0, **target.options)
    rest = job2.skip_completed(source, key)
    plan = rest._jdf.queryExecution().executedPlan().toString()
    assert "_ckpt_read_done_keys" in plan and "BroadcastExchange" not in plan
    second = job2.write_parquet(_transform(rest), target.output_uri, num_partitions=4)
    operator.end(epoch2, 0)
    assert second.keys == 14 * 5
    assert len(done_keys(operator.store)) == 24 * 5
    operator.store.commit(output_roots=[target.output_uri])
    assert_exactly_once(target, inputs)


def test_partition_by_writes_hive_directories(spark: SparkSession, local_target: Target, tmp_path: Path) -> None:
    inputs = make_inputs(tmp_path / "in", files=2, accounts=3)
    job = _job(spark, local_target)
    df = job.read_parquet(inputs).withColumn(
        "day", F.concat(F.lit("2026-01-0"), (F.col("event_id") % 2).cast("string"))
    )
    summary = job.write_parquet(df, local_target.output_uri, partition_by=["day"])
    job.finish()
    assert summary.shuffled is False, "read_parquet's tasks hold whole files: no shuffle before the writer"
    dirs = {Path(p).parent.name for p in local_target.output_files()}
    assert dirs == {"day=2026-01-00", "day=2026-01-01"}
    job.store.commit(output_roots=[local_target.output_uri])
    back = spark.read.parquet(local_target.output_uri.removeprefix("file://"))
    assert back.count() == 240 and set(back.columns) >= {"event_id", "account", "day"}


def _shuffled(job: CheckpointedJob, df: DataFrame, target: Target, name: str) -> bool:
    return job.write_parquet(df, f"{target.output_uri}/{name}", num_partitions=2).shuffled


def test_writer_shuffles_only_when_the_plan_does_not_group_keys(
    spark: SparkSession, local_target: Target, tmp_path: Path
) -> None:
    inputs = make_inputs(tmp_path / "in", files=4)
    files = _job(spark, Target("local", f"file://{tmp_path}/s1", local_target.output_uri))
    source = files.read_parquet(inputs)
    assert not _shuffled(files, source.where("amount > 3").withColumn("x", F.lit(1)), local_target, "a")
    dim = spark.createDataFrame([(" acct-001", "vip")], "account string, tier string")
    assert not _shuffled(files, source.join(F.broadcast(dim), "account", "left"), local_target, "b")
    assert _shuffled(files, source.repartition(3), local_target, "c")
    rows = _job(spark, Target("local", f"file://{tmp_path}/s2", local_target.output_uri))
    # skip_completed groups the keys at the source: the writer only shuffles again when rows moved since.
    keyed = rows.skip_completed(spark.read.parquet(*inputs), "account")
    assert not _shuffled(rows, keyed.where("amount > 1"), local_target, "d")
    assert _shuffled(rows, keyed.repartition(3), local_target, "e")


def test_writer_contract_is_enforced(spark: SparkSession, local_target: Target, tmp_path: Path) -> None:
    inputs = make_inputs(tmp_path / "in", files=1)
    job = _job(spark, local_target)

    def lazy(batches: Iterator[pa.RecordBatch], ctx: WriteContext) -> list[FileMetadata]:
        next(batches, None)
        return []

    def unannounced(batches: Iterator[pa.RecordBatch], ctx: WriteContext) -> list[FileMetadata]:
        table = pa.Table.from_batches(list(batches))
        uri = ctx.new_file_uri()
        path = uri.removeprefix("file://")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        return [FileMetadata(uri, Path(path).stat().st_size, table.num_rows)]

    df = job.read_parquet(inputs, min_partitions=1)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")  # several batches per task
    try:
        with raises_reason(InvalidArgumentError, "writer_contract", match="without consuming"):
            job.write(df, lazy, output=local_target.output_uri)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    with raises_reason(InvalidArgumentError, "writer_contract", match="record_intent"):
        job.write(df, unannounced, output=local_target.output_uri)
    assert local_target.output_files() == [], "a file created without an intent is still deleted by its task"


def test_a_library_users_job_prints_nothing_and_the_operators_job_prints_its_result_once(
    spark: SparkSession, local_target: Target, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A job built without Airflow (a notebook, a script) keeps its stdout: its result is what ``finish()``
    returns. A job the submit operator configured (``from_spark``) prints the ``CKPT_RESULT`` line the
    operator reads from spark-submit's log, once for its one write, and writes the result file."""
    inputs = make_inputs(tmp_path / "in", files=2)
    notebook = Target("local", f"file://{tmp_path}/notebook/store", f"file://{tmp_path}/notebook/out")
    mine = _job(spark, notebook)
    with mine:
        mine.write_parquet(mine.skip_completed(spark.read.parquet(*inputs), "event_id"), notebook.output_uri)
    captured = capfd.readouterr()
    assert "CKPT_RESULT" not in captured.out + captured.err
    assert mine.finish()["rows"] == 2 * 120 and mine.result()["epoch"] == mine.epoch

    operator = FakeOperator(local_target)
    epoch = operator.begin()
    result_path = tmp_path / "result.json"
    confs = operator.confs(epoch) | {"spark.ckpt.result.path": str(result_path)}
    try:
        for name, value in confs.items():
            spark.conf.set(name, value)
        job = CheckpointedJob.from_spark(spark)
        job.write_parquet(job.skip_completed(spark.read.parquet(*inputs), "event_id"), local_target.output_uri)
        result = job.finish()
    finally:
        for name in confs:
            spark.conf.unset(name)
    lines = [line for line in capfd.readouterr().out.splitlines() if "CKPT_RESULT" in line]
    assert len(lines) == 1, lines
    assert parse_result_line(lines[0]) == result and (result["epoch"], result["rows"]) == (epoch, 2 * 120)
    assert json.loads(result_path.read_text()) == result


def test_from_spark_reads_the_operator_confs(spark: SparkSession, local_target: Target, tmp_path: Path) -> None:
    with raises_reason(InvalidArgumentError, "missing_store_conf", match=r"CheckpointedJob\(spark, store_uri="):
        CheckpointedJob.from_spark(spark)
    operator = FakeOperator(local_target)
    epoch = operator.begin()
    result_path = tmp_path / "result.json"
    confs = operator.confs(epoch) | {"spark.ckpt.result.path": str(result_path)}
    try:
        for name, value in confs.items():
            spark.conf.set(name, value)
        job = CheckpointedJob.from_spark(spark)
        assert (job.epoch, job.store.uri) == (epoch, local_target.store_uri)
        job.finish()
        assert json.loads(result_path.read_text())["epoch"] == epoch
        operator.begin()  # a newer submit: this driver's epoch is stale
        with raises_reason(EpochConflictError, "epoch_fenced", match="superseded"):
            CheckpointedJob.from_spark(spark)
    finally:
        for name in confs:
            spark.conf.unset(name)


@pytest.mark.s3
def test_store_outage_degrades_the_run_which_still_completes(
    spark: SparkSession,
    fault_proxy: object,
    s3_bucket: str,
    s3_options: dict[str, object],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The store goes down mid-job: the breaker trips on executors, output is written, the result says degraded."""
    from ckpt_testkit.faultproxy import FaultProxy

    assert isinstance(fault_proxy, FaultProxy)
    options = dict(s3_options) | {
        "endpoint_url": fault_proxy.endpoint_url,
        "max_attempts": 1,
        "timeout_seconds": 2,
        "breaker_max_failures": 2,
    }
    inputs = make_inputs(tmp_path / "in", files=4)
    result_path = tmp_path / "result.json"
    # As the submit operator asks: the result file, and the line it reads from spark-submit's log.
    job = CheckpointedJob(spark, f"s3://{s3_bucket}/ckpt", result_path=str(result_path), result_line=True, **options)
    df = job.read_parquet(inputs)  # the store is up while the driver reads what is done
    fault_proxy.reset()
    summary = job.write_parquet(df.withColumn("amount2", F.col("amount") * 2), f"file://{tmp_path}/out")
    assert summary.degraded and summary.sealed_partitions == 0
    assert summary.rows == 4 * 120, "the job still wrote all its output"
    printed = parse_result_line(capsys.readouterr().out)
    assert printed is not None and printed["degraded"] is True
    assert json.loads(result_path.read_text())["degraded"] is True
    fault_proxy.pass_through()


@pytest.mark.s3
def test_s3_input_is_read_by_pyarrow_and_resumes(spark: SparkSession, s3_target: Target, tmp_path: Path) -> None:
    """Spark has no S3 connector here: read_parquet falls back to pyarrow for s3:// input, whole files per task."""
    target = s3_target
    local_inputs = make_inputs(tmp_path / "in", files=6)
    filesystem = arrow_filesystem(target.output_uri, target.options)
    bucket = target.store_uri.removeprefix("s3://").split("/", 1)[0]
    s3_inputs = []
    for path in local_inputs:
        key = f"{bucket}/input/{Path(path).name}"
        with filesystem.open_output_stream(key) as out:
            out.write(Path(path).read_bytes())
        s3_inputs.append(f"s3://{key}")
    operator = FakeOperator(target)
    epoch1 = operator.begin()
    job1 = CheckpointedJob(spark, target.store_uri, epoch=epoch1, **target.options)
    faults = [{"partition": 2, "attempt": 0, "action": "raise", "at": "end"}]
    with pytest.raises(Exception, match="injected fault"):
        run_pipeline(
            spark, job1, mode="files", inputs=s3_inputs, output=target.output_uri, faults=faults, num_partitions=6
        )
    operator.end(epoch1, 1)
    # The new epoch's base is what counts as done: an attempt of the failed run may still seal until then.
    epoch2 = operator.begin()
    done_before = done_keys(operator.store)
    assert done_before and done_before < set(s3_inputs)
    job2 = CheckpointedJob(spark, target.store_uri, epoch=epoch2, **target.options)
    summary = run_pipeline(spark, job2, mode="files", inputs=s3_inputs, output=target.output_uri, num_partitions=6)
    operator.end(epoch2, 0)
    assert summary.keys == len(s3_inputs) - len(done_before)
    assert job2.result()["input"]["pyarrow_files_read"] == len(s3_inputs) - len(done_before)
    operator.store.commit(output_roots=[target.output_uri])
    assert_exactly_once(target, local_inputs)


def test_reading_many_local_files_lists_them_on_the_driver(spark: SparkSession, tmp_path: Path) -> None:
    """Above 32 paths Spark lists input files with a Spark job; read_parquet stats local files on the driver.

    A small resumed run would otherwise pay a listing job (a few hundred ms) for files it has named itself.
    """
    inputs = make_inputs(tmp_path / "in", files=40, rows_per_file=5)
    tracker = spark.sparkContext.statusTracker()

    def jobs_started_by(action: Callable[[], object]) -> int:
        before = set(tracker.getJobIdsForGroup(None))
        action()
        return len(set(tracker.getJobIdsForGroup(None)) - before)

    plain = jobs_started_by(lambda: spark.read.parquet(*inputs))
    job = CheckpointedJob(spark, f"file://{tmp_path}/store")
    ours = jobs_started_by(lambda: job.read_parquet(inputs))
    assert ours == plain - 1, f"Spark alone started {plain} jobs (listing + schema), read_parquet {ours}"
    assert spark.conf.get("spark.sql.sources.parallelPartitionDiscovery.threshold") == "32", "the conf is put back"


def test_the_driver_declares_its_output_root_and_cannot_leave_the_operators(
    spark: SparkSession, local_target: Target, tmp_path: Path
) -> None:
    """Deletions may reach only declared output roots (docs/design.md, section 7): with no roots from
    the operator the driver declares each write's root before writing; with roots, a write elsewhere
    fails before any output."""
    from airflow_ckpt_provider.store.errors import RefusedError

    inputs = make_inputs(tmp_path / "in", files=1)
    store = local_target.store()
    epoch = store.epochs.begin(owner="op").number
    assert store.deletion_guard().root_uris == ()
    job = _job(spark, local_target, epoch=epoch)
    job.write_parquet(job.skip_completed(spark.read.parquet(*inputs), "event_id"), local_target.output_uri)
    job.finish()
    assert store.deletion_guard().root_uris == (local_target.output_uri,)

    elsewhere = tmp_path / "elsewhere"
    declared = store.epochs.begin(owner="op", output_roots=[(tmp_path / "only-here").as_uri()]).number
    job = _job(spark, local_target, epoch=declared)
    with raises_reason(RefusedError, "output_root_not_declared", match="output_roots"):
        job.write_parquet(job.skip_completed(spark.read.parquet(*inputs), "event_id"), elsewhere.as_uri())
    assert not elsewhere.exists()


def test_a_key_only_the_writer_takes_warns_before_the_job_that_a_failure_keeps_nothing(
    spark: SparkSession, local_target: Target, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A key given to ``write_parquet`` on a frame ``skip_completed`` did not prepare: the writer shuffles every row
    by it, so the user's UDF failing before that exchange keeps no progress. The driver says so before the job
    runs (the warning is logged, then the job fails), and the store shows it: no checkpoint. Taken at the read
    (skip_completed), the key draws no warning (test_row_keys_progress shows such a run keeping its tasks' keys)."""
    inputs = make_inputs(tmp_path / "in", files=4)
    poison = F.udf(lambda account: 1 // 0 if account.endswith("003") else len(account), "int")
    job = _job(spark, local_target)
    unprepared = spark.read.parquet(*inputs).withColumn("n", poison("account"))
    caplog.set_level("WARNING", logger="airflow_ckpt_provider.spark.job.partitioning")
    with pytest.raises(Exception, match="ZeroDivisionError"):
        job.write_parquet(unprepared, local_target.output_uri, key="account")
    warned = [r for r in caplog.records if "keeps NO progress" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelname == "WARNING"
    assert "skip_completed(df, key=...)" in warned[0].getMessage()
    assert done_keys(local_target.store()) == set()

    caplog.clear()
    prepared_target = Target("local", f"file://{tmp_path}/prepared-store", f"file://{tmp_path}/prepared-out")
    taken = _job(spark, prepared_target)
    keyed = taken.skip_completed(spark.read.parquet(*inputs), "account")
    taken.write_parquet(keyed.withColumn("n", F.length("account")), prepared_target.output_uri)
    assert not [r for r in caplog.records if "keeps NO progress" in r.getMessage()]
    assert len(done_keys(prepared_target.store())) == 24


def _ids_input(directory: Path, version: int) -> str:
    """4 Parquet files of 1,000 ids each (ids 0..3999); ``value`` says which version of the input it is."""
    directory.mkdir(parents=True, exist_ok=True)
    for part in range(4):
        ids = list(range(part * 1000, (part + 1) * 1000))
        pq.write_table(pa.table({"id": ids, "value": [version] * 1000}), str(directory / f"part-{part}.parquet"))
    return str(directory)


def _what_a_reader_sees(out: str) -> tuple[int, int, set[int]]:
    """Rows, distinct ids and input versions in ``out``, read by plain pyarrow (no store, no catalog)."""
    table = pq.read_table(out.removeprefix("file://"), columns=["id", "value"])
    return table.num_rows, len(set(table.column("id").to_pylist())), set(table.column("value").to_pylist())


def test_rerunning_a_committed_job_without_airflow_replaces_its_output(
    spark: SparkSession, local_target: Target, tmp_path: Path
) -> None:
    """Duplicates on a re-run without Airflow, reproduced as docs/spark.md ("Without Airflow") writes the job: 4
    input files of 1,000 ids, the job run, committed and cleaned up with ``delete_after_success``, then the same
    code again on the same store and output (the input corrected meanwhile). A plain reader must see 4,000 rows
    of 4,000 distinct ids from the second run (before the fix: 8,000 rows, both runs', and a commit that
    succeeded silently). A third run with ``on_rerun="skip"`` reads and writes nothing; the commit finds the
    store committed."""
    store, out = local_target.store_uri, local_target.output_uri

    def run(version: int, **kwargs: Any) -> CheckpointedJob:
        src = _ids_input(tmp_path / f"in-v{version}", version)
        job = CheckpointedJob(spark, store_uri=store, **kwargs)
        df = job.skip_completed(spark.read.parquet(src), key="id", unique=True)
        job.write_parquet(df, out)
        job.finish()
        job.store.commit([out])
        job.store.housekeeping.cleanup(RetentionPolicy.DELETE_AFTER_SUCCESS)
        return job

    first = run(1)
    assert first.rerun is not None and first.rerun.action is RerunAction.FIRST
    assert _what_a_reader_sees(out) == (4000, 4000, {1})
    second = run(2)
    assert second.rerun is not None and second.rerun.action is RerunAction.REPLACE
    assert _what_a_reader_sees(out) == (4000, 4000, {2})
    assert second.result()["rows"] == 4000
    skipped = run(3, on_rerun="skip")
    assert skipped.skipped and skipped.rerun is not None and skipped.rerun.action is RerunAction.SKIP
    assert skipped.result()["rows"] == 0 and skipped.epoch == second.epoch
    assert _what_a_reader_sees(out) == (4000, 4000, {2})
    assert skipped.store.inspection.check().ok
