"""Benchmark: a resume through Airflow, the submit operator against ``@task.checkpointed_pyspark`` on a
warm Spark Connect server, task start to task end.

Real DAG runs (``dag.test()`` in a fresh process, real metadata DB), the same job for both operators
(bench/jobs/connect_work.py: ``files`` x ``rows`` orders, the user's per-order work in Python, unique
row keys): ``CheckpointedSparkSubmitOperator`` starts a new Spark application per try (local[2]);
``@task.checkpointed_pyspark`` opens a Spark Connect session on a server that is already running (this
process's local[2] driver serves Spark Connect, as a long-lived cluster would). For each operator, each
on a fresh store (its own logical date):

* **fixed cost**: a run on one file of 100 orders: what a try costs before and after any work;
* **clean**: the whole day;
* **baseline**: the Spark provider's own ``@task.pyspark`` on the same server, without checkpoints
  (fixed cost and clean run): what any Airflow task on that server pays, so the difference is ours;
* **resume**: the user's code raises on the first order of the write task after the middle one (a run
  that fails at half way: the middle task, running beside it, is cancelled), the record is corrected, the
  failed task is cleared ("only failed") and its next try resumes.

Durations are the task instance's own (``start_date`` to ``end_date`` in the metadata DB), and "in the
task": from the task runner's "Task started" to its last state update (the task instance's duration
less the start of Airflow's task runner, which both operators pay alike). Targets: on the warm server
the resume costs <= 0.60 of its clean run and the fixed cost is <= 5 s.

    .venv/bin/python -m bench.connect_resume [--repeat 2] [--files 16] [--rows 40000] [--spin 3000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import quiet  # noqa: E402
from bench.jobs import connect_work  # noqa: E402

WORK = ROOT / "bench" / "work" / "connect_resume"
RESULTS = ROOT / "bench" / "results"
OPERATORS = {"submit": "bench_connect_submit", "taskflow": "bench_connect_taskflow"}
#: The baseline: the Spark provider's own ``@task.pyspark`` on the same warm server, without checkpoints
#: (fixed cost and clean run only: without checkpoints a rerun starts over).
PLAIN, PLAIN_DAG = "plain", "bench_connect_plain"
DAGS = {**OPERATORS, PLAIN: PLAIN_DAG}
RESUME_TARGET, FIXED_TARGET = 0.60, 5.0


def _server() -> tuple[Any, str]:
    """A warm Spark Connect server: a local[2] driver in this process serving Spark Connect."""
    from pyspark.sql import SparkSession

    from airflow_ckpt_provider.contract import CONF_PYTHON_DAEMON, WORKER_DAEMON_MODULE
    from ckpt_testkit.connect_server import start_in_session

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-connect-server")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config(CONF_PYTHON_DAEMON, WORKER_DAEMON_MODULE)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark, start_in_session(spark)


_STAMP = r"^(\S+) \[info\s+\] "


def _in_task_seconds(output: str) -> float:
    """From the task runner's "Task started" to its last "Task instance state updated" (the run's log)."""
    started = re.findall(_STAMP + "Task started", output, re.MULTILINE)
    updated = re.findall(_STAMP + "Task instance state updated", output, re.MULTILINE)
    if not started or not updated:
        return float("nan")
    first, last = (dt.datetime.fromisoformat(s.rstrip("Z")) for s in (started[-1], updated[-1]))
    return (last - first).total_seconds()


def _task_seconds(harness: Any, dag_id: str, run_id: str) -> float:
    rows = harness._query(
        "SELECT start_date, end_date FROM task_instance WHERE dag_id=? AND run_id=? AND task_id='job'", dag_id, run_id
    )
    start, end = (dt.datetime.fromisoformat(str(v)) for v in rows[0])
    return (end - start).total_seconds()


class Bench:
    def __init__(self, harness: Any, lake: Path, env: dict[str, str], args: argparse.Namespace) -> None:
        self.harness, self.lake, self.env, self.args = harness, lake, env, args
        self.day = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)

    def _next_day(self) -> dt.datetime:
        self.day += dt.timedelta(days=1)
        return self.day

    def _run(self, operator: str, day: dt.datetime, *, only_failed: bool = False, state: str = "success") -> Any:
        outcome = self.harness.run_dag(
            DAGS[operator], logical_date=day, env=self.env, timeout=1800, only_failed=only_failed
        )
        if outcome.state != state:
            raise RuntimeError(f"{DAGS[operator]} {day.date()}: {outcome.state}\n{outcome.output[-4000:]}")
        return outcome

    def fixed(self, operator: str) -> dict[str, float]:
        day = self._next_day()
        connect_work.land(str(self.lake), day.date().isoformat(), 1, 100)
        outcome = self._run(operator, day)
        return {
            "seconds": _task_seconds(self.harness, DAGS[operator], outcome.run_id),
            "in_task": _in_task_seconds(outcome.output),
        }

    def clean(self, operator: str) -> dict[str, float]:
        day = self._next_day()
        connect_work.land(str(self.lake), day.date().isoformat(), self.args.files, self.args.rows)
        outcome = self._run(operator, day)
        return {
            "seconds": _task_seconds(self.harness, DAGS[operator], outcome.run_id),
            "in_task": _in_task_seconds(outcome.output),
        }

    def resume(self, operator: str) -> dict[str, float]:
        day = self._next_day()
        ds = day.date().isoformat()
        connect_work.land(str(self.lake), ds, self.args.files, self.args.rows)
        marker = Path(connect_work.bad_marker(str(self.lake), ds))
        # The first order of the task after the middle one: when it fails, the task running beside it (the
        # middle one, started a moment before) is cancelled, so the first half is done. Failing the middle task
        # itself left 7 of 16 tasks done (44 %): its neighbour, started earlier, was cancelled with it.
        marker.write_text(str(self.args.files // 2 + 1))
        failed = self._run(operator, day, state="failed")
        failed_seconds = _task_seconds(self.harness, OPERATORS[operator], failed.run_id)
        marker.unlink()  # the record is corrected
        resumed = self._run(operator, day, only_failed=True)
        plan = self.harness.xcom(OPERATORS[operator], resumed.run_id, "job", "checkpoint_plan")
        total = self.args.files * self.args.rows
        return {
            "failed_seconds": failed_seconds,
            "seconds": _task_seconds(self.harness, OPERATORS[operator], resumed.run_id),
            "in_task": _in_task_seconds(resumed.output),
            "done_fraction": plan["keys_skipped"] / total,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--files", type=int, default=connect_work.FILES)
    parser.add_argument("--rows", type=int, default=connect_work.ROWS)
    parser.add_argument("--spin", type=int, default=connect_work.SPIN, help="the user's loop iterations per order")
    parser.add_argument("--out", type=Path, default=RESULTS / "connect_resume.json")
    quiet.add_argument(parser)
    args = parser.parse_args()
    machine = quiet.gate(args)

    from tests.support.airflow_harness import AirflowHarness

    shutil.rmtree(WORK, ignore_errors=True)
    os.environ.pop("JAVA_TOOL_OPTIONS", None)  # Spark's JVM defaults, as a deployment runs them
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    spark, url = _server()
    harness = AirflowHarness.create(WORK / "airflow")
    harness.install_dag(ROOT / "bench" / "jobs" / "connect_dag.py", ROOT / "bench" / "jobs" / "connect_job.py")
    lake = WORK / "lake"
    connect = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": int(url.rsplit(":", 1)[1])}
    env = {
        "CKPT_BENCH_LAKE": str(lake),
        "CKPT_BENCH_SPIN": str(args.spin),
        "AIRFLOW_CONN_SPARK_BENCH_CONNECT": json.dumps(connect),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
            {"conn_type": "spark", "host": "local[2]", "extra": {"spark.driver.host": "127.0.0.1"}}
        ),
    }
    bench = Bench(harness, lake, env, args)
    started = time.monotonic()
    for operator in DAGS:  # warm-up (imports, the server's first job), untimed
        bench.fixed(operator)
    results: dict[str, dict[str, list[Any]]] = {op: {"fixed": [], "clean": [], "resume": []} for op in OPERATORS}
    plain: dict[str, list[Any]] = {"fixed": [], "clean": []}
    for _ in range(args.repeat):
        for operator in OPERATORS:  # interleaved, so a drift of the machine touches all alike
            results[operator]["fixed"].append(bench.fixed(operator))
            results[operator]["clean"].append(bench.clean(operator))
            results[operator]["resume"].append(bench.resume(operator))
            print(operator, json.dumps({k: v[-1] for k, v in results[operator].items()}), flush=True)
        plain["fixed"].append(bench.fixed(PLAIN))
        plain["clean"].append(bench.clean(PLAIN))
        print(PLAIN, json.dumps({k: v[-1] for k, v in plain.items()}), flush=True)
    spark.stop()
    machine.finish()

    report: dict[str, Any] = {
        "measured": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "input": {"files": args.files, "rows_per_file": args.rows, "spin": args.spin},
        "repeat": args.repeat,
        "seconds": round(time.monotonic() - started),
        "runs": {**results, PLAIN: plain},
        "summary": {op: _summary(runs) for op, runs in {**results, PLAIN: plain}.items()},
        "machine": machine.record(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    text = _table(report)
    args.out.with_suffix(".txt").write_text(text + "\n")
    print(text)
    return 0


def _summary(runs: dict[str, list[Any]]) -> dict[str, float]:
    """Medians of an operator's runs; the resume's figures only where it resumed (not the baseline)."""

    def median(name: str, field: str = "seconds") -> float:
        return statistics.median(r[field] for r in runs[name])

    summary = {
        "fixed_seconds": median("fixed"),
        "fixed_in_task": median("fixed", "in_task"),
        "clean_seconds": median("clean"),
        "clean_in_task": median("clean", "in_task"),
    }
    if runs.get("resume"):
        resume = median("resume")
        summary |= {
            "resume_seconds": resume,
            "resume_in_task": median("resume", "in_task"),
            "resume_ratio": resume / summary["clean_seconds"],
            "resume_ratio_in_task": median("resume", "in_task") / summary["clean_in_task"],
            "done_fraction": statistics.median(r["done_fraction"] for r in runs["resume"]),
            "failed_try_seconds": statistics.median(r["failed_seconds"] for r in runs["resume"]),
        }
    return summary


def _commit() -> str:
    import subprocess

    def git(*command: str) -> str:
        return subprocess.run(["git", *command], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    dirty = git("status", "--porcelain", "--", "airflow_ckpt_provider", "bench")
    return git("rev-parse", "--short", "HEAD") + (" (with uncommitted changes)" if dirty else "")


def _table(report: dict[str, Any]) -> str:
    machine = report["machine"]
    start, end = machine["start"]["load"], (machine["end"] or {}).get("load")
    info = report["input"]
    lines = [
        f"connect_resume: {report['measured']}, commit {report['commit']}; {info['files']} files x "
        f"{info['rows_per_file']:,} orders, spin {info['spin']}; medians of {report['repeat']}",
        f"load average (1/5/15 min) at the start {start}, at the end {end}, on {os.cpu_count()} cores"
        + (" -- NOISY: not evidence" if machine["noisy"] else ""),
        "task start to task end (the metadata DB's task instance), seconds:",
        "",
        f"{'':<36}{'submit (new app)':>18}{'TaskFlow (Connect)':>20}{'@task.pyspark':>16}",
    ]
    s, t = report["summary"]["submit"], report["summary"]["taskflow"]
    p = report["summary"].get(PLAIN, {})
    for label, key, fmt in (
        ("fixed cost (100 orders)", "fixed_seconds", "{:.1f}"),
        ("  of it in the task", "fixed_in_task", "{:.1f}"),
        ("clean run", "clean_seconds", "{:.1f}"),
        ("  of it in the task", "clean_in_task", "{:.1f}"),
        ("failed try (fails at ~half way)", "failed_try_seconds", "{:.1f}"),
        ("resume after the correction", "resume_seconds", "{:.1f}"),
        ("  of it in the task", "resume_in_task", "{:.1f}"),
        ("done when the resume started", "done_fraction", "{:.0%}"),
        ("resume / clean", "resume_ratio", "{:.2f}"),
        ("  in the task", "resume_ratio_in_task", "{:.2f}"),
    ):
        baseline = fmt.format(p[key]) if key in p else "-"
        lines.append(f"{label:<36}{fmt.format(s[key]):>18}{fmt.format(t[key]):>20}{baseline:>16}")

    def verdict(value: float, limit: float) -> str:
        return "met" if value <= limit else "NOT met"

    lines += [
        "",
        f"target: TaskFlow on the warm server, resume <= {RESUME_TARGET} of clean: task instance "
        f"{t['resume_ratio']:.2f} ({verdict(t['resume_ratio'], RESUME_TARGET)}), in the task "
        f"{t['resume_ratio_in_task']:.2f} ({verdict(t['resume_ratio_in_task'], RESUME_TARGET)})",
        f"target: TaskFlow on the warm server, fixed cost <= {FIXED_TARGET:.0f} s: task instance "
        f"{t['fixed_seconds']:.1f} s ({verdict(t['fixed_seconds'], FIXED_TARGET)}), in the task "
        f"{t['fixed_in_task']:.1f} s ({verdict(t['fixed_in_task'], FIXED_TARGET)})",
    ]
    if p:
        lines += [
            f"baseline (@task.pyspark, no checkpoints, same server): fixed cost {p['fixed_seconds']:.1f} s "
            f"({p['fixed_in_task']:.1f} in the task): the checkpoints' own fixed cost is "
            f"{t['fixed_seconds'] - p['fixed_seconds']:+.1f} s per task instance "
            f"({t['fixed_in_task'] - p['fixed_in_task']:+.1f} in the task); a clean run costs "
            f"{t['clean_seconds'] / p['clean_seconds']:.2f}x the baseline's",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
