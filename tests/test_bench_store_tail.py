"""``bench/store_scale.py --tail`` (a store whose compaction fell behind) refuses a busy machine and, on a tiny
store, measures what it says: the reads of a resumed store with its request counts, the growth
between sizes, and the loose tail of concurrent sealers against the bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench import quiet

ROOT = Path(__file__).resolve().parents[1]


def _tail(limit: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != quiet.PARENT_VERDICT}
    env["CKPT_BENCH_LOAD_LIMIT"] = limit
    command = [sys.executable, "bench/store_scale.py", "--tail", "--backends", "local", "--out", str(out)]
    command += ["--sizes", "20,40", "--concurrent", "60", "--sealers", "4", "--max-loose", "16", "--keys", "5"]
    return subprocess.run([*command, *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_a_busy_machine_is_refused(tmp_path: Path) -> None:
    done = _tail("-1", tmp_path / "tail.json")
    assert done.returncode == quiet.EXIT_NOISY, done.stderr
    assert "refusing to benchmark" in done.stderr
    assert not (tmp_path / "tail.json").exists()


def test_a_tiny_noisy_run_measures_reads_growth_and_the_tail(tmp_path: Path) -> None:
    out = tmp_path / "tail.json"
    done = _tail("-1", out, "--allow-noisy")
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["machine"]["noisy"] is True and result["machine"]["end"] is not None
    rows = {(r["variant"], r["checkpoints"]): r for r in result["reads"]}
    assert set(rows) == {("folds-failing", 20), ("bounded", 20), ("folds-failing", 40), ("bounded", 40)}
    for row in rows.values():
        for op in ("keys_read", "progress", "begin_epoch", "commit"):
            assert row[op]["requests"] > 0 and row[op]["seconds"] > 0
    assert rows[("folds-failing", 40)]["loose_before"] == 40  # every fold failed: all of them loose
    assert rows[("bounded", 40)]["loose_before"] <= 16
    assert {g["operation"] for g in result["growth"]} == {"keys_read", "progress", "begin_epoch", "commit"}
    (concurrent,) = result["concurrent"]
    assert concurrent["checkpoints"] == 60 and concurrent["bound"] == 16
    assert concurrent["tail_max"] <= 16 and concurrent["folds"] > 0
    assert all(line.startswith(quiet.NOISY_MARK) for line in done.stdout.splitlines() if line.strip())


def test_variants_choose_the_stores_filled(tmp_path: Path) -> None:
    out = tmp_path / "tail.json"
    done = _tail("-1", out, "--allow-noisy", "--variants", "bounded", "--sizes", "20", "--concurrent", "0")
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert [(r["variant"], r["checkpoints"]) for r in result["reads"]] == [("bounded", 20)]
    assert result["concurrent"] == []
    refused = _tail("-1", out, "--allow-noisy", "--variants", "loose")
    assert refused.returncode != 0 and "--variants takes" in refused.stderr
