"""Campaign trials of a mapped DAG: two mapped instances of a checkpointed spark-submit running at once.

Real Airflow (SQLite metadata DB, ``airflow dags trigger``, ``airflow tasks test --map-index N``
processes side by side), real spark-submits. One instance (the victim) crashes: its user code
raising on a bad record, or its whole process group SIGKILLed after its first checkpoint. The
other must finish undisturbed; the victim's retry must skip exactly what it sealed; after each
instance's commit every tenant's orders are in its output exactly once
(``ckpt_testkit/faults/mapped_trials.py``; ``python -m bench.fault_campaign --mapped-trials N``
deals the crash kinds at random, our executor failpoints among them).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ckpt_testkit.faults.campaign import CampaignReport
from ckpt_testkit.faults.mapped_trials import BAD_RECORD, KILL_INSTANCE, MappedTrial, install, run_trial
from ckpt_testkit.faults.settings import CampaignSettings
from tests.support.airflow_harness import AirflowHarness

pytestmark = [pytest.mark.faults, pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(2400)]

DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"


@pytest.mark.parametrize(
    "trial",
    [
        MappedTrial(0, 0, victim=1, point=BAD_RECORD, kind="raise", bad_order=250),
        MappedTrial(0, 1, victim=0, point=KILL_INSTANCE, kind="kill", kill_after=0.5, row_delay_ms=10),
    ],
    ids=["bad-record", "instance-killed"],
)
def test_mapped_trial(
    airflow_harness: AirflowHarness,
    campaign_settings: CampaignSettings,
    campaign_report: CampaignReport,
    trial: MappedTrial,
    tmp_path: Path,
) -> None:
    install(airflow_harness, DAGS)
    trial = dataclasses.replace(trial, seed=campaign_settings.seed)
    result = run_trial(trial, airflow_harness, tmp_path)
    campaign_report.add(result)
    assert not result.violations, "\n".join(result.log + result.violations)
    assert result.armed == [(trial.point, True)], result.log
    # The victim sealed some of its work before the crash, and its retry skipped exactly that.
    assert result.rerun_checks == 1 and result.sealed_at_start > 0, result.log
    if trial.point == BAD_RECORD:
        assert result.progress_checks == 1 and result.finished_tasks > 0, result.log
