"""Reprocess after more than one step of history: the rerun rewrites every key the reprocess
made pending, and a plain pyarrow reader of the output sees every input row once.

Three reproductions with the public API only, on a local store and on the S3 server:

* row keys with ``unique=False`` (hash buckets at the source): run + commit, an incremental run (a new
  input file), a reprocess of one key: the incremental run's checkpoints of the reprocessed bucket hold
  only its new keys, yet they vouched for the whole bucket and the rerun processed 0 keys;
* the same history, then a second reprocess by commit 1;
* a ``retain`` store (commit + ``cleanup(RETAIN)``): run, commit, a run with nothing pending (not
  committed), reprocess by commit 1, rerun: the nothing-pending run's checkpoints vouched for input they had read with
  every key anti-joined away, and the rerun processed 0 of the pending keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark import CheckpointedJob, WriteSummary
from airflow_ckpt_provider.spark.paths import arrow_filesystem
from airflow_ckpt_provider.store import CheckpointStore, RetentionPolicy, Selection
from tests.spark.helpers import FakeOperator, Target, done_keys

pytestmark = pytest.mark.spark

FILES = 4
ORDERS = 400
LINES = 3  # lines per order (unique=False): each order's lines spread over the input files


def _write_orders(directory: Path, first: int, count: int, files: int, *, unique: bool, name: str) -> list[str]:
    """``count`` orders from ``first`` in ``files`` files; ``unique``: one row per order, else LINES rows
    per order spread over the files."""
    directory.mkdir(parents=True, exist_ok=True)
    rows: list[list[tuple[str, int, float]]] = [[] for _ in range(files)]
    for order in range(first, first + count):
        for line in range(1 if unique else LINES):
            rows[(order + line) % files].append((f"o-{order:05d}", line, float(order * 10 + line)))
    paths = []
    for index, part in enumerate(rows):
        path = directory / f"{name}-{index:03d}.parquet"
        table = pa.table(
            {
                "order_id": [r[0] for r in part],
                "line": pa.array([r[1] for r in part], pa.int32()),
                "amount": [r[2] for r in part],
            }
        )
        pq.write_table(table, path)
        paths.append(str(path))
    return paths


def _run(
    spark: SparkSession, operator: FakeOperator, inputs: Sequence[str], *, unique: bool, commit: bool = True
) -> WriteSummary:
    target = operator.target
    epoch = operator.begin()
    job = CheckpointedJob(spark, target.store_uri, epoch=epoch, **target.options)
    source = spark.read.parquet(*inputs)
    pending = job.skip_completed(source, "order_id", unique=unique, num_partitions=4)
    summary = job.write_parquet(pending.withColumn("amount2", F.col("amount") * 2.0), target.output_uri)
    operator.end(epoch, 0)
    if commit:
        operator.store.commit(output_roots=[target.output_uri])
    return summary


def _expected(inputs: Sequence[str]) -> list[tuple[str, int]]:
    table = pq.read_table(list(inputs), columns=["order_id", "line"]) if inputs else None
    assert table is not None
    return sorted(zip(table.column("order_id").to_pylist(), table.column("line").to_pylist(), strict=True))


def _output(target: Target) -> list[tuple[str, int]]:
    files = target.output_files()
    if not files:
        return []
    dataset = ds.dataset(files, filesystem=arrow_filesystem(target.output_uri, target.options), format="parquet")
    table = dataset.to_table(columns=["order_id", "line"])
    return sorted(zip(table.column("order_id").to_pylist(), table.column("line").to_pylist(), strict=True))


def _assert_exactly_once(target: Target, inputs: Sequence[str]) -> None:
    got, want = _output(target), _expected(inputs)
    counts = Counter(got)
    twice = [r for r, c in counts.items() if c > 1]
    lost = sorted({o for o, _ in want} - {o for o, _ in got})
    assert not twice, f"{len(twice)} rows are in the output more than once, e.g. {twice[:3]}"
    assert not lost, f"{len(lost)} orders are missing from the output, e.g. {lost[:3]}"
    assert got == want


def _reprocess(store: CheckpointStore, selection: Selection) -> set[Any]:
    before = done_keys(store)
    store.reprocessing.run(selection)
    pending = before - done_keys(store)
    assert pending
    return pending


@pytest.mark.parametrize("target", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
def test_reprocess_after_an_incremental_run_rewrites_every_pending_key(
    spark: SparkSession, target: Target, tmp_path: Path
) -> None:
    operator = FakeOperator(target)
    store = operator.store
    inputs = _write_orders(tmp_path / "in", 0, ORDERS, FILES, unique=False, name="first")
    assert _run(spark, operator, inputs, unique=False).keys == ORDERS
    inputs += _write_orders(tmp_path / "in", ORDERS, 20, 1, unique=False, name="later")
    assert _run(spark, operator, inputs, unique=False).keys == 20
    _assert_exactly_once(target, inputs)

    pending = _reprocess(store, Selection(keys=["o-00007"]))
    summary = _run(spark, operator, inputs, unique=False)
    assert summary.keys == len(pending), f"the rerun processed {summary.keys} of {len(pending)} pending keys"
    _assert_exactly_once(target, inputs)
    assert store.inspection.check().ok, store.inspection.check()

    # The variant: a second reprocess, by the first commit, after the first one was rerun.
    pending = _reprocess(store, Selection(commits=[1]))
    summary = _run(spark, operator, inputs, unique=False)
    assert summary.keys == len(pending), f"the rerun processed {summary.keys} of {len(pending)} pending keys"
    _assert_exactly_once(target, inputs)
    assert _run(spark, operator, inputs, unique=False).keys == 0
    _assert_exactly_once(target, inputs)


@pytest.mark.parametrize("unique", [True, False], ids=["unique", "grouped-at-source"])
@pytest.mark.parametrize("target", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
def test_reprocess_by_commit_after_a_run_with_nothing_pending_on_a_retain_store(
    spark: SparkSession, target: Target, tmp_path: Path, unique: bool
) -> None:
    operator = FakeOperator(target)
    store = operator.store
    inputs = _write_orders(tmp_path / "in", 0, ORDERS, FILES, unique=unique, name="orders")
    assert _run(spark, operator, inputs, unique=unique).keys == ORDERS
    store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    assert _run(spark, operator, inputs, unique=unique, commit=False).keys == 0  # nothing pending, not committed
    _assert_exactly_once(target, inputs)

    pending = _reprocess(store, Selection(commits=[1]))
    assert len(pending) == ORDERS
    summary = _run(spark, operator, inputs, unique=unique)
    assert summary.keys == len(pending), f"the rerun processed {summary.keys} of {len(pending)} pending keys"
    store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    _assert_exactly_once(target, inputs)
    assert store.inspection.check().ok, store.inspection.check()
