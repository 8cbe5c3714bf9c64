"""Fault trials of reprocess, rewind, undo and purge (ckpt_testkit/faults/reprocess_trials.py): a seeded
share of the (action, failpoint, crash kind) combinations on local disk and on the S3 server (store on
S3, output local), each judged by the campaign's oracle after the next run's commit.
``CKPT_FAULT_REPROCESS_TRIALS=36`` deals every combination (about 10 minutes on a busy 2-core machine);
tests/store/test_reprocess_safety.py crashes every step in-process on both backends every time."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from ckpt_testkit.faults.reprocess_trials import deal, run_trial
from ckpt_testkit.faults.settings import CampaignSettings
from tests.faults.store_api_job import run_job

pytestmark = pytest.mark.faults


def test_every_combination_is_dealt() -> None:
    trials = deal("any")
    assert {(t.action, t.point, t.kind) for t in trials} == {(t.action, t.point, t.kind) for t in deal("other")}
    assert len(trials) == 2 * (2 * 6 + 3 + 3)  # reprocess and rewind meet 6 points, undo 3, purge 3; two kinds


def _run(trial: Any, store_uri: str, options: dict[str, Any], out: Path, inputs: list[str]) -> list[str]:
    out.mkdir(parents=True)
    return run_trial(
        trial, store_uri=store_uri, options=options, output_uri=f"file://{out}", inputs=inputs, run_job=run_job
    )


def test_seeded_failpoints_on_local_disk(
    tmp_path: Path, fault_inputs: list[str], campaign_settings: CampaignSettings
) -> None:
    found: list[str] = []
    for trial in deal(str(campaign_settings.seed), campaign_settings.reprocess_trials):
        where = tmp_path / f"t{trial.index}"
        found += [
            f"{trial.describe()}: {v}" for v in _run(trial, f"file://{where}/store", {}, where / "out", fault_inputs)
        ]
    assert not found, "\n".join(found)


@pytest.mark.s3
def test_seeded_failpoints_on_the_s3_server(
    tmp_path: Path,
    fault_inputs: list[str],
    campaign_settings: CampaignSettings,
    s3_bucket: str,
    s3_options: dict[str, Any],
) -> None:
    found: list[str] = []
    for trial in deal(str(campaign_settings.seed), campaign_settings.reprocess_trials):
        store_uri = f"s3://{s3_bucket}/ckpt/{uuid.uuid4().hex[:8]}"
        out = tmp_path / f"t{trial.index}"
        found += [f"{trial.describe()}: {v}" for v in _run(trial, store_uri, s3_options, out, fault_inputs)]
    assert not found, "\n".join(found)
