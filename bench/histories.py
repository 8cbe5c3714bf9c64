"""Large run of the store-history state machine: many seeded random histories, one report.

Each history picks a key mode (row keys grouped at the source, ``unique=True``, composite, file
keys), a writer (Spark's, Arrow) and a caller (the operators' way, or ``CheckpointedJob`` opening its own
epoch and naming no job), writes a tiny input, then runs up to ``--steps`` operations
(run, failed run, new input file, commit, retain and delete_after_success cleanups, the re-run that
replaces committed output, reprocess by key / file / epoch / commit / time, undo, purge, rewind,
discard, clear) with the oracle of ``ckpt_testkit.histories`` after every step. ``--s3`` starts a
SeaweedFS server and puts the store and output of about half the histories on it; ``--crashes`` lets
histories arm a crash (a driver-side failpoint raising) that the next operation meets, recovered as
documented (the fault campaign's histories). Hypothesis shrinks the first violation to a minimal
history, printed in the report with the seed to replay it.

    python -m bench.histories --histories 2000 --seed 20261127 [--steps 10] [--s3] [--crashes]

Writes ``bench/results/histories.txt`` (or ``--out``). One Spark session for the whole run
(``--cores``, default 1: a history's jobs are tiny, and two runs side by side use the machine's
two cores better than one run on two). ``--estimate N`` runs N histories and prints how long
``--histories`` of them would take, without writing the report. Histories run in chunks of
``--chunk`` (25), chunk i seeded ``--seed + i``; ``--minutes M`` starts no chunk after M minutes and
reports what ran (the report names the commit, the seeds and the load average at start and end).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, seed, settings  # noqa: E402
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from airflow_ckpt_provider.contract import CONF_PYTHON_DAEMON, WORKER_DAEMON_MODULE  # noqa: E402
from ckpt_testkit import histories  # noqa: E402
from ckpt_testkit.histories import TALLY, StoreHistory, history_steps, use_s3, use_session  # noqa: E402
from ckpt_testkit.spark_cluster import SPARK_HOME  # noqa: E402


def _session(cores: int) -> SparkSession:
    os.environ.setdefault("SPARK_HOME", SPARK_HOME)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("ckpt-histories")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.files.openCostInBytes", str(128 * 1024 * 1024))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        # Python tasks through the package's worker daemon, as the submit operator runs them; the JVM's
        # C1 compiler only: runs of tens of rows spend more CPU in C2 compiling than C2 code saves.
        .config(CONF_PYTHON_DAEMON, WORKER_DAEMON_MODULE)
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("OFF")  # failed runs are part of the plan: no stack traces
    return session


def _commit() -> str:
    def git(*command: str) -> str:
        return subprocess.run(["git", *command], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + (" (with uncommitted changes)" if git("status", "--porcelain") else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=20261127)
    parser.add_argument("--steps", type=int, default=10, help="operations per history after the start")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "histories.txt")
    parser.add_argument("--cores", type=int, default=1, help="local[N] Spark session")
    parser.add_argument("--s3", action="store_true", help="about half the histories on a SeaweedFS server")
    parser.add_argument("--crashes", action="store_true", help="histories arm driver-side crashes at their steps")
    parser.add_argument("--estimate", type=int, default=0, help="run this many histories, print the time estimate")
    parser.add_argument(
        "--minutes",
        type=float,
        default=0,
        help="stop starting new chunks after this long and report what ran (0: run every history asked for)",
    )
    parser.add_argument(
        "--chunk", type=int, default=25, help="histories per Hypothesis run; chunk i uses seed --seed + i"
    )
    args = parser.parse_args()

    load_at_start = os.getloadavg()
    histories.VERBOSE = True
    histories.CRASHES = args.crashes
    use_session(_session(args.cores))
    server = None
    if args.s3:
        from ckpt_testkit.seaweed import SeaweedServer

        server = SeaweedServer().start()
        use_s3(server.options(), server.create_bucket("histories"))
    asked = args.estimate or args.histories
    started = time.monotonic()
    failure = ""
    chunks = 0
    timed_out = False
    try:
        # Chunks of seeded Hypothesis runs, so that a run bounded in time (--minutes) still reports what it ran;
        # a violation stops the run with its chunk's seed (replay: --seed S --histories CHUNK --chunk CHUNK).
        while TALLY.histories < asked and not failure:
            if args.minutes and time.monotonic() - started > args.minutes * 60:
                timed_out = True
                break
            config = settings(
                max_examples=min(args.chunk, asked - TALLY.histories),
                stateful_step_count=args.steps,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
                print_blob=True,
            )
            chunk_seed = args.seed + chunks
            chunks += 1
            before = TALLY.histories
            try:
                seed(chunk_seed)(StoreHistory)
                run_state_machine_as_test(StoreHistory, settings=config)
            except BaseException:  # the shrunk history and the oracle's message
                failure = f"(chunk seed {chunk_seed})\n" + traceback.format_exc()
            if TALLY.histories == before:
                break  # nothing ran: do not loop
    finally:
        if server is not None:
            server.close(remove=True)
    seconds = time.monotonic() - started
    per_history = seconds / max(TALLY.histories, 1)
    lines = [
        f"store histories: seeds {args.seed}..{args.seed + max(chunks - 1, 0)} "
        f"({chunks} chunks of up to {args.chunk}), "
        f"up to {args.steps} steps each, asked for {asked} histories"
        + (f", stopped after {args.minutes:g} min" if timed_out else ""),
        f"commit: {_commit()}; load average at start {load_at_start}, at end {os.getloadavg()}",
        f"histories run (shrinking included): {TALLY.histories}; {seconds:.0f} s "
        f"({per_history:.1f} s per history); Spark local[{args.cores}]"
        f"{', S3 for about half' if args.s3 else ''}{', crashes armed' if args.crashes else ''}",
        f"violations: {1 if failure else 0}",
        f"keys processed by reruns: {TALLY.keys_rerun}",
        "",
        "histories by key mode / writer:",
        *(f"  {name:22} {count}" for name, count in sorted(TALLY.modes.items())),
        "",
        "steps run (every operation should appear), and their mean wall time:",
        *(
            f"  {name:22} {TALLY.steps.get(name, 0):6}  {TALLY.seconds[name] / max(TALLY.steps.get(name, 0), 1):6.2f} s"
            for name in history_steps()
        ),
        f"  {'oracle (every step)':22} {'':6}  {TALLY.seconds['oracle'] / max(sum(TALLY.steps.values()), 1):6.2f} s",
        "",
        "refused by the store (typed errors) or with nothing to do (nothing changed either way):",
        *(f"  {name:50} {count}" for name, count in sorted(TALLY.refused.items())),
        "",
        "crashes that fired, each recovered and judged by the oracle:",
        *(f"  {name:50} {count}" for name, count in sorted(TALLY.crashes.items())),
    ]
    if failure:
        lines += ["", "FIRST VIOLATION (shrunk; replay with the same --seed):", failure]
    report = "\n".join(lines) + "\n"
    if args.estimate:  # a sample: the table and the estimate, no report written
        print(report)
        print(
            f"estimate: {TALLY.histories} histories in {seconds:.0f} s ({per_history:.1f} s each, "
            f"{sum(TALLY.steps.values()) / max(TALLY.histories, 1):.1f} steps each); --histories {args.histories} "
            f"in one process: {per_history * args.histories / 3600:.1f} h"
        )
        return 1 if failure else 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report)
    return 1 if failure else 0


if __name__ == "__main__":
    sys.exit(main())
