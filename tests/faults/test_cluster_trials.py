"""Campaign trials on a real Spark standalone cluster (master + two single-core workers, client mode).

Each crash kind a cluster adds over local mode runs on purpose once, so CI always covers
it; the large campaign (``--cluster-trials``) deals them at random with the rest:

* an executor JVM SIGKILLed while the write stage runs (a lost machine), with one attempt per
  task (the job fails; the finished tasks must stay sealed) and with two (Spark retries the
  lost tasks on the other worker; the run succeeds);
* the user's transformation failing on an executor (``user.after_exchange``), the progress
  oracle reading the run's own event log.

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
    # (crash, maxFailures, key mode, writer)
    (Crash(EXECUTOR_KILL, "kill", kill_after_first_checkpoint=0.3), 1, "rows-unique", "arrow"),
    (Crash(EXECUTOR_KILL, "kill", kill_after_first_checkpoint=0.3), 2, "rows-composite", "spark"),
    (Crash("user.after_exchange", "raise", 2), 1, "rows", "arrow"),
]


@pytest.mark.parametrize(("crash", "max_failures", "mode", "engine"), CASES, ids=["lost-1", "lost-2", "user-udf"])
def test_cluster_trial(
    campaign: Campaign,
    campaign_settings: CampaignSettings,
    spark_cluster: SparkStandaloneCluster,
    crash: Crash,
    max_failures: int,
    mode: str,
    engine: str,
) -> None:
    campaign.cluster = spark_cluster
    plan = TrialPlan(
        campaign_seed=campaign_settings.seed,
        backend="local",
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
