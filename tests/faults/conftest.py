"""Fixtures of the fault campaign: its settings and seed, one resident Spark host, inputs, backends, report.

The seed is printed at the start and in the report at the end (also written to
``test-output/fault-campaign.txt``): ``CKPT_FAULT_SEED=<seed>`` replays the same trials.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt_testkit.faults.campaign import Backend, Campaign, CampaignReport
from ckpt_testkit.faults.plans import Planner
from ckpt_testkit.faults.processes import SparkHost
from ckpt_testkit.faults.settings import CampaignSettings
from ckpt_testkit.faults.workload import make_inputs
from ckpt_testkit.seaweed import SeaweedServer

REPORT_PATH = Path(__file__).resolve().parents[2] / "test-output" / "fault-campaign.txt"
_reports: list[CampaignReport] = []


@pytest.fixture(scope="session")
def campaign_settings() -> CampaignSettings:
    settings = CampaignSettings.from_env()
    print(f"\nfault campaign seed {settings.seed} (replay: {settings.replay_hint()})")
    return settings


@pytest.fixture(scope="session")
def fault_work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("faults")


@pytest.fixture(scope="session")
def fault_inputs(fault_work_dir: Path) -> list[str]:
    return make_inputs(fault_work_dir / "inputs")


@pytest.fixture(scope="session")
def spark_host(fault_work_dir: Path) -> Iterator[SparkHost]:
    """One resident local[2] Spark driver for every in-session trial."""
    host = SparkHost(fault_work_dir / "host")
    host.start()
    yield host
    host.stop()


@pytest.fixture(scope="session")
def campaign_report(campaign_settings: CampaignSettings) -> CampaignReport:
    report = CampaignReport(campaign_settings.seed)
    _reports.append(report)
    return report


@pytest.fixture(scope="session")
def planner(campaign_settings: CampaignSettings) -> Planner:
    return Planner(campaign_settings.seed)


@pytest.fixture(scope="session")
def fault_bucket(s3_server: SeaweedServer) -> str:
    """One bucket for the campaign's S3 trials (each trial uses its own prefix)."""
    bucket = s3_server.create_bucket("fault-campaign")
    s3_server.client().put_object(Bucket=bucket, Key="warm-up", Body=b"")  # the bucket's volume exists
    return bucket


@pytest.fixture(scope="session")
def campaign_backends(fault_work_dir: Path) -> dict[str, Backend]:
    """Backends by name; ``s3`` is added on first use by an S3 test (so local runs need no server)."""
    return {"local": Backend("local", f"file://{fault_work_dir / 'local'}")}


@pytest.fixture
def campaign(
    request: pytest.FixtureRequest,
    campaign_settings: CampaignSettings,
    campaign_report: CampaignReport,
    campaign_backends: dict[str, Backend],
    spark_host: SparkHost,
    fault_inputs: list[str],
    fault_work_dir: Path,
) -> Campaign:
    if "s3" in request.node.name and "s3" not in campaign_backends:
        server: SeaweedServer = request.getfixturevalue("s3_server")
        bucket = request.getfixturevalue("fault_bucket")
        campaign_backends["s3"] = Backend("s3", f"s3://{bucket}/trials", server.options())
    return Campaign(
        campaign_settings.seed,
        fault_work_dir,
        spark_host,
        fault_inputs,
        campaign_backends,
        report=campaign_report,
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Campaign tests are never rerun. scripts/test.sh reruns a failed test once (infrastructure flakes
    on 2 cores), but a rerun repeats the same seeded trials: a promise broken only on the first attempt
    is a race in our code, and the rerun's pass hid it (only the report kept the violation)."""
    if not config.pluginmanager.hasplugin("rerunfailures"):
        return
    for item in items:
        if "campaign_report" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.flaky(reruns=0))


def _finished() -> list[tuple[str, int]]:
    """This process's campaign reports, as (text, violations)."""
    return [(report.format(), len(report.violations)) for report in _reports if report.trials or report.races]


#: Reports of the xdist workers (``pytest -n``) that ran campaign files, received as each finishes.
_from_workers: list[tuple[str, int]] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """The controller of ``pytest -n`` collects the reports of each worker that ran campaign files."""
    _from_workers.extend(tuple(entry) for entry in getattr(node, "workeroutput", {}).get("ckpt_campaign", []))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A violation any campaign recorded fails the run, whichever test or attempt (or xdist worker)
    recorded it: a worker hands its reports to the controller, which decides the exit status."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["ckpt_campaign"] = _finished()
        return
    if exitstatus == pytest.ExitCode.OK and any(violations for _, violations in _finished() + _from_workers):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The report of each process that ran trials (with ``pytest -n``, each worker that ran a campaign
    file has its own resident Spark host and report), printed and written one after the other."""
    texts = []
    for text, violations in _finished() + _from_workers:
        terminalreporter.write_sep("=", "fault campaign report")
        terminalreporter.write_line(text)
        if violations:
            terminalreporter.write_line(f"{violations} campaign violations: the run fails", red=True)
        texts.append(text)
    if texts:
        REPORT_PATH.parent.mkdir(parents=True, exist_ok=True)
        REPORT_PATH.write_text("\n\n".join(texts) + "\n")
