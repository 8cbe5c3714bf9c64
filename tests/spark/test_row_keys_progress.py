"""Row keys keep their progress when the *user's* code fails (docs/row-keys.md).

The user's transformation — a Python UDF — raises on a bad record in one of the
write stage's partitions on the first run. Checked here for every key layout (single and
composite, unique and several rows per key), both writers, local and S3 stores, in local
mode; on the standalone cluster (the UDF failing on an executor, several rows per key, an S3
store and output; and an executor JVM killed mid-stage) by the campaign's cluster trials,
tests/faults/test_cluster_trials.py, with the same oracles:

* progress oracle: the keys sealed after the failed run hold every key of every task
  Spark's own event log records as finished (the UDF logs which keys each task
  attempt held);
* the rerun processes exactly the keys not sealed (the UDF of the rerun sees exactly
  those, and the job reports them);
* after the commit a plain Parquet reader sees every input row exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark import CheckpointedJob
from ckpt_testkit.spark_events import finished_write_tasks
from tests.spark.helpers import (
    FakeOperator,
    Target,
    assert_exactly_once,
    done_keys,
    make_inputs,
)
from tests.spark.jobs.user_udf import KEYS, BadRecordError, source
from tests.spark.jobs.user_udf import run as run_job

pytestmark = pytest.mark.spark

PARTITIONS = 8


@dataclass
class Scenario:
    """One key layout over one input, with the bad record placed in the write stage's last partition."""

    key: str
    inputs: list[str]
    bad_event: int
    all_keys: set[Any]
    marker: Path
    logs: Path

    def key_log(self, run_name: str) -> Path:
        path = self.logs / run_name
        path.mkdir(parents=True, exist_ok=True)
        return path


def _key_value(raw: Any) -> Any:
    return tuple(raw) if isinstance(raw, list) else raw


def keys_logged(directory: Path, task_attempt_ids: Sequence[int] | None = None) -> set[Any]:
    """Keys the user's UDF saw, in all task attempts or in those given."""
    wanted = None if task_attempt_ids is None else {f"t{i}.keys" for i in task_attempt_ids}
    keys: set[Any] = set()
    for path in directory.glob("t*.keys"):
        if wanted is None or path.name in wanted:
            keys.update(_key_value(json.loads(line)) for line in path.read_text().splitlines() if line)
    return keys


def _scenario(spark: SparkSession, tmp_path: Path, key: str) -> Scenario:
    inputs = make_inputs(tmp_path / "in", files=PARTITIONS, rows_per_file=40)
    columns, unique = KEYS[key]
    df = source(spark, inputs)
    # The write stage's partition of each row, as Spark computes it: the scan's task (no exchange for
    # unique keys) or Spark's hash partitioning by the key (the exchange at the source).
    key_expr = F.col(columns[0]) if len(columns) == 1 else F.struct(*[F.col(c) for c in columns])
    partition = F.spark_partition_id() if unique else F.pmod(F.hash(key_expr), F.lit(PARTITIONS))
    rows = df.select(partition.alias("p"), "event_id", *columns).collect()
    last = max(r["p"] for r in rows)
    bad_event = min(r["event_id"] for r in rows if r["p"] == last)
    all_keys = {r[columns[0]] if len(columns) == 1 else tuple(r[c] for c in columns) for r in rows}
    marker = tmp_path / "bad-record"
    marker.touch()
    return Scenario(key, inputs, bad_event, all_keys, marker, tmp_path / "keys")


def _check_progress(store_keys: set[Any], finished_keys: set[Any], scenario: Scenario, finished: int) -> None:
    assert finished > 0, "tasks finished before the bad record failed the job"
    missing = finished_keys - store_keys
    assert not missing, f"{len(missing)} keys of finished tasks were not sealed, e.g. {sorted(missing)[:5]}"
    assert store_keys <= scenario.all_keys
    assert 0 < len(store_keys) < len(scenario.all_keys)


# ------------------------------------------------------------------------------------------- local mode


@pytest.mark.parametrize(
    ("key", "target"),
    [
        ("row", "local"),
        pytest.param("composite", "s3", marks=pytest.mark.s3),
        pytest.param("unique", "s3", marks=pytest.mark.s3),
        pytest.param("unique-composite", "s3-store", marks=pytest.mark.s3),
    ],
    indirect=["target"],
)
def test_user_udf_failure_keeps_finished_tasks_local(
    spark: SparkSession, spark_event_log: Path, target: Target, tmp_path: Path, key: str
) -> None:
    """local[2] runs each task once: the bad record fails the job; the rerun resumes exactly."""
    scenario = _scenario(spark, tmp_path, key)
    operator = FakeOperator(target)
    epoch1 = operator.begin()
    job1 = CheckpointedJob(spark, target.store_uri, epoch=epoch1, **target.options)
    first_log = scenario.key_log("run1")
    with pytest.raises(Exception, match=BadRecordError.__name__):
        run_job(
            spark,
            job1,
            inputs=scenario.inputs,
            output=target.output_uri,
            key=key,
            num_partitions=PARTITIONS,
            bad_event=scenario.bad_event,
            fail_marker=str(scenario.marker),
            key_log=str(first_log),
        )
    operator.end(epoch1, 1)
    finished = finished_write_tasks(spark_event_log, target.output_uri)
    finished_keys = keys_logged(first_log, [t.task_attempt_id for t in finished])

    epoch2 = operator.begin()  # its base is what counts as done
    sealed = done_keys(operator.store)
    _check_progress(sealed, finished_keys, scenario, len(finished))
    assert len([c for c in operator.store.inspection.valid_checkpoints() if c.epoch == epoch1]) >= len(finished)

    scenario.marker.unlink()  # the bad record is fixed
    second_log = scenario.key_log("run2")
    job2 = CheckpointedJob(spark, target.store_uri, epoch=epoch2, **target.options)
    summary = run_job(
        spark,
        job2,
        inputs=scenario.inputs,
        output=target.output_uri,
        key=key,
        num_partitions=PARTITIONS,
        key_log=str(second_log),
    )
    operator.end(epoch2, 0)
    pending = scenario.all_keys - sealed
    assert keys_logged(second_log) == pending, "the rerun's transformation saw exactly the keys not sealed"
    assert summary.keys == len(pending)
    assert summary.sealed_partitions == summary.partitions and not summary.degraded
    assert done_keys(operator.store) == scenario.all_keys
    result = operator.store.commit(output_roots=[target.output_uri])
    assert not result.unknown_files
    assert_exactly_once(target, scenario.inputs)
