"""Fault trials of reprocess, rewind, undo and purge (ckpt_testkit/faults/reprocess_trials.py): a seeded
share of the (action, failpoint, crash kind) combinations on local disk and on the S3 server (store on
S3, output local), each judged by the campaign's oracle after the next run's commit.
``CKPT_FAULT_REPROCESS_TRIALS=36`` deals every combination (``python -m bench.fault_campaign`` does by
default); tests/store/test_reprocess_safety.py crashes every step in-process on both backends every time."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from ckpt_testkit.faults.campaign import CampaignReport
from ckpt_testkit.faults.reprocess_trials import deal, run_trial
from ckpt_testkit.faults.settings import CampaignSettings

pytestmark = pytest.mark.faults


def test_every_combination_is_dealt() -> None:
    trials = deal("any")
    assert {(t.action, t.point, t.kind) for t in trials} == {(t.action, t.point, t.kind) for t in deal("other")}
    assert len(trials) == 2 * (2 * 6 + 3 + 3)  # reprocess and rewind meet 6 points, undo 3, purge 3; two kinds


def _trials(
    backend: str, settings: CampaignSettings, report: CampaignReport, tmp_path: Path, inputs: list[str], **where: Any
) -> list[str]:
    found: list[str] = []
    for trial in deal(str(settings.seed), settings.reprocess_trials):
        out = tmp_path / f"t{trial.index}"
        out.mkdir()
        store_uri = where.get("store_uri") or f"file://{out}-store"
        if backend == "s3":
            store_uri = f"{store_uri}/{uuid.uuid4().hex[:8]}"
        result = run_trial(
            trial,
            backend=backend,
            store_uri=store_uri,
            options=where.get("options", {}),
            output_uri=f"file://{out}",
            inputs=inputs,
        )
        report.add(result)
        found += [f"{trial.describe()}: {v}" for v in result.violations]
    return found


def test_seeded_failpoints_on_local_disk(
    tmp_path: Path, fault_inputs: list[str], campaign_settings: CampaignSettings, campaign_report: CampaignReport
) -> None:
    found = _trials("local", campaign_settings, campaign_report, tmp_path, fault_inputs)
    assert not found, "\n".join(found)


@pytest.mark.s3
def test_seeded_failpoints_on_the_s3_server(
    tmp_path: Path,
    fault_inputs: list[str],
    campaign_settings: CampaignSettings,
    campaign_report: CampaignReport,
    s3_bucket: str,
    s3_options: dict[str, Any],
) -> None:
    where = {"store_uri": f"s3://{s3_bucket}/ckpt", "options": s3_options}
    found = _trials("s3", campaign_settings, campaign_report, tmp_path, fault_inputs, **where)
    assert not found, "\n".join(found)
