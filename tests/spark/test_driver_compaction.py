"""The driver folds the seals of a write into segments (docs/store-api.md, "Segments"), on a real SparkSession.

After a write, whatever its writer (Spark's own for file keys, the Arrow writer for row keys), the
store holds no loose sealed manifest: the next ``begin_epoch``, ``progress`` and key read are a few
requests. What readers see is what the tasks sealed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from airflow_ckpt_provider.spark import CheckpointedJob
from tests.spark.helpers import FakeOperator, Target, assert_exactly_once, make_inputs
from tests.spark.jobs.pipeline import run_pipeline

pytestmark = pytest.mark.spark


def test_a_write_leaves_its_checkpoints_compacted(spark: SparkSession, target: Target, tmp_path: Path) -> None:
    # Spark's own writer (file keys) on local disk, the Arrow writer (row keys) on S3: both writers and both
    # backends for the price of two runs (the driver's compaction is the same code behind either writer).
    mode = "files" if target.name == "local" else "rows"
    inputs = make_inputs(tmp_path / "in", files=4)
    operator = FakeOperator(target)
    epoch = operator.begin()
    job = CheckpointedJob(spark, target.store_uri, epoch=epoch, **target.options)  # type: ignore[arg-type]
    summary = run_pipeline(spark, job, mode=mode, inputs=inputs, output=target.output_uri)
    store = target.store()
    sealed_loose = [c for c in store.state_reader.read().catalog.loose]
    segments = store.state_reader.segment_state().segments
    assert sealed_loose == []  # every seal is in a segment
    assert sum(s.checkpoints for s in segments) == summary.sealed_partitions > 0
    assert store.progress().sealed_partitions == summary.sealed_partitions
    operator.end(epoch, 0)
    store.commit([target.output_uri])
    assert_exactly_once(target, inputs)
