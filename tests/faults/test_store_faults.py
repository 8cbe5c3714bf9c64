"""The store fails under a running job: resets, stalls past the timeout, 500/503, revoked credentials.

The S3 store sits behind the fault proxy; the output is on local disk. The job
must complete (circuit breaker), report ``degraded`` truthfully, and the later
commit must delete nothing it cannot prove orphaned (see :mod:`ckpt_testkit.faults.store_faults`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_testkit.faults.campaign import CampaignReport
from ckpt_testkit.faults.plans import Planner
from ckpt_testkit.faults.processes import SparkHost
from ckpt_testkit.faults.settings import CampaignSettings
from ckpt_testkit.faults.store_faults import S3Target, run_store_fault_trial
from ckpt_testkit.seaweed import SeaweedServer

pytestmark = [pytest.mark.faults, pytest.mark.spark, pytest.mark.s3]


def test_store_faults_during_the_write_stage(
    spark_host: SparkHost,
    s3_server: SeaweedServer,
    fault_bucket: str,
    fault_inputs: list[str],
    fault_work_dir: Path,
    planner: Planner,
    campaign_report: CampaignReport,
    campaign_settings: CampaignSettings,
) -> None:
    target = S3Target(s3_server, fault_bucket)
    results = [
        run_store_fault_trial(
            planner.store_fault(i),
            host=spark_host,
            target=target,
            inputs=fault_inputs,
            work_dir=fault_work_dir / "store-faults",
            report=campaign_report,
        )
        for i in range(campaign_settings.store_trials)
    ]
    violations = [f"[{r.trial_id}] {v} ({r.description})" for r in results for v in r.violations]
    assert not violations, f"seed {campaign_settings.seed}:\n" + "\n".join(violations)
    if len(results) >= 5:  # one trial per fault: at least one must have tripped a breaker
        assert any(r.degraded for r in results), "no store fault degraded any run: the faults missed the job"
