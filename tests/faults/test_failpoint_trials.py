"""Crash anywhere, lose nothing, duplicate nothing: seeded failpoint and SIGKILL trials on each backend.

Each trial crashes the example job at a failpoint (raise or exit, at some hit) or
SIGKILLs its driver, resumes it (maybe crashing again), commits (maybe crashing
in the commit and retrying) and audits the output and the store
(:mod:`ckpt_testkit.faults.oracle`). The trial count is small here (see
``ckpt_testkit/faults/settings.py``); ``python -m bench.fault_campaign`` runs the large campaign.
"""

from __future__ import annotations

import pytest

from ckpt_testkit.faults.campaign import Campaign
from ckpt_testkit.faults.plans import Planner
from ckpt_testkit.faults.settings import CampaignSettings

pytestmark = [pytest.mark.faults, pytest.mark.spark]


@pytest.mark.parametrize("backend", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_failpoint_trials(
    backend: str, campaign: Campaign, planner: Planner, campaign_settings: CampaignSettings
) -> None:
    results = [campaign.run_trial(planner.trial(backend, i)) for i in range(campaign_settings.trials)]
    results += [
        campaign.run_trial(planner.trial(backend, i, own_driver=True)) for i in range(campaign_settings.submit_trials)
    ]
    violations = [f"[{r.trial_id}] {v} ({r.description})" for r in results for v in r.violations]
    assert not violations, f"seed {campaign_settings.seed}:\n" + "\n".join(violations)
    fired = [point for r in results for point, did_fire in r.armed if did_fire]
    assert len(results) < 2 or fired, "no armed crash fired in any trial: the campaign tested nothing"
