"""Row keys on a changed input: what the input records let a rerun skip, and what they never skip.

A rerun skips done files and done hash buckets without reading keys only when the
records prove the skipped rows done (docs/row-keys.md). A new file, a file rewritten
in place, or a key declared unique that is not: the keys decide, or the job fails
before sealing — never a silent skip.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark import CheckpointedJob
from airflow_ckpt_provider.spark import skip as skip_module
from airflow_ckpt_provider.spark.summary import WriteSummary
from airflow_ckpt_provider.store import RetentionPolicy
from airflow_ckpt_provider.store.errors import InvalidArgumentError
from tests.spark.helpers import FakeOperator, Target, done_keys
from tests.support.errors import raises_reason

pytestmark = pytest.mark.spark


def _write(path: Path, event_ids: list[int], accounts: list[str]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    amounts = [float(e) for e in event_ids]
    pq.write_table(pa.table({"event_id": event_ids, "account": accounts, "amount": amounts}), path)
    return str(path)


def _write_keys(path: Path, keys: list[str]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"event_key": keys, "amount": [float(len(k)) for k in keys]}), path)
    return str(path)


def _run(
    spark: SparkSession, target: Target, operator: FakeOperator, inputs: list[str], *, unique: bool, **write: object
) -> tuple[CheckpointedJob, set[object]]:
    """One submit: skip, transform, write; returns the job and the keys its transformation saw."""
    epoch = operator.begin()
    job = CheckpointedJob(spark, target.store_uri, epoch=epoch, **target.options)
    key = "event_id" if unique else "account"
    df = job.skip_completed(spark.read.parquet(*inputs), key, unique=unique, num_partitions=4)
    seen = {r[key] for r in df.select(key).collect()}
    job.write_parquet(df.withColumn("amount2", F.col("amount") * 2), target.output_uri, **write)  # type: ignore[arg-type]
    operator.end(epoch, 0)
    return job, seen


@pytest.mark.parametrize("engine", ["spark", "arrow"])
def test_new_keys_in_a_done_bucket_are_processed(
    spark: SparkSession, local_target: Target, tmp_path: Path, engine: str
) -> None:
    """Several rows per key: the rerun over a grown input filters no bucket by its record; the files every
    bucket of an earlier run read are skipped unread, and the done keys still decide for the new file."""
    first = [
        _write(tmp_path / "in" / f"{i}.parquet", [i * 10 + r for r in range(10)], [f"a{r}" for r in range(10)])
        for i in range(3)
    ]
    operator = FakeOperator(local_target)
    job1, seen1 = _run(spark, local_target, operator, first, unique=False, engine=engine)
    assert seen1 == {f"a{r}" for r in range(10)}
    assert job1._skips[-1].buckets == frozenset()

    # Same input again: every bucket is done and filtered by its record, no key is read.
    job2, seen2 = _run(spark, local_target, operator, first, unique=False, engine=engine)
    assert seen2 == set() and len(job2._skips[-1].buckets) == 4 and not job2._skips[-1].needs_keys

    # A new file: new keys (hashing into done buckets too) and two old ones.
    grown = [
        *first,
        _write(tmp_path / "in" / "3.parquet", list(range(100, 120)), [f"b{r}" for r in range(18)] + ["a1", "a2"]),
    ]
    job3, seen3 = _run(spark, local_target, operator, grown, unique=False, engine=engine)
    assert seen3 == {f"b{r}" for r in range(18)}, "new keys processed, done keys skipped, none silently"
    assert job3._skips[-1].buckets == frozenset() and job3._skips[-1].needs_keys
    pruned = {identity.split("|", 1)[0].rsplit("/", 1)[-1] for identity in job3._skips[-1].prune}
    assert pruned == {"0.parquet", "1.parquet", "2.parquet"}, "the first run's files, read by all its buckets"
    # Again: the first files skipped unread again; the new file's keys are done (the third run's buckets saw
    # pruned input, so they vouch for no file: their keys decide).
    job4, seen4 = _run(spark, local_target, operator, grown, unique=False, engine=engine)
    assert seen4 == set() and len(job4._skips[-1].prune) == 3 and job4._skips[-1].needs_keys
    assert done_keys(operator.store) == {f"a{r}" for r in range(10)} | {f"b{r}" for r in range(18)}


@pytest.mark.parametrize(("unique", "session"), [(True, "classic"), (False, "classic"), (False, "connect")])
def test_new_input_beyond_the_done_keys_is_not_joined_with_them(
    request: pytest.FixtureRequest, local_target: Target, tmp_path: Path, unique: bool, session: str
) -> None:
    """Keys that only grow (the next day's files): the run over all files reads the new file without joining
    it with the done keys, and its tasks vouch for the file; a file holding a key between the done ones
    (here a done one) is joined again and the done key skipped, every event once after the commit. Over
    Spark Connect with unique keys nothing is pruned (no per-task file records there), so the done input is
    pending and the keys are always joined: only the exchange run is shown."""
    spark = request.getfixturevalue("spark" if session == "classic" else "connect_spark")
    operator = FakeOperator(local_target)
    first = [
        _write(tmp_path / "in" / f"{i}.parquet", [i * 10 + r for r in range(10)], [f"a{r}" for r in range(10)])
        for i in range(3)
    ]
    _run(spark, local_target, operator, first, unique=unique)
    operator.store.commit(output_roots=[local_target.output_uri])

    # Ids 100-109 and accounts b0-b9: beyond ids 0-29 and accounts a0-a9.
    day2 = [*first, _write(tmp_path / "in" / "3.parquet", list(range(100, 110)), [f"b{r}" for r in range(10)])]
    job, seen = _run(spark, local_target, operator, day2, unique=unique)
    skip = job._skips[-1]
    assert skip.beyond_done_keys and not skip.needs_keys, skip.describe()
    assert len(skip.prune) == 3, "the first day's files skipped unread"
    assert seen == (set(range(100, 110)) if unique else {f"b{r}" for r in range(10)})
    operator.store.commit(output_roots=[local_target.output_uri])

    # Event 5 again (account a5, done) among new ones: within the done keys, so they are joined.
    day3 = [*day2, _write(tmp_path / "in" / "4.parquet", [5, *range(200, 209)], ["a5", *[f"c{r}" for r in range(9)]])]
    job, seen = _run(spark, local_target, operator, day3, unique=unique)
    skip = job._skips[-1]
    assert skip.needs_keys and not skip.beyond_done_keys, skip.describe()
    assert seen == (set(range(200, 209)) if unique else {f"c{r}" for r in range(9)})
    operator.store.commit(output_roots=[local_target.output_uri])
    rows = spark.read.parquet(local_target.output_uri.removeprefix("file://")).select("event_id").collect()
    assert sorted(r[0] for r in rows) == [*range(30), *range(100, 110), *range(200, 209)]


@pytest.mark.parametrize("read_by", ["driver", "executors"])
def test_the_done_keys_bounds_count_compacted_and_snapshot_keys(
    spark: SparkSession, local_target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_by: str
) -> None:
    """The bounds the shortcut compares with span every done key wherever the store keeps it: a snapshot
    (keys compacted by the retain policy, with no input record) and a segment, read on the driver (few done
    keys) or by the executors (many). Had they left the snapshot out, the third run would take the first
    day's ids 0-29 for new keys and write them again."""
    if read_by == "executors":
        monkeypatch.setattr(skip_module, "DRIVER_BOUNDS_MAX_KEYS", 0)
    operator = FakeOperator(local_target)
    first = [_write(tmp_path / "in" / f"{i}.parquet", [i * 10 + r for r in range(10)], ["x"] * 10) for i in range(3)]
    _run(spark, local_target, operator, first, unique=True)
    operator.store.commit(output_roots=[local_target.output_uri])
    operator.store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    day2 = [*first, _write(tmp_path / "in" / "3.parquet", list(range(100, 110)), ["y"] * 10)]
    _, seen = _run(spark, local_target, operator, [day2[-1]], unique=True)
    assert seen == set(range(100, 110))
    operator.store.commit(output_roots=[local_target.output_uri])
    operator.store.housekeeping.compact()
    job, seen = _run(spark, local_target, operator, day2, unique=True)
    skip = job._skips[-1]
    assert len(skip.prune) == 1, "the second run's file skipped unread: only the first day's files are pending"
    assert seen == set() and skip.needs_keys and not skip.beyond_done_keys, skip.describe()
    assert done_keys(operator.store) == {*range(30), *range(100, 110)}


def test_a_source_that_is_not_a_plain_scan_is_joined_with_the_done_keys(
    spark: SparkSession, local_target: Target, tmp_path: Path
) -> None:
    """A filter, a join or a UDF before skip_completed: asking whether a pending key lies among the done ones
    could cost the user's upstream work again, so the done keys are joined as before."""
    operator = FakeOperator(local_target)
    first = [_write(tmp_path / "in" / f"{i}.parquet", [i * 10 + r for r in range(10)], ["x"] * 10) for i in range(2)]
    grown = [*first, _write(tmp_path / "in" / "2.parquet", list(range(100, 110)), ["y"] * 10)]
    for files in (first, grown):
        epoch = operator.begin()
        job = CheckpointedJob(spark, local_target.store_uri, epoch=epoch, **local_target.options)
        df = job.skip_completed(spark.read.parquet(*files).where(F.col("amount") >= 0), "event_id", unique=True)
        job.write_parquet(df, local_target.output_uri)
        operator.end(epoch, 0)
    skip = job._skips[-1]
    assert skip.needs_keys and not skip.beyond_done_keys, skip.describe()
    assert done_keys(operator.store) == {*range(20), *range(100, 110)}


def test_a_file_rewritten_in_place_is_read_again(spark: SparkSession, local_target: Target, tmp_path: Path) -> None:
    """Unique keys: a done file whose size or modification time changed is not skipped unread."""
    files = [_write(tmp_path / "in" / f"{i}.parquet", [i * 10 + r for r in range(10)], ["x"] * 10) for i in range(3)]
    operator = FakeOperator(local_target)
    _run(spark, local_target, operator, files, unique=True)
    # File 1 gets two more events; its ten done events stay in it.
    _write(Path(files[1]), [10 + r for r in range(10)] + [100, 101], ["x"] * 12)
    job, seen = _run(spark, local_target, operator, files, unique=True)
    skip = job._skips[-1]
    assert len(skip.prune) == 2 and skip.needs_keys, "files 0 and 2 skipped unread; file 1 read, keys decide"
    assert seen == {100, 101}


@pytest.mark.parametrize("engine", ["spark", "arrow"])
def test_a_key_declared_unique_that_repeats_fails_before_sealing(
    spark: SparkSession, local_target: Target, tmp_path: Path, engine: str
) -> None:
    inputs = [_write(tmp_path / "in" / "0.parquet", [1, 2, 2, 3], ["x"] * 4)]
    operator = FakeOperator(local_target)
    with raises_reason(InvalidArgumentError, "key_not_unique", match="unique=True"):
        _run(spark, local_target, operator, inputs, unique=True, engine=engine)
    assert operator.store.inspection.list_checkpoints() == [], "nothing of the task that met the repeated key is sealed"


@pytest.mark.parametrize("engine", ["spark", "arrow"])
def test_a_rerun_reads_what_is_left_in_its_share_of_the_tasks(
    spark: SparkSession, local_target: Target, tmp_path: Path, engine: str
) -> None:
    """Unique keys, ``num_partitions`` tasks over the whole input: a rerun that skips half the input
    unread reads the other half in half the tasks, each as big as a clean run's. Cutting the rest into
    ``num_partitions`` ever smaller tasks made a rerun's tasks cost more per row than a clean run's."""
    files = [
        _write(tmp_path / "in" / f"{i}.parquet", [i * 1000 + r for r in range(1000)], ["x"] * 1000) for i in range(8)
    ]
    for path in files:  # several row groups per file, so Spark may split a file between tasks
        pq.write_table(pq.read_table(path), path, row_group_size=100)
    sizes = [Path(p).stat().st_size for p in files]
    assert max(sizes) < 1.02 * min(sizes), "files of about one size: half the bytes are half the input"
    operator = FakeOperator(local_target)
    previous = spark.conf.get("spark.sql.files.openCostInBytes")
    spark.conf.set("spark.sql.files.openCostInBytes", "0")  # tasks sized by bytes alone
    try:
        for inputs, partitions in ((files[:4], 4), (files, 8)):
            epoch = operator.begin()
            job = CheckpointedJob(spark, local_target.store_uri, epoch=epoch, **local_target.options)
            df = job.skip_completed(spark.read.parquet(*inputs), "event_id", unique=True, num_partitions=partitions)
            summary = job.write_parquet(df, local_target.output_uri, engine=engine)
            operator.end(epoch, 0)
    finally:
        spark.conf.set("spark.sql.files.openCostInBytes", previous or "4194304")
    # Files 0-3 skipped unread (a grown input: the done keys are still anti-joined against the new files).
    assert len(job._skips[-1].prune) == 4
    assert summary.rows == 4000 and summary.sealed_partitions == summary.partitions
    # 8 tasks over all 8 files asked for; 4 files (half the input, give or take a few bytes) left: 4
    # tasks of about one file each (Spark may split a few bytes of the biggest file off into a fifth),
    # not 8 or more half-files.
    assert summary.partitions in (4, 5)
    assert done_keys(operator.store) == {i * 1000 + r for i in range(8) for r in range(1000)}


@pytest.mark.parametrize(
    ("mode", "session"), [("several", "classic"), ("unique", "classic"), ("grouped", "classic"), ("several", "connect")]
)
def test_many_done_keys_are_anti_joined_in_the_writers_buckets(
    request: pytest.FixtureRequest, local_target: Target, tmp_path: Path, mode: str, session: str
) -> None:
    """An incremental run over many done keys (a sort-merge anti-join): the new rows are shuffled once, into
    the writer's buckets, and adaptive execution neither merges nor splits a bucket, even a skewed one.

    Before: the join's own exchange, then ``repartition(buckets)`` (``unique=False``, ``unique=True``) or the
    writer's own repartition (a source already grouped by key), which Spark dropped as redundant when
    ``buckets`` equals ``spark.sql.shuffle.partitions`` (4 here); adaptive execution then coalesced the
    join's exchange (1 task for 4 buckets) and split a skewed bucket between tasks (5 tasks for 4: one key's
    rows in two checkpoints; forced here with skew thresholds of 1 byte). Over Spark Connect the writer proves
    the layout from the plan's text."""
    spark = request.getfixturevalue("spark" if session == "classic" else "connect_spark")
    first = [
        _write(tmp_path / "in" / f"{i}.parquet", [i * 100 + r for r in range(40)], [f"a{r % 20}" for r in range(40)])
        for i in range(3)
    ]
    # One heavy key, so one bucket is far bigger than the others. New keys between the done ones (event 50,
    # accounts a1h0...), so that the done keys are joined (see the test above for keys beyond them).
    heavy = [f"a1h{r % 3}" if r < 30 else "a1hot" for r in range(600)]
    grown = [*first, _write(tmp_path / "in" / "3.parquet", [50, *range(1001, 1600)], heavy)]
    unique, key = (True, "event_id") if mode == "unique" else (False, "account")
    operator = FakeOperator(local_target)

    def run(files: list[str], **job_options: int) -> tuple[CheckpointedJob, WriteSummary]:
        epoch = operator.begin()
        job = CheckpointedJob(spark, local_target.store_uri, epoch=epoch, **job_options, **local_target.options)
        source = spark.read.parquet(*files)
        if mode == "grouped":
            source = source.repartition(3, "account")
        df = job.skip_completed(source, key, unique=unique, num_partitions=4)
        summary = job.write_parquet(df.withColumn("amount2", F.col("amount") * 2), local_target.output_uri)
        operator.end(epoch, 0)
        return job, summary

    run(first)
    first_keys = done_keys(operator.store)
    skew = {
        "spark.sql.adaptive.skewJoin.skewedPartitionThresholdInBytes": "1",
        "spark.sql.adaptive.skewJoin.skewedPartitionFactor": "1",
        "spark.sql.adaptive.advisoryPartitionSizeInBytes": "1",
    }
    for name, value in skew.items():
        spark.conf.set(name, value)
    try:
        job, summary = run(grown, broadcast_threshold=0)
    finally:
        for name in skew:
            spark.conf.unset(name)
    assert job._skips[-1].needs_keys
    assert summary.partitions == 4 and not summary.shuffled, "the anti-join's exchange is the writer's 4 buckets"
    new_keys = {50, *range(1001, 1600)} if unique else {"a1h0", "a1h1", "a1h2", "a1hot"}
    assert done_keys(operator.store) == first_keys | new_keys
    # Each key's rows in one checkpoint: the commit's disjointness check passes, the output holds each row once.
    operator.store.commit(output_roots=[local_target.output_uri])
    rows = spark.read.parquet(local_target.output_uri.removeprefix("file://")).select("event_id").collect()
    expected = [*range(0, 40), 50, *range(100, 140), *range(200, 240), *range(1001, 1600)]
    assert sorted(r[0] for r in rows) == sorted(expected)


@pytest.mark.parametrize(
    ("key", "event_ids", "accounts", "example"),
    [
        ("event_id", [0, 7, 0, 3], ["a", "b", "c", "d"], 0),
        ("account", [1, 2, 3, 4], ["u1", "u2", "u2", "u3"], "u2"),
        (("account", "event_id"), [1, 2, 2, 3], ["a", "b", "b", "c"], {"account": "b", "event_id": 2}),
    ],
    ids=["int-zero", "string", "composite"],
)
def test_a_repeated_string_zero_or_composite_key_declared_unique_is_refused(
    spark: SparkSession,
    local_target: Target,
    tmp_path: Path,
    key: str | tuple[str, ...],
    event_ids: list[int],
    accounts: list[str],
    example: object,
) -> None:
    """Spark's writer, a source declared unique whose key repeats within one task, for an integer key
    (0), a string key and a composite key: the driver refuses the task with a typed error naming the
    repeated key (a composite key raised Arrow's "no kernel" error instead), and nothing is sealed."""
    inputs = [_write(tmp_path / "in" / "0.parquet", event_ids, accounts)]
    operator = FakeOperator(local_target)
    epoch = operator.begin()
    job = CheckpointedJob(spark, local_target.store_uri, epoch=epoch, **local_target.options)
    df = job.skip_completed(spark.read.parquet(*inputs), list(key) if isinstance(key, tuple) else key, unique=True)
    with raises_reason(InvalidArgumentError, "key_not_unique", match="unique=True") as raised:
        job.write_parquet(df, local_target.output_uri, engine="spark")
    assert f"e.g. {example!r}," in str(raised.value)
    operator.end(epoch, 1)
    assert operator.store.inspection.list_checkpoints() == [], "nothing of the task that met the repeated key is sealed"


def _seal_unique(spark: SparkSession, target: Target, files: list[str], key: str) -> tuple[FakeOperator, Any]:
    """One run of Spark's writer over ``files`` with ``key`` declared unique; every task sealed."""
    operator = FakeOperator(target)
    epoch = operator.begin()
    job = CheckpointedJob(spark, target.store_uri, epoch=epoch, **target.options)
    df = job.skip_completed(spark.read.parquet(*files), key, unique=True)
    summary = job.write_parquet(df, target.output_uri, engine="spark")
    operator.end(epoch, 0)
    assert summary.engine == "spark" and summary.sealed_partitions == summary.partitions > 1
    return operator, summary


def test_unique_integer_keys_are_sealed_without_hashing_every_key_again(
    spark: SparkSession, local_target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's writer, integer keys declared unique: the driver checks each task's keys by sorting them
    and seals them as they are, without finding the distinct keys by hash (half of its work per sealed
    task); every key is sealed once. (A repeated integer key is still refused: the test above.)"""
    import airflow_ckpt_provider.spark.writers.native_keys as native_keys

    calls: list[int] = []
    real = native_keys.distinct_keys

    def counted(arrays: list[pa.Array]) -> pa.Array:
        calls.append(sum(len(a) for a in arrays))
        return real(arrays)

    monkeypatch.setattr(native_keys, "distinct_keys", counted)
    files = [_write(tmp_path / "in" / f"{i}.parquet", [i * 100 + r for r in range(50)], ["x"] * 50) for i in range(4)]
    operator, _ = _seal_unique(spark, local_target, files, "event_id")
    assert done_keys(operator.store) == {i * 100 + r for i in range(4) for r in range(50)}
    assert sum(c.num_keys for c in operator.store.inspection.list_checkpoints()) == 200
    assert calls == [], "the driver hashed integer keys a sort had shown distinct"


def test_keys_that_arrive_in_order_are_sealed_without_hashing_them(
    spark: SparkSession, local_target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's writer, string keys in ascending order within each file (ids written in order, the common
    case): the driver finds them distinct by comparing each key with the one before it and never hashes keys
    that are in order (hashing was most of its work per sealed task); every key is sealed once, and keys out
    of order are still hashed."""
    import pyarrow.compute as pc

    hashed: list[pa.Array] = []
    real = pc.unique

    def counted(values: pa.Array, *args: object, **kwargs: object) -> pa.Array:
        if pa.types.is_string(values.type):
            hashed.append(values)
        return real(values, *args, **kwargs)

    monkeypatch.setattr(pc, "unique", counted)
    ids = [[f"e{i}{r:04d}" for r in range(60)] for i in range(4)]
    ids.append(list(reversed([f"f{r:04d}" for r in range(60)])))  # one file out of order
    files = [_write_keys(tmp_path / "in" / f"{i}.parquet", keys) for i, keys in enumerate(ids)]
    operator, summary = _seal_unique(spark, local_target, files, "event_key")
    assert done_keys(operator.store) == {k for keys in ids for k in keys}
    assert sum(c.num_keys for c in operator.store.inspection.list_checkpoints()) == 300
    in_order = [a for a in hashed if pc.all(pc.greater(a.slice(1), a.slice(0, len(a) - 1))).as_py()]
    assert in_order == [], f"the driver hashed {len(in_order)} tasks' keys that were already in order"
    assert 1 <= len(hashed) < summary.partitions, "only the tasks that read keys out of order are hashed"
