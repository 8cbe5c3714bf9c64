"""Resume scenarios on a real Spark standalone cluster (master + two single-core workers on distinct addresses).

Jobs go through ``spark-submit --master spark://127.0.0.1:P`` (client deploy mode),
so executors are separate JVMs with their own Python workers, as in production. A task failing
on the cluster (the user's UDF) and a lost executor are in tests/spark/test_row_keys_progress.py and
the campaign's cluster trials (tests/faults/test_cluster_trials.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from airflow_ckpt_provider.spark.paths import file_key
from ckpt_testkit.spark_cluster import SparkStandaloneCluster
from tests.spark.helpers import (
    JOB_SCRIPT,
    REPO_ROOT,
    FakeOperator,
    Submitted,
    Target,
    assert_exactly_once,
    done_keys,
    finish,
    job_spec,
    kill_group,
    make_inputs,
    run,
    start,
    wait_for,
)

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

#: Speculation that launches a copy of a task lingering past 1.5x the median once it ran 8 s. No copy
#: before 8 s: a first task pays the executor's Python start (seconds), so with a threshold of 1.5x
#: the median alone the copy could start, seal and win before attempt 0 sealed at all.
SPECULATION = {
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    "spark.speculation.multiplier": "1.5",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.minTaskRuntime": "8s",
    "spark.speculation.efficiency.enabled": "false",
}


def _argv(
    cluster: SparkStandaloneCluster,
    operator: FakeOperator,
    epoch: int,
    spec: str,
    extra: dict[str, str] | None = None,
) -> list[str]:
    conf = operator.confs(epoch) | {
        "spark.pyspark.python": sys.executable,
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.files.openCostInBytes": str(128 * 1024 * 1024),
        "spark.python.worker.reuse": "true",
        # Executors unpickle the test job's transform, which lives in this repository's tests package.
        "spark.executorEnv.PYTHONPATH": str(REPO_ROOT),
    }
    return cluster.submit_argv(JOB_SCRIPT, [spec], conf | (extra or {}))


def _submit(
    cluster: SparkStandaloneCluster,
    operator: FakeOperator,
    epoch: int,
    spec: str,
    *,
    conf: dict[str, str] | None = None,
    faults: list[dict[str, object]] | None = None,
) -> Submitted:
    """Submit like the operator does, and end the epoch as the submit ended."""
    submitted = run(_argv(cluster, operator, epoch, spec, conf), operator.env(faults=faults or ()))
    operator.end(epoch, submitted.returncode)
    return submitted


# On S3 only: the store and output on local disk are covered in local mode (test_resume_scenarios_submit.py);
# what the cluster adds is executors in their own JVMs, the same for either store.
@pytest.mark.s3
@pytest.mark.parametrize("target", ["s3"], indirect=True)
def test_cluster_driver_killed_then_rerun_resumes(
    spark_cluster: SparkStandaloneCluster, target: Target, tmp_path: Path
) -> None:
    """A killed driver on the cluster: SIGKILL the driver mid-job; the rerun reads only the files not sealed."""
    inputs = make_inputs(tmp_path / "in")
    operator = FakeOperator(target)
    spec = job_spec("files", inputs, target.output_uri, 8)
    epoch1 = operator.begin()
    slow = [{"action": "sleep", "seconds": 2, "at": "end"}]
    proc = start(_argv(spark_cluster, operator, epoch1, spec), operator.env(faults=slow))

    def sealed() -> int:
        return sum(1 for c in operator.store.inspection.valid_checkpoints() if c.epoch == epoch1)

    try:
        wait_for(lambda: sealed() >= 2 or proc.poll() is not None, 240, "two sealed partitions")
        assert proc.poll() is None, f"the job ended before it was killed:\n{finish(proc).tail()}"
    finally:
        kill_group(proc)
        proc.communicate()
    # The new epoch's base is what counts as done: an attempt of the failed run may still seal until then.
    epoch2 = operator.begin()
    done_before = done_keys(operator.store)
    everything = {file_key(p) for p in inputs}
    assert 0 < len(done_before) < len(everything)

    rerun = _submit(spark_cluster, operator, epoch2, spec)
    assert rerun.returncode == 0, rerun.tail()
    assert rerun.result is not None and rerun.result["keys"] == len(everything - done_before)
    assert rerun.result["input"]["files_pending"] == len(everything - done_before), "done files are never read"
    operator.store.commit(output_roots=[target.output_uri])
    assert_exactly_once(target, inputs)


# On S3 (the Arrow writer's seal races through conditional writes); Spark's own writer under speculation
# is the local-store test below.
@pytest.mark.s3
@pytest.mark.parametrize("target", ["s3"], indirect=True)
def test_speculative_duplicates_seal_and_only_one_counts(
    spark_cluster: SparkStandaloneCluster, target: Target, tmp_path: Path
) -> None:
    """Speculation: two attempts of one partition both seal; the commit keeps one.

    Partition 1's first attempt seals, then lingers (a failpoint after the seal), so
    the scheduler launches a speculative copy on the other worker once the attempt has
    run 8 s, which writes and seals again. The first seal is the valid one; the copy's
    files are orphans. The copy pauses 8 s before its seal: when the first attempt's
    writes are slow (S3 on a loaded machine), the copy starts before that attempt sealed,
    and without the pause it could finish first and get the first attempt killed before
    its seal (seen in 3 of 7 runs): then only one attempt seals and nothing is tested.
    """
    inputs = make_inputs(tmp_path / "in")
    operator = FakeOperator(target)
    spec = job_spec("rows", inputs, target.output_uri, 8, engine="arrow")  # the failpoint is in the Arrow writer
    epoch = operator.begin()
    speculation = SPECULATION | {
        "spark.executorEnv.CKPT_FAILPOINTS": (
            f"spark.task.after_seal.e{epoch}.p1.a0=sleep:40,spark.task.before_seal.e{epoch}.p1.a1=sleep:8"
        ),
    }
    submitted = _submit(spark_cluster, operator, epoch, spec, conf=speculation)
    assert submitted.returncode == 0, submitted.tail()
    attempts = [c for c in operator.store.inspection.list_checkpoints() if c.partition == 1]
    assert sorted(c.metadata["attempt"] for c in attempts) == [0, 1], "the speculative copy sealed too"
    valid = [c for c in operator.store.inspection.valid_checkpoints() if c.partition == 1]
    # Usually attempt 0 seals first (the copy starts during its post-seal pause), but a slow S3 write can
    # let the scheduler launch the copy earlier and the copy win: the first seal is the valid one either way.
    first = min(attempts, key=lambda c: (c.sealed_at, c.checkpoint_id))
    assert [c.checkpoint_id for c in valid] == [first.checkpoint_id], "the first seal of a partition is the valid one"
    duplicate = next(c for c in attempts if c.checkpoint_id != first.checkpoint_id)
    # Through the state reader: the driver's compaction may have folded the manifest into a segment.
    duplicate_files = {f.path for f in operator.store.parts.reader.files.files_of([duplicate])}
    result = operator.store.commit(output_roots=[target.output_uri])
    assert duplicate_files and duplicate_files <= set(result.deleted_files)
    assert_exactly_once(target, inputs)


def test_speculative_copy_with_spark_writer_wins_and_the_lingering_attempt_leaves_nothing(
    spark_cluster: SparkStandaloneCluster, tmp_path: Path
) -> None:
    """Speculation with Spark's own writer: the driver seals the first attempt Spark reports; the other is no output.

    Partition 1's first attempt hangs after its rows reached the writer (its file is
    open), so the scheduler launches a copy on the other worker after 8 s. The copy
    commits and is sealed; the first attempt is killed (its file deleted by the
    protocol's abort) or, if it commits late, ignored by Spark and deleted by the commit.
    """
    target = Target("local", f"file://{tmp_path}/store", f"file://{tmp_path}/out")
    inputs = make_inputs(tmp_path / "in")
    operator = FakeOperator(target)
    spec = job_spec("files", inputs, target.output_uri, 8, engine="spark")
    epoch = operator.begin()
    faults = [{"partition": 1, "attempt": 0, "action": "sleep", "seconds": 40, "at": "end"}]
    submitted = _submit(spark_cluster, operator, epoch, spec, conf=SPECULATION, faults=faults)
    assert submitted.returncode == 0, submitted.tail()
    summary = json.loads(next(line for line in submitted.stdout.splitlines() if line.startswith("SUMMARY "))[8:])
    assert summary["engine"] == "spark"
    sealed = [c for c in operator.store.inspection.list_checkpoints() if c.partition == 1]
    assert [c.metadata["attempt"] for c in sealed] == [1], "only the speculative copy, reported by Spark, is sealed"
    assert [c.metadata["writer"] for c in sealed] == ["spark"]
    operator.store.commit(output_roots=[target.output_uri])
    assert_exactly_once(target, inputs)
    assert operator.store.inspection.check().ok
