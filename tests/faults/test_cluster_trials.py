"""Campaign trials on a real Spark standalone cluster (master + two single-core workers, client mode).

Each crash kind a cluster adds over local mode runs on purpose once, so CI always covers
it; the large campaign (``--cluster-trials``) deals them at random with the rest:

* an executor JVM SIGKILLed while the write stage runs (a lost machine), with one attempt per
  task (the job fails; the finished tasks must stay sealed) and with two (Spark retries the
  lost tasks on the other worker; the run succeeds);
* the user's transformation failing on an executor (``user.after_exchange``) with several rows
  per key, store and output on S3, the progress oracle reading the run's own event log (this case
  was also tests/spark/test_row_keys_progress.py's cluster test, two more cluster applications for
  the same guarantee: that file keeps local mode's key layouts).

After each: resume on the cluster, commit, and the oracles (exactly once for a plain reader,
no committed file deleted, no orphan, ``check()`` clean, progress kept, no sealed key
processed again).
"""

from __future__ import annotations

import pytest

from airflow_ckpt_provider.store import RetentionPolicy
from ckpt_testkit.faults.campaign import Campaign
from ckpt_testkit.faults.plans import EXECUTOR_KILL, Crash, TrialPlan
from ckpt_testkit.faults.settings import CampaignSettings
from ckpt_testkit.spark_cluster import SparkStandaloneCluster

pytestmark = [pytest.mark.faults, pytest.mark.spark, pytest.mark.cluster]

CASES = [
    # (crash, maxFailures, key mode, writer, backend)
    (Crash(EXECUTOR_KILL, "kill", kill_after_first_checkpoint=0.3), 1, "rows-unique", "arrow", "local"),
    (Crash(EXECUTOR_KILL, "kill", kill_after_first_checkpoint=0.3), 2, "rows-composite", "spark", "local"),
    (Crash("user.after_exchange", "raise", 2), 1, "rows", "arrow", "s3"),
]


@pytest.mark.parametrize(
    ("crash", "max_failures", "mode", "engine", "backend"),
    [
        pytest.param(*case, id=name, marks=[pytest.mark.s3] if case[-1] == "s3" else [])
        # An "s3" in the id is what gives the campaign its S3 backend (tests/faults/conftest.py).
        for case, name in zip(CASES, ["lost-1", "lost-2", "user-udf-s3"], strict=True)
    ],
)
def test_cluster_trial(
    campaign: Campaign,
    campaign_settings: CampaignSettings,
    spark_cluster: SparkStandaloneCluster,
    crash: Crash,
    max_failures: int,
    mode: str,
    engine: str,
    backend: str,
) -> None:
    campaign.cluster = spark_cluster
    plan = TrialPlan(
        campaign_seed=campaign_settings.seed,
        backend=backend,
        index=2000 + [c[0] for c in CASES].index(crash) + max_failures,
        crash=crash,
        resume_crash=None,
        commit_crashes=(),
        mode=mode,
        num_partitions=8,
        max_records_per_file=None,
        policy=RetentionPolicy.RETAIN,
        rounds=1,
        own_driver=True,
        cluster=True,
        max_failures=max_failures,
        engine=engine,
    )
    result = campaign.run_trial(plan)
    assert not result.violations, "\n".join(result.log + result.violations)
    assert result.armed == [(crash.point, True)], result.log
    if max_failures == 1:
        # The crash failed the run and the driver lived: the progress oracle read its event log.
        assert result.progress_checks == 1, result.log
    if crash.point == "user.after_exchange":
        # Each worker's first task finished and sealed before its second failed: the resumed run started
        # with those keys sealed, and the rerun oracle checked it processed none of them.
        assert result.finished_tasks > 0 and result.rerun_checks >= 1 and result.sealed_at_start > 0, result.log
