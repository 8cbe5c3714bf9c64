"""Campaign trials of a mapped DAG: two mapped instances of a checkpointed spark-submit running at once.

Real Airflow (SQLite metadata DB, ``airflow dags trigger``, ``airflow tasks test --map-index N``
processes side by side), real spark-submits. One instance (the victim) crashes: its whole process
group SIGKILLed after its first checkpoint. The other must finish undisturbed; the victim's retry
must skip exactly what it sealed; after each instance's commit every tenant's orders are in its
output exactly once (``ckpt_testkit/faults/mapped_trials.py``; ``python -m bench.fault_campaign
--mapped-trials N`` deals the crash kinds at random, the user's bad record and our executor
failpoints among them).

CI runs the kill only. A victim failing on a bad record in its own code (the trial ``bad-record``,
three spark-submits and four Airflow processes) is shown without it: in a mapped DAG, the failed
instance's progress kept and its next run skipping exactly that while the others finish, by
tests/operators/test_mapped_tenants.py (and example 4's tests/dags_examples/test_ckpt_tenant_orders.py);
the progress oracle on Spark's event log after a user-code failure, by tests/faults/test_user_code_failpoints.py
and the cluster trials; two instances running at once, one crashing, by the kill here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_testkit.faults.campaign import CampaignReport
from ckpt_testkit.faults.mapped_trials import KILL_INSTANCE, MappedTrial, install, run_trial
from ckpt_testkit.faults.settings import CampaignSettings
from tests.support.airflow_harness import AirflowHarness

pytestmark = [pytest.mark.faults, pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(2400)]

DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"


def test_mapped_trial_instance_killed(
    airflow_harness: AirflowHarness,
    campaign_settings: CampaignSettings,
    campaign_report: CampaignReport,
    tmp_path: Path,
) -> None:
    install(airflow_harness, DAGS)
    trial = MappedTrial(
        campaign_settings.seed, 1, victim=0, point=KILL_INSTANCE, kind="kill", kill_after=0.5, row_delay_ms=10
    )
    result = run_trial(trial, airflow_harness, tmp_path)
    campaign_report.add(result)
    assert not result.violations, "\n".join(result.log + result.violations)
    assert result.armed == [(trial.point, True)], result.log
    # The victim sealed some of its work before the crash, and its retry skipped exactly that.
    assert result.rerun_checks == 1 and result.sealed_at_start > 0, result.log
