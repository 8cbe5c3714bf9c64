"""Merge a partial run of ``resume_vs_alternatives.py`` into ``bench/results/resume.json``.

    .venv/bin/python bench/merge_resume.py NEW.json [--into bench/results/resume.json] [--commit TEXT]

A run with ``--variants plain,ckpt-rows`` re-measures row keys without re-running the
other variants. Comparisons must stay within one run (a baseline measured beside
what it is compared with), so the merged file records which run measured what:

* ``runs``: per run its date, commit, load averages, ``spark-submit`` start+stop and
  the variants it measured (the file's existing results become run ``1``);
* each entry of ``variants`` has ``run``; a variant of the new run replaces the old one,
  except ``plain``: the new run's plain is kept as ``baselines[run]["plain"]`` (the
  baseline of that run's variants) and the old plain stays the baseline of the others.

The report (``bench/report.py``) compares each variant with the plain and streaming
runs of its own run only. Refuses to merge runs of different scales or data.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
#: Variants a new run keeps beside the old ones instead of replacing them (others' baselines).
BASELINES = ("plain",)


def _run_info(data: dict[str, Any], variants: list[str]) -> dict[str, Any]:
    return {
        "measured": data.get("measured"),
        "load_start": data.get("load_start"),
        "load_end": data.get("load_end"),
        "startup_seconds": data.get("startup_seconds"),
        "variants": variants,
    }


def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``old`` with ``new``'s variants; ``old`` unchanged (a new dict is returned)."""
    if (old["scale"], old["data"]) != (new["scale"], new["data"]):
        raise SystemExit(
            f"refusing to merge: the new run is scale {new['scale']} {new['data']}, the results are scale "
            f"{old['scale']} {old['data']}; rows of different scales cannot sit side by side"
        )
    merged = json.loads(json.dumps(old))
    runs: dict[str, Any] = merged.setdefault("runs", {})
    if not runs:
        runs["1"] = _run_info(old, list(old["variants"]))
        for entry in merged["variants"].values():
            entry["run"] = "1"
    number = str(max(int(k) for k in runs) + 1)
    runs[number] = _run_info(new, list(new["variants"]))
    for name, entry in new["variants"].items():
        entry = {**entry, "run": number}
        if name in BASELINES and name in merged["variants"]:
            merged.setdefault("baselines", {}).setdefault(number, {})[name] = entry
        else:
            merged["variants"][name] = entry
    # A replaced variant's run may now measure nothing in ``variants``: keep its record (its baselines may).
    return merged


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("new", type=Path)
    parser.add_argument("--into", type=Path, default=RESULTS / "resume.json")
    parser.add_argument("--commit", help="what the new run measured (default: git HEAD of this checkout)")
    args = parser.parse_args()
    new = json.loads(args.new.read_text())
    if "measured" not in new:
        commit = (
            args.commit
            or subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
            ).stdout.strip()
        )
        stamp = dt.datetime.fromtimestamp(args.new.stat().st_mtime, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        new["measured"] = {"date": stamp, "commit": commit}
    merged = merge(json.loads(args.into.read_text()), new)
    args.into.write_text(json.dumps(merged, indent=1, default=str))
    print(f"merged {args.new} into {args.into} as run {max(int(k) for k in merged['runs'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
