"""The driver folds the seals of a write into segments (docs/store-api.md, "Segments"), on a real SparkSession.

A write whose seals reach the driver's threshold leaves them folded, whatever its writer (Spark's own
for file keys, the Arrow writer for row keys); a smaller write leaves them loose, for the commit to fold
(the job's executors do not wait on the driver for it). What readers see is what the tasks sealed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from airflow_ckpt_provider.spark import CheckpointedJob
from tests.spark.helpers import FakeOperator, Target, assert_exactly_once, make_inputs
from tests.spark.jobs.pipeline import run_pipeline

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("min_loose", [1, 500])
def test_a_write_folds_its_checkpoints_from_the_drivers_threshold(
    spark: SparkSession, target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, min_loose: int
) -> None:
    # Spark's own writer (file keys) on local disk, the Arrow writer (row keys) on S3: both writers and both
    # backends (the driver's compaction is the same code behind either writer).
    mode = "files" if target.name == "local" else "rows"
    inputs = make_inputs(tmp_path / "in", files=4)
    operator = FakeOperator(target)
    epoch = operator.begin()
    job = CheckpointedJob(spark, target.store_uri, epoch=epoch, **target.options)  # type: ignore[arg-type]
    opened = type(job.store.housekeeping).background_compaction
    monkeypatch.setattr(
        type(job.store.housekeeping),
        "background_compaction",
        lambda housekeeping, **kw: opened(housekeeping, **{**kw, "min_loose": min_loose}),
    )
    summary = run_pipeline(spark, job, mode=mode, inputs=inputs, output=target.output_uri)
    store = target.store()
    sealed_loose = [c for c in store.parts.reader.read().catalog.loose]
    segments = store.parts.reader.segments.segment_state().segments
    assert summary.sealed_partitions > 0
    if min_loose == 1:
        assert sealed_loose == []  # every seal is in a segment
        assert sum(s.checkpoints for s in segments) == summary.sealed_partitions
    else:  # a few seals, under the threshold: loose, and read as they are
        assert len(sealed_loose) == summary.sealed_partitions and not segments
    assert store.inspection.progress().sealed_partitions == summary.sealed_partitions
    operator.end(epoch, 0)
    store.commit([target.output_uri])
    assert not target.store().parts.reader.read().catalog.loose  # the commit folded them
    assert_exactly_once(target, inputs)
