"""Crashes in the user's own code, with the progress oracle: finished tasks stay sealed, the rest resumes.

The random trials of ``test_failpoint_trials`` deal these failpoints too; here each
one runs on purpose, once per distinct failure kind, so CI always covers them:

* ``user.before_exchange`` with row keys of several rows per key: the user's parsing
  step fails on the map side of ``skip_completed``'s exchange (nothing is written yet);
* ``user.after_exchange`` with such keys (Arrow writer): the user's transformation fails
  in the write stage, where the tasks that finished must stay sealed (Spark's event log
  says which finished);
* the same with a composite key (two columns, a struct in the store).

After the crash, the rerun oracle checks that the resumed run sent none of the keys
sealed by the failed run through the user's transformation again.

The same write-stage failure with unique keys (no exchange) is checked by
tests/spark/test_row_keys_progress.py (``test_user_udf_failure_keeps_finished_tasks_local``,
cases ``unique`` and ``unique-composite``: the writer ``auto`` picks, Spark's own for an
output on local disk) with the same event-log progress oracle, so it is not repeated here.
"""

from __future__ import annotations

import pytest

from airflow_ckpt_provider.store import RetentionPolicy
from ckpt_testkit.faults.campaign import Campaign
from ckpt_testkit.faults.plans import Crash, TrialPlan
from ckpt_testkit.faults.settings import CampaignSettings

pytestmark = [pytest.mark.faults, pytest.mark.spark]

CASES = [
    ("user.before_exchange", "rows", "arrow"),
    ("user.after_exchange", "rows", "arrow"),
    ("user.after_exchange", "rows-composite", "arrow"),
]


@pytest.mark.parametrize(("point", "mode", "engine"), CASES)
def test_user_code_crash_keeps_finished_tasks(
    campaign: Campaign, campaign_settings: CampaignSettings, point: str, mode: str, engine: str
) -> None:
    plan = TrialPlan(
        campaign_seed=campaign_settings.seed,
        backend="local",
        index=1000 + CASES.index((point, mode, engine)),
        # The second task a Python worker runs fails: the first ones finish (local[2]: no retry).
        crash=Crash(point, "raise", 2),
        resume_crash=None,
        commit_crashes=(),
        mode=mode,
        num_partitions=8,
        max_records_per_file=None,
        policy=RetentionPolicy.DELETE_AFTER_SUCCESS,
        rounds=1,
        engine=engine,
    )
    # A fresh Spark host, so a fresh pool of Python workers: "the second task a worker runs" is a
    # promise only there. Idle workers left by the trials before (the suite runs them in one host)
    # take one task each, so no worker ran two and the crash never fired (seen in full runs only).
    campaign.host.stop()
    result = campaign.run_trial(plan)
    assert not result.violations, "\n".join(result.violations)
    assert result.armed == [(point, True)], "the crash in the user's code ended the first run"
    assert result.progress_checks == 1
    if point == "user.after_exchange":
        assert result.finished_tasks > 0, "write tasks finished before the crash: the oracle had keys to check"
        # The resumed run started with the finished tasks' keys sealed, and the rerun oracle checked it.
        assert result.rerun_checks >= 1 and result.sealed_at_start > 0, result.log
