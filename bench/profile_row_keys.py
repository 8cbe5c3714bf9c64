"""Where a row-key run's time goes, against ``df.write.parquet`` in the same session (issue: row keys at Spark's speed).

The pipeline and input of ``bench/row_keys.py`` (48 files, 5.76 M rows, 24 write tasks, ``local[2]``); the
plain run and the row-key variants take turns, ``--repeat`` times. For every run it reports, from the driver's
clock and from Spark's own event log (no code of ours measures itself):

* the driver's phases: open (the job's epoch), skip (``skip_completed``), write (``write_parquet``: the
  Spark job plus the sealing of every checkpoint), finish;
* Spark's jobs inside the run: how many, their wall time (union of their spans), and the run's wall time
  outside any Spark job (driver-only: planning, store reads and writes, sealing after the last task);
* the driver's Python process: its CPU time (user + system) during the run (the sealing of checkpoints,
  Py4J, the store's writes), which on ``local[2]`` competes with the tasks for the same two cores;
* the tasks' own account (sums over every task of every job in the run): executor run time, executor CPU
  time, JVM GC time, deserialisation, result serialisation and result size.

``--py-spy`` also samples the driver's Python with py-spy (``--idle``, all threads) for the row-key runs only,
writing a collapsed-stack file per variant under ``bench/work/profile_row_keys/``.

    .venv/bin/python bench/profile_row_keys.py [--repeat 3] [--variants plain,unique-string,unique-int]
        [--py-spy] [--out bench/results/row_keys_profile.txt]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from pyspark.sql import SparkSession  # noqa: E402
from row_keys import KEY_COLUMNS, _fresh, generate_string_keys, plain_run, row_key_run  # noqa: E402
from spark_overhead import generate  # noqa: E402

from airflow_ckpt_provider.contract import CONF_PYTHON_DAEMON, WORKER_DAEMON_MODULE  # noqa: E402
from bench import quiet  # noqa: E402
from ckpt_testkit.spark_events import event_log_confs  # noqa: E402

WORK = ROOT / "bench" / "work" / "profile_row_keys"
RESULTS = ROOT / "bench" / "results"

#: What the tasks report about themselves, summed over a run (Spark's task metrics, ms unless said).
TASK_METRICS = {
    "run_ms": "Executor Run Time",
    "cpu_ms": "Executor CPU Time",  # nanoseconds in the log
    "gc_ms": "JVM GC Time",
    "deserialize_ms": "Executor Deserialize Time",
    "result_serialize_ms": "Result Serialization Time",
    "result_bytes": "Result Size",
}


def _events(log_dir: Path) -> list[dict[str, Any]]:
    newest = max((p for p in log_dir.iterdir() if p.is_file()), key=lambda p: p.stat().st_mtime)
    events = []
    with newest.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue  # the line being written
    return events


def spark_account(log_dir: Path, start_ms: int, end_ms: int) -> dict[str, Any]:
    """Spark's own account of the jobs that started inside [start_ms, end_ms]."""
    jobs: dict[int, list[int]] = {}
    stages: set[int] = set()
    for event in _events(log_dir):
        kind = event.get("Event")
        if kind == "SparkListenerJobStart" and start_ms <= int(event["Submission Time"]) <= end_ms:
            jobs[int(event["Job ID"])] = [int(event["Submission Time"]), end_ms]
            stages.update(int(s) for s in event.get("Stage IDs", []))
        elif kind == "SparkListenerJobEnd" and int(event["Job ID"]) in jobs:
            jobs[int(event["Job ID"])][1] = int(event["Completion Time"])
    totals = dict.fromkeys(TASK_METRICS, 0.0)
    tasks = 0
    for event in _events(log_dir):
        if event.get("Event") != "SparkListenerTaskEnd" or int(event["Stage ID"]) not in stages:
            continue
        metrics = event.get("Task Metrics") or {}
        tasks += 1
        for name, field in TASK_METRICS.items():
            value = float(metrics.get(field, 0))
            totals[name] += value / 1e6 if name == "cpu_ms" else value
    spans = sorted(jobs.values())
    busy, cursor = 0, start_ms
    for begin, end in spans:
        begin = max(begin, cursor)
        if end > begin:
            busy += end - begin
            cursor = end
    return {"jobs": len(jobs), "jobs_wall_s": busy / 1000, "tasks": tasks, **totals}


