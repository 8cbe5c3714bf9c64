"""Run every benchmark and write ``bench/results/`` (README.md with the tables, PNG plots, raw JSON).

    .venv/bin/python bench/run_all.py [--scale small|full] [--only resume,spark,store,airflow,dags] [--keep]

* ``resume``  — bench/resume_vs_alternatives.py: resume after a kill vs plain Spark and
  Structured Streaming; clean-run overhead on the same data (sections 1 and 2);
* ``spark``   — helper 2's bench/spark_overhead.py (clean-run overhead in one SparkSession),
  run as it is and its printed table captured;
* ``store``   — bench/store_scale.py: keys read, progress, begin_epoch, commit, cleanup for 1k/10k/100k checkpoints;
* ``airflow`` — bench/airflow_overhead.py: time the operators add around spark-submit;
* ``dags``    — one real ``dag.test()`` of the example DAG, timestamps from its task log.

``--keep`` skips a benchmark whose JSON is already in the results directory (a long
run can be resumed). The report is rebuilt from whatever JSON is there at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

from bench import quiet  # noqa: E402

RESULTS = BENCH / "results"
WORK = BENCH / "work"

STORE_SIZES = {"small": ([1_000], [1_000]), "full": ([1_000, 10_000, 100_000], [1_000, 10_000, 100_000])}
AIRFLOW_SIZES = {"small": ([0, 1_000], [0]), "full": ([0, 1_000, 10_000], [0, 1_000, 10_000])}
SPARK_ARGS = {"small": ["--files", "24", "--rows", "5000", "--repeat", "1", "--tasks", "4"], "full": []}


def git_commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "airflow_ckpt_provider"], cwd=ROOT, capture_output=True, text=True
    )
    return head.stdout.strip() + (" + uncommitted changes in airflow_ckpt_provider/" if dirty.stdout.strip() else "")


def write_json(name: str, data: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    # Each result says when and at which commit it was measured (a run with --only refreshes some of them).
    data.setdefault(
        "measured", {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "commit": git_commit()}
    )
    (RESULTS / name).write_text(json.dumps(data, indent=1, default=str))


def parse_spark_overhead(stdout: str) -> dict[str, Any]:
    """The table bench/spark_overhead.py prints: (measure, value [target ok]) rows, its input line, the ratio."""
    rows: list[list[str]] = []
    ratio = None
    input_line = ""
    for raw in stdout.splitlines():
        if raw.startswith("input:"):
            input_line = raw.removeprefix("input:").strip().rstrip(";")
        line = raw.rstrip()
        if line.startswith("rerun after failure"):  # a heading of the indented rows under it
            rows.append([line.strip(), ""])
            continue
        # Sub-rows are indented by two spaces ("  overhead ratio ..."): keep the indent as a marker.
        match = re.match(r"^(\s*)(\S.*?\S)\s{2,}(\S+)(?:\s+(.+?))?\s*$", line)
        if not match or line.lstrip().startswith(("measure", "-", "one run")):
            continue
        indent, name, value, rest = match.group(1), match.group(2), match.group(3), (match.group(4) or "").strip()
        if not re.match(r"^[\d.]+x?$", value):
            continue
        rows.append([("\u2003" * (len(indent) // 2)) + name.strip(), f"{value} {rest}".strip()])
        if "overhead ratio" in name and ratio is None:  # the first engine's (the default one)
            ratio = float(value.rstrip("x"))
    return {"input": input_line, "rows": rows, "ratio": ratio}


def run_spark_overhead(scale: str) -> dict[str, Any]:
    """Helper 2's in-session benchmark, run unchanged; its printed table is parsed."""
    script = BENCH / "spark_overhead.py"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(script), *SPARK_ARGS[scale]], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{script.name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    parsed = parse_spark_overhead(proc.stdout)
    return {
        **parsed,
        "seconds": time.monotonic() - started,
        "stdout": proc.stdout[-4000:],
    }


# ---------------------------------------------------------------------------------------- dag.test


_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z?\s")


def _stamp(line: str) -> float | None:
    match = _TIMESTAMP.match(line)
    if not match:
        return None
    return dt.datetime.fromisoformat(match.group(1)).replace(tzinfo=dt.UTC).timestamp()


def run_dags_test() -> dict[str, Any]:
    """One dag.test() of ``ckpt_daily_events`` (no failure), through scripts/demo.py's child mode."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import demo  # the lead's end-to-end demo: its Airflow environment and dag.test() child

    home = WORK / "dags-test"
    shutil.rmtree(home, ignore_errors=True)
    (home / "dags").mkdir(parents=True)
    shutil.copy(ROOT / "dags_examples" / "ckpt_daily_events.py", home / "dags")
    shutil.copytree(ROOT / "dags_examples" / "jobs", home / "dags" / "jobs")
    env = demo.airflow_env(home)
    env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=env, cwd=home, check=True, capture_output=True
    )
    result = demo.run_dag(env, home, {"events": 50_000, "partitions": 8, "fail_partition": -1}, "run")
    log = Path(result["log"]).read_text(errors="replace").splitlines()

    def stamp_of(pattern: str, after: float = 0.0, last_before: float | None = None) -> float | None:
        """First line with ``pattern`` at or after ``after`` (or the last one before ``last_before``)."""
        found = None
        for line in log:
            stamp = _stamp(line)
            if stamp is None or pattern not in line or stamp < after:
                continue
            if last_before is None:
                return stamp
            if stamp <= last_before:
                found = stamp
        return found

    task = stamp_of("[DAG TEST] running task <TaskInstance: ckpt_daily_events.process_events") or 0.0
    execute = stamp_of("::endgroup::", task) or task  # the task runner's setup group ends, execute() begins
    submitted = stamp_of("Spark-Submit cmd", execute) or execute
    finished = stamp_of("Checkpointed job finished", submitted) or submitted
    driver_done = stamp_of("_CheckpointedSubmitHook", submitted, last_before=finished) or submitted
    commit_task = stamp_of("[DAG TEST] running task <TaskInstance: ckpt_daily_events.commit", finished) or finished
    commit_execute = stamp_of("::endgroup::", commit_task) or commit_task
    committed = stamp_of("Committed epoch", commit_execute) or commit_execute
    steps = {
        "DAG run (dag.test child process, wall)": float(result["seconds"]),
        "Airflow task start -> operator execute() (Airflow itself)": execute - task,
        "operator pre-submit: execute() -> spark-submit started": submitted - execute,
        "spark-submit: started -> last driver log line": driver_done - submitted,
        "operator post-submit: last driver log line -> execute() done": finished - driver_done,
        "commit task: execute() -> committed + retention done": committed - commit_execute,
    }
    marks = {
        "task": task,
        "execute": execute,
        "submitted": submitted,
        "driver_done": driver_done,
        "finished": finished,
        "commit_execute": commit_execute,
        "committed": committed,
    }
    return {"state": result["state"], "marks": marks, "steps": steps, "log": result["log"]}


# ---------------------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=("small", "full"), default="small")
    parser.add_argument("--only", default="resume,spark,store,airflow,dags")
    parser.add_argument("--keep", action="store_true", help="skip benchmarks whose JSON already exists")
    quiet.add_argument(parser)
    args = parser.parse_args()
    machine = quiet.gate(args)
    only = set(args.only.split(","))
    WORK.mkdir(parents=True, exist_ok=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(),
        "cores": os.cpu_count(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
        "scale": args.scale,
        "command": f".venv/bin/python bench/run_all.py --scale {args.scale}",
        "load_start": [round(x, 2) for x in os.getloadavg()],
    }
    print(f"load average at start: {meta['load_start']}", flush=True)

    def wanted(name: str, json_name: str) -> bool:
        return name in only and not (args.keep and (RESULTS / json_name).exists())

    if wanted("resume", "resume.json"):
        import resume_vs_alternatives

        write_json(
            "resume.json",
            resume_vs_alternatives.run(args.scale, list(resume_vs_alternatives.VARIANTS), [0.25, 0.5, 0.9]),
        )
    if wanted("spark", "spark_overhead.json"):
        print("[spark] bench/spark_overhead.py ...", flush=True)
        try:
            write_json("spark_overhead.json", run_spark_overhead(args.scale))
        except (RuntimeError, OSError) as exc:
            print(f"[spark] skipped: {exc}", flush=True)
    if wanted("store", "store_scale.json"):
        import store_scale

        local, s3 = STORE_SIZES[args.scale]
        write_json("store_scale.json", store_scale.run(local, s3))
    if wanted("airflow", "airflow_overhead.json"):
        # Airflow reads AIRFLOW_HOME at import: run in a child so this process stays Airflow-free.
        local, s3 = AIRFLOW_SIZES[args.scale]
        subprocess.run(
            [
                sys.executable,
                str(BENCH / "airflow_overhead.py"),
                "--done",
                ",".join(map(str, local)),
                "--s3-done",
                ",".join(map(str, s3)),
                "--out",
                str(RESULTS / "airflow_overhead.json"),
            ],
            cwd=ROOT,
            check=True,
        )
        write_json("airflow_overhead.json", json.loads((RESULTS / "airflow_overhead.json").read_text()))
    if wanted("dags", "dags_test.json"):
        print("[dags] one dag.test() of ckpt_daily_events ...", flush=True)
        write_json("dags_test.json", run_dags_test())

    meta["load_end"] = [round(x, 2) for x in os.getloadavg()]
    machine.finish()
    meta["machine"] = machine.record()
    write_json("meta.json", meta)
    import report

    report.build(RESULTS, meta)
    print(f"load average at end: {meta['load_end']}")
    print(f"wrote {RESULTS / 'README.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
