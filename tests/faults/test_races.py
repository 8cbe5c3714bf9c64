"""Two submits on one store at the same moment: exactly one proceeds, the other fails fast and clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_testkit.faults.campaign import CampaignReport
from ckpt_testkit.faults.races import race_begin_epoch, race_spark_submits
from ckpt_testkit.faults.settings import CampaignSettings
from ckpt_testkit.seaweed import SeaweedServer

pytestmark = pytest.mark.faults


@pytest.mark.parametrize("backend", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_begin_epoch_races(
    backend: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    campaign_settings: CampaignSettings,
    campaign_report: CampaignReport,
) -> None:
    if backend == "s3":
        server: SeaweedServer = request.getfixturevalue("s3_server")
        bucket = request.getfixturevalue("fault_bucket")
        uri, options = f"s3://{bucket}/races/{tmp_path.name}", server.options()
    else:
        uri, options = f"file://{tmp_path / 'store'}", {}
    race = race_begin_epoch(f"begin_epoch/{backend}", uri, options, campaign_settings.races)
    campaign_report.add_race(race)
    print(race["summary"])
    assert not race["violations"], "\n".join(race["violations"][:20])


@pytest.mark.spark
def test_two_spark_submits_started_together(
    tmp_path: Path,
    fault_inputs: list[str],
    campaign_settings: CampaignSettings,
    campaign_report: CampaignReport,
) -> None:
    for pair in range(campaign_settings.double_submits):
        race = race_spark_submits(
            f"spark-submit pair {pair}",
            store_uri=f"file://{tmp_path / f'store-{pair}'}",
            output_uri=f"file://{tmp_path / f'out-{pair}'}",
            options={},
            inputs=fault_inputs,
            log_dir=tmp_path / "logs",
            mode=("rows", "files")[pair % 2],
        )
        campaign_report.add_race(race)
        print(race["summary"])
        assert not race["violations"], "\n".join(race["violations"])
