"""The resident Spark host arms each run's failpoints in the Python workers that run its tasks.

PySpark reuses a worker for the next task as soon as its last one ends, and the worker
may wait there across runs. ``armed_daemon`` must arm it when the task arrives: armed
when the wait began, a worker reused from an unarmed run ran the next run's tasks
unarmed. That is how a second round (an incremental run over 2 new input files, whose
2 tasks all land on idle workers of the round before) never crashed at its armed
point in two full campaigns (19 and 22 crashes "armed, never fired", nearly all with
file keys).
"""

from __future__ import annotations

import pytest

from airflow_ckpt_provider.store import RetentionPolicy
from ckpt_testkit.faults.campaign import Campaign
from ckpt_testkit.faults.plans import Crash, TrialPlan
from ckpt_testkit.faults.settings import CampaignSettings

pytestmark = [pytest.mark.faults, pytest.mark.spark]


def test_a_run_on_workers_reused_from_an_unarmed_run_meets_its_own_failpoints(
    campaign: Campaign, campaign_settings: CampaignSettings
) -> None:
    point = "spark.task.before_seal"
    plan = TrialPlan(
        campaign_seed=campaign_settings.seed,
        backend="local",
        index=1100,
        crash=Crash("spark.task.after_write", "raise", 1),
        resume_crash=None,
        commit_crashes=(),
        mode="files",
        num_partitions=8,
        max_records_per_file=None,
        policy=RetentionPolicy.RETAIN,
        rounds=2,
        round2_crash=Crash(point, "raise", 1),
        engine="arrow",
    )
    result = campaign.run_trial(plan)
    assert not result.violations, "\n".join(result.violations)
    # Round 1: the crash, then the unarmed resumed run; round 2 (on that run's idle workers): the crash.
    assert result.armed == [("spark.task.after_write", True), (point, True)], result.log
    assert result.rerun_checks >= 2, "both resumed runs started with keys sealed and were checked"
