"""End-to-end demo of example DAG 1 (``ckpt_daily_events``) on a fresh AIRFLOW_HOME.

One DAG run, played the way a user plays it from the UI (the run's params never change):

1. its Spark job fails on the first try: a bad record in one partition makes the job's own
   UDF raise, and the error names the record and the fix (``--fail-in writer``: that
   partition's writer dies halfway through its file instead, on the first try only);
2. the record is corrected where the DAG reads corrections, the Airflow Variable
   ``ckpt_daily_events_corrections`` (``airflow variables set``, as from Admin > Variables),
   while the task waits for its retry;
3. Airflow's retry resumes the job: it skips every event the first try checkpointed; the
   commit deletes whatever the failed try left behind;
4. a summary: skipped, processed, cleaned, and a check that every event is in the output
   exactly once.

The run is a ``dag.test()`` in its own process, against a SQLite metadata DB.

    python scripts/demo.py [--events 200000] [--partitions 8] [--fail-partition 6] [--fail-in udf|writer] [--home DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DAG_ID = "ckpt_daily_events"
SPARK_TASK = "process_events"
DAY = dt.datetime(2024, 6, 1, tzinfo=dt.UTC)
CORRECTIONS_VARIABLE = "ckpt_daily_events_corrections"
#: How the job's UDF names the bad record (dags_examples/jobs/daily_events.py).
BAD_RECORD = re.compile(r"event (\d+) has the amount '[^']*', not a number")


def airflow_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "CKPT_"))}
    bin_dir = str(Path(sys.executable).parent)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
            "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
    )
    return env


def run_dag_in_this_process(conf_json: str, result_path: str) -> None:
    """Child mode: one ``dag.test()`` run (run_after fixed, so a second call re-runs the same run id)."""
    from airflow.utils.cli import get_bagged_dag

    dag = get_bagged_dag(None, DAG_ID)
    dag_run = dag.test(logical_date=DAY, run_after=DAY, run_conf=json.loads(conf_json))
    state = getattr(dag_run.state, "value", dag_run.state)
    Path(result_path).write_text(json.dumps({"run_id": dag_run.run_id, "state": str(state)}))


def start_dag_run(env: dict[str, str], home: Path, conf: dict[str, Any]) -> tuple[subprocess.Popen[bytes], Path]:
    """The DAG run, in its own process (``dag.test()``): its log file fills as it runs."""
    log_path = home / "dag_run.log"
    with open(log_path, "wb") as log:
        child = subprocess.Popen(
            [sys.executable, __file__, "--child", json.dumps(conf), str(home / "dag_run.json")],
            env=env,
            cwd=home,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return child, log_path


def query(home: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(home / "airflow.db", timeout=30)) as db:
        return list(db.execute(sql, params))


def spark_task_state(home: Path) -> tuple[str | None, int]:
    """(state, try number) of the Spark task in the one DAG run of this AIRFLOW_HOME."""
    rows = query(home, "SELECT state, try_number FROM task_instance WHERE dag_id=? AND task_id=?", DAG_ID, SPARK_TASK)
    return rows[0] if rows else (None, 0)


def xcom(home: Path, task_id: str, key: str = "return_value") -> Any:
    rows = query(home, "SELECT value FROM xcom WHERE dag_id=? AND task_id=? AND key=?", DAG_ID, task_id, key)
    return json.loads(rows[0][0]) if rows else None


def _failure_cause(log: Path) -> str:
    """The user-facing error of the failed job, from the DAG run's log (the last Python error)."""
    causes = [
        line[line.index(kind) :].strip()
        for line in log.read_text(errors="replace").splitlines()
        for kind in ("ValueError: ",)
        if kind in line
    ]
    return causes[-1][:400] if causes else ""


