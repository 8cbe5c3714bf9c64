"""Benchmarks refuse a busy machine, or mark every figure noisy (bench/quiet.py).

A busy machine is played by lowering the limit below any load average (``CKPT_BENCH_LOAD_LIMIT``);
the benchmark itself is real (``bench/store_keys.py`` on a tiny local store)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench import quiet

ROOT = Path(__file__).resolve().parents[1]


def _store_keys(limit: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != quiet.PARENT_VERDICT}
    env["CKPT_BENCH_LOAD_LIMIT"] = limit
    command = [sys.executable, "bench/store_keys.py", "--checkpoints", "3", "--keys", "5", "--backends", "local"]
    return subprocess.run([*command, *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_busy_machine_is_refused_before_anything_runs() -> None:
    done = _store_keys("-1")
    assert done.returncode == quiet.EXIT_NOISY, done.stderr
    assert "refusing to benchmark" in done.stderr and "load average" in done.stderr
    assert "get_checkpointed_keys" not in done.stdout  # no table was printed


def test_allow_noisy_marks_every_printed_line() -> None:
    done = _store_keys("-1", "--allow-noisy")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert any("get_checkpointed_keys" in line for line in lines)
    assert lines and all(line.startswith(quiet.NOISY_MARK) for line in lines), lines
    assert "NOISY RUN" in lines[0]


def test_a_quiet_machine_reports_its_load_at_start_and_end() -> None:
    done = _store_keys("1000")
    assert done.returncode == 0, done.stderr
    assert quiet.NOISY_MARK not in done.stdout
    assert "quiet machine: load average" in done.stdout
    assert "machine at start: load average" in done.stdout and "at end: load average" in done.stdout


def test_a_benchmark_started_by_a_gated_one_takes_its_verdict() -> None:
    env_verdict = {quiet.PARENT_VERDICT: "quiet"}
    env = {**os.environ, **env_verdict, "CKPT_BENCH_LOAD_LIMIT": "-1"}
    command = [sys.executable, "bench/store_keys.py", "--checkpoints", "3", "--keys", "5", "--backends", "local"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "verdict of the benchmark that started this one (quiet)" in done.stdout


def test_busy_processes_reads_the_state_after_the_command_name(tmp_path: Path) -> None:
    for pid, stat in {"11": "11 (a) b) R 1 2", "12": "12 (sleepy) S 1 2", "13": "13 (x y) R 1"}.items():
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "stat").write_text(stat)
    assert quiet.busy_processes(tmp_path) == 2


#: Scripts under bench/ that time nothing: fault campaigns (they count violations) and report builders.
NOT_TIMED = {"fault_campaign.py", "histories.py", "merge_resume.py", "report.py"}


def test_every_timing_script_goes_through_the_gate() -> None:
    """A new benchmark that forgets the gate would print figures from a busy machine unmarked."""
    scripts = [p for p in sorted((ROOT / "bench").glob("*.py")) if "__main__" in p.read_text()]
    assert len(scripts) > len(NOT_TIMED)
    ungated = [
        p.name
        for p in scripts
        if p.name not in NOT_TIMED and not ("quiet.gate(" in p.read_text() and "quiet.add_argument(" in p.read_text())
    ]
    assert ungated == [], f"benchmarks that skip bench/quiet.py's gate: {ungated}"