class PySpy:
    """py-spy sampling this process (all threads, idle included) into a collapsed-stack file."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PySpy:
        spy = Path(sys.executable).with_name("py-spy")
        self.process = subprocess.Popen(
            [
                str(spy),
                "record",
                "--pid",
                str(os.getpid()),
                "--idle",
                "--threads",
                "--rate",
                "200",
                "--format",
                "raw",
                "--output",
                str(self.target),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # attached before the run starts
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        self.process.wait(timeout=60)


def one_run(spark: SparkSession, variant: str, sources: dict[str, list[str]], run_dir: Path, i: int) -> dict[str, Any]:
    kind = variant.split("-", 1)[1] if "-" in variant else "int"  # plain-string: the string input
    inputs = sources[kind]
    started_ms = int(time.time() * 1000)
    started = time.perf_counter()
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    phases: dict[str, float] = {}
    if variant.startswith("plain"):
        plain_run(spark, inputs, run_dir / "plain")
    else:
        unique = variant.startswith("unique")
        result = row_key_run(
            spark,
            inputs,
            _fresh(run_dir / f"store-{variant}-{i}"),
            _fresh(run_dir / f"out-{variant}"),
            key=KEY_COLUMNS[kind],
            unique=unique,
            buckets=None if unique else 20,
        )
        phases = result["phases"]
    wall = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    driver_python_cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    time.sleep(1.5)  # the event log's writer flushes
    account = spark_account(WORK / "events", started_ms, int(time.time() * 1000))
    return {
        "variant": variant,
        "wall_s": wall,
        "phases": phases,
        "outside_jobs_s": wall - account["jobs_wall_s"],
        "driver_python_cpu_s": driver_python_cpu,
        **account,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--variants", default="plain,unique-string,unique-int")
    parser.add_argument("--py-spy", action="store_true")
    parser.add_argument(
        "--jfr",
        action="store_true",
        help="record the JVM with Java Flight Recorder (bench/work/profile_row_keys/run.jfr)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "row_keys_profile.txt")
    quiet.add_argument(parser)
    args = parser.parse_args()
    machine = quiet.gate(args)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    inputs = generate(48, 120_000)
    sources = {"int": inputs, "string": generate_string_keys(inputs)}
    builder = SparkSession.builder
    for name, value in event_log_confs(_fresh(WORK / "events")).items():
        builder = builder.config(name, value)
    if args.jfr:
        recording = f"-XX:StartFlightRecording=filename={WORK / 'run.jfr'},settings=profile,dumponexit=true"
        builder = builder.config("spark.driver.extraJavaOptions", recording)
    spark = (
        builder.master("local[2]")
        .appName("bench-row-keys-profile")
        .config("spark.driver.memory", "3g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50000")
        .config("spark.sql.files.maxPartitionBytes", str(8 * 1024 * 1024))
        .config("spark.driver.host", "127.0.0.1")
        .config(CONF_PYTHON_DAEMON, WORKER_DAEMON_MODULE)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    run_dir = _fresh(WORK / "runs")
    variants = [v for v in args.variants.split(",") if v]
    for variant in variants:  # warm-up, untimed
        one_run(spark, variant, sources, run_dir, -1)
    runs: list[dict[str, Any]] = []
    for i in range(args.repeat):
        for variant in variants:
            if args.py_spy and not variant.startswith("plain") and i == 0:
                with PySpy(WORK / f"py-spy-{variant}.txt"):
                    run = one_run(spark, variant, sources, run_dir, i)
                run["py_spy"] = True
            else:
                run = one_run(spark, variant, sources, run_dir, i)
            runs.append(run)
            print(json.dumps(run), flush=True)
    spark.stop()
    machine.finish()
    report = {"runs": runs, "repeat": args.repeat, "machine": machine.record()}
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    text = table(report)
    args.out.write_text(text + "\n")
    print(text)
    return 0


def table(report: dict[str, Any]) -> str:
    runs = [r for r in report["runs"] if not r.get("py_spy")]
    variants = list(dict.fromkeys(r["variant"] for r in runs))
    columns = [
        "wall_s",
        "driver_python_cpu_s",
        "outside_jobs_s",
        "jobs_wall_s",
        "jobs",
        "tasks",
        "run_ms",
        "cpu_ms",
        "gc_ms",
        "deserialize_ms",
        "result_serialize_ms",
        "result_bytes",
    ]
    phase_names = ["open", "skip", "write", "finish"]
    machine = report["machine"]
    load = f"load at start {machine['start']}, at end {machine['end']}" + (" — NOISY" if machine["noisy"] else "")
    lines = [
        f"Medians of {report['repeat']} runs per variant (py-spy runs left out); {load}",
        "",
        "| variant | " + " | ".join(columns + phase_names) + " |",
        "|" + "---|" * (len(columns) + len(phase_names) + 1),
    ]
    for variant in variants:
        mine = [r for r in runs if r["variant"] == variant]
        cells = [
            f"{statistics.median(r[c] for r in mine):.2f}"
            if c.endswith("_s")
            else f"{statistics.median(r[c] for r in mine):.0f}"
            for c in columns
        ]
        cells += [f"{statistics.median(r['phases'].get(p, 0.0) for r in mine):.2f}" for p in phase_names]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