def output_files(output: Path) -> list[Path]:
    return sorted(output.rglob("*.parquet")) if output.exists() else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--fail-partition", type=int, default=6, help="partition with the bad record")
    parser.add_argument(
        "--fail-in", choices=("udf", "writer"), default="udf", help="the job's UDF raises, or the writer dies"
    )
    parser.add_argument("--home", type=Path, help="AIRFLOW_HOME to create (default: a new temp dir)")
    parser.add_argument("--child", nargs=2, metavar=("CONF", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_dag_in_this_process(*args.child)
        return

    # Imported here: the child process must configure Airflow (AIRFLOW_HOME) before pyarrow/airflow load.
    import pyarrow.parquet as pq

    from airflow_ckpt_provider.store import open_store

    home = (args.home or Path(tempfile.mkdtemp(prefix="ckpt-demo-"))).resolve()
    (home / "dags").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "dags_examples" / "ckpt_daily_events.py", home / "dags")
    shutil.copytree(ROOT / "dags_examples" / "jobs", home / "dags" / "jobs", dirs_exist_ok=True)
    # Airflow must not parse the Spark job scripts as DAG files: importing one (pyspark, pandas) can
    # outlast the DAG import timeout on a loaded machine, and the interrupted import leaves pandas
    # half-initialized in the dag.test() process, failing the commit task later.
    shutil.copy(ROOT / "dags_examples" / ".airflowignore", home / "dags")
    env = airflow_env(home)
    print(f"AIRFLOW_HOME={home}")
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=env, cwd=home, check=True, capture_output=True
    )
    print(f"airflow db migrate: {time.monotonic() - started:.1f} s")

    conf = {
        "events": args.events,
        "partitions": args.partitions,
        "fail_partition": args.fail_partition,
        "fail_in": args.fail_in,
    }
    output = home / "lake" / "daily_events" / f"day={DAY.date().isoformat()}"

    what = "the job's UDF raising on it" if args.fail_in == "udf" else "its writer dying mid-file (first try only)"
    print(f"\n[1] DAG run with a bad record in partition {args.fail_partition} of {args.partitions}, {what} ...")
    started = time.monotonic()
    child, log_path = start_dag_run(env, home, conf)
    handled_tries: set[int] = set()
    corrected: dict[str, str] = {}
    while child.poll() is None:
        time.sleep(1)
        state, tries = spark_task_state(home)
        if state != "up_for_retry" or tries in handled_tries:
            continue
        handled_tries.add(tries)
        plan = xcom(home, SPARK_TASK, "checkpoint_plan")
        progress = open_store(plan["checkpoint_uri"]).inspection.progress()
        print(f"    try {tries}: failed after {time.monotonic() - started:.0f} s; Airflow retries it in 30 s")
        cause = _failure_cause(log_path)
        if cause:
            print(f"    cause: {cause}")
        print(f"    store {plan['checkpoint_uri']}")
        # sealed_partitions counts this epoch's checkpoints only: a later try seals an empty one for
        # each partition an earlier try finished (it skipped all its events), so it is not added up.
        again = " (empty for those an earlier try finished)" if plan["epoch"] > 1 else ""
        print(
            f"    epoch {plan['epoch']}: this try sealed {progress.sealed_partitions} of {args.partitions} "
            f"partitions{again}; {progress.keys_done} of {args.events} events checkpointed in all; "
            f"{len(output_files(output))} Parquet files on disk"
        )
        bad = BAD_RECORD.search(cause)
        if bad and not corrected:
            corrected = {bad.group(1): "0.00"}
            print(
                f"\n[2] The record corrected in the Airflow Variable {CORRECTIONS_VARIABLE} (as from Admin > Variables)"
            )
            value = json.dumps(corrected)
            subprocess.run(
                [sys.executable, "-m", "airflow", "variables", "set", CORRECTIONS_VARIABLE, value],
                env=env,
                cwd=home,
                check=True,
                capture_output=True,
            )
            print(f"    airflow variables set {CORRECTIONS_VARIABLE} '{value}'")
    result_path = home / "dag_run.json"
    if not result_path.exists():
        sys.exit(f"demo: the DAG run did not finish; see {log_path}")
    run = json.loads(result_path.read_text())
    state, tries = spark_task_state(home)
    step = 3 if corrected else 2
    print(f"\n[{step}] Airflow's retry resumed the job (try {tries} of {SPARK_TASK}) ...")
    if run["state"] != "success":
        sys.exit(f"demo: the DAG run ended {run['state']}; see {log_path}")
    print(f"    run {run['run_id']}: {run['state']} in {time.monotonic() - started:.0f} s")

    plan = xcom(home, SPARK_TASK, "checkpoint_plan")
    job = xcom(home, SPARK_TASK)
    commit = xcom(home, "commit")
    table = pq.read_table(output, columns=["event_id", "amount"]).to_pydict()
    event_ids = table["event_id"]
    rows, distinct = len(event_ids), len(set(event_ids))
    summary = [
        ("events in the day", args.events),
        ("tries of the Spark task", tries),
        ("checkpoints sealed by the failed tries", plan["checkpoints_skipped"]),
        ("events skipped on resume", plan["keys_skipped"]),
        ("events processed on resume", job["keys"]),
        ("files committed", commit["files_committed"]),
        ("rows committed", commit["rows_committed"]),
        ("orphans of the failed tries deleted", commit["orphans_deleted"]),
        ("bytes freed", commit["bytes_freed"]),
        ("unknown files (kept, reported)", commit["unknown_files"]),
        ("checkpoints removed by retention", commit["checkpoints_removed_by_retention"]),
        ("output rows / distinct event ids", f"{rows} / {distinct}"),
    ]
    amounts = dict(zip(event_ids, table["amount"], strict=True))
    for event_id in corrected:
        summary.append((f"amount of the corrected event {event_id}", amounts.get(int(event_id))))
    print(f"\n[{step + 1}] Summary")
    width = max(len(name) for name, _ in summary)
    for name, value in summary:
        print(f"    {name:<{width}}  {value}")
    ok = (
        rows == distinct == args.events
        and commit["unknown_files"] == 0
        and all(amounts.get(int(event_id)) == float(raw) for event_id, raw in corrected.items())
    )
    print("\n" + ("OK: every event is in the output exactly once." if ok else "MISMATCH: see the logs above."))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
