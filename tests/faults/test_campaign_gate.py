"""A campaign violation fails the pytest run: scripts/test.sh reruns a failed test once, and a rerun that
passed used to hide a violation its first attempt recorded (the report still listed it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
from ckpt_testkit.faults.campaign import TrialResult

attempts = []


def test_a_trial(campaign_report):
    attempts.append(1)
    if len(attempts) == 1:  # broken only on the first attempt: a race
        campaign_report.add(TrialResult("local#1", "local", "probe", violations=["1 rows missing"]))
        assert not FAIL_THE_TEST, "1 rows missing"
"""


def _run(tmp_path: Path, *, fail_the_test: bool, workers: int = 0) -> subprocess.CompletedProcess[str]:
    probe = tmp_path / "test_probe.py"
    probe.write_text(f"FAIL_THE_TEST = {fail_the_test}\n" + PROBE)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--reruns", "1"]
    if workers:  # as scripts/test.sh runs the suite: the campaign on an xdist worker
        command += ["-n", str(workers), "--dist", "loadfile"]
    command += ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), "-p", "tests.faults.conftest"]
    return subprocess.run([*command, str(probe)], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_trial_that_breaks_a_promise_once_is_not_rerun_into_a_pass(tmp_path: Path) -> None:
    run = _run(tmp_path, fail_the_test=True)
    assert run.returncode == pytest.ExitCode.TESTS_FAILED, run.stdout
    assert "1 failed" in run.stdout and "rerun" not in run.stdout.splitlines()[-1]


@pytest.mark.parametrize("workers", [0, 1], ids=["one-process", "xdist-worker"])
def test_a_violation_in_the_report_fails_the_run_even_if_every_test_passed(tmp_path: Path, workers: int) -> None:
    run = _run(tmp_path, fail_the_test=False, workers=workers)
    assert run.returncode == pytest.ExitCode.TESTS_FAILED, run.stdout
    assert "1 passed" in run.stdout and "campaign violations: the run fails" in run.stdout
