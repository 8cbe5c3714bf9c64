"""Large run of the store-history state machine: many seeded random histories, one report.

Each history picks a key mode (row keys grouped at the source, ``unique=True``, composite, file
keys) and a writer (Spark's, Arrow), writes a tiny input, then runs up to ``--steps`` operations
(run, failed run, new input file, commit, retain cleanup, reprocess by key / file / commit, undo,
rewind, discard, clear) with the oracle of ``ckpt_testkit.histories`` after every step. Hypothesis
shrinks the first violation to a minimal history, printed in the report with the seed to replay it.

    python -m bench.histories --histories 2000 --seed 20261127 [--steps 10]

Writes ``bench/results/histories.txt`` (or ``--out``). One Spark session (local[2]) for the whole run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, seed, settings  # noqa: E402
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from ckpt_testkit import histories  # noqa: E402
from ckpt_testkit.histories import TALLY, StoreHistory, history_steps, use_session  # noqa: E402
from ckpt_testkit.spark_cluster import SPARK_HOME  # noqa: E402


def _session() -> SparkSession:
    os.environ.setdefault("SPARK_HOME", SPARK_HOME)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("ckpt-histories")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.files.openCostInBytes", str(128 * 1024 * 1024))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("OFF")  # failed runs are part of the plan: no stack traces
    return session


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=20261127)
    parser.add_argument("--steps", type=int, default=10, help="operations per history after the start")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "histories.txt")
    args = parser.parse_args()

    histories.VERBOSE = True
    use_session(_session())
    config = settings(
        max_examples=args.histories,
        stateful_step_count=args.steps,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    started = time.monotonic()
    failure = ""
    try:
        seed(args.seed)(StoreHistory)
        run_state_machine_as_test(StoreHistory, settings=config)
    except BaseException:  # the shrunk history and the oracle's message
        failure = traceback.format_exc()
    seconds = time.monotonic() - started

    lines = [
        f"store histories: seed {args.seed}, up to {args.steps} steps each, asked for {args.histories} histories",
        f"histories run (shrinking included): {TALLY.histories}; {seconds:.0f} s "
        f"({seconds / max(TALLY.histories, 1):.1f} s per history)",
        f"violations: {1 if failure else 0}",
        f"keys processed by reruns: {TALLY.keys_rerun}",
        "",
        "histories by key mode / writer:",
        *(f"  {name:22} {count}" for name, count in sorted(TALLY.modes.items())),
        "",
        "steps run (every operation should appear):",
        *(f"  {name:22} {TALLY.steps.get(name, 0)}" for name in history_steps()),
        "",
        "refused by the store (typed errors, nothing changed):",
        *(f"  {name:50} {count}" for name, count in sorted(TALLY.refused.items())),
    ]
    if failure:
        lines += ["", "FIRST VIOLATION (shrunk; replay with the same --seed):", failure]
    report = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report)
    return 1 if failure else 0


if __name__ == "__main__":
    sys.exit(main())
