"""End-to-end demo of example DAG 1 (``ckpt_daily_events``) on a fresh AIRFLOW_HOME.

1. a DAG run whose Spark job fails: a bad record in one partition makes the job's own
   UDF raise (``--fail-in writer``: that partition's writer dies halfway through its
   file instead, leaving a half-written file);
2. the same DAG run again, the record fixed (same run id: its task instances are
   cleared and re-run); the second submit skips every event the first attempt
   checkpointed;
3. the commit deletes whatever the failed attempt left behind;
4. a summary: skipped, processed, cleaned, and a check that every event is in the
   output exactly once.

Each DAG run is a ``dag.test()`` in its own process, against a SQLite metadata DB.

    python scripts/demo.py [--events 200000] [--partitions 8] [--fail-partition 6] [--fail-in udf|writer] [--home DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
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


def run_dag(env: dict[str, str], home: Path, conf: dict[str, Any], log_name: str) -> dict[str, Any]:
    result_path = home / f"{log_name}.json"
    log_path = home / f"{log_name}.log"
    started = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(conf), str(result_path)],
            env=env,
            cwd=home,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if not result_path.exists():
        sys.exit(f"demo: the DAG run did not finish; see {log_path}")
    result: dict[str, Any] = json.loads(result_path.read_text())
    result["seconds"] = time.monotonic() - started
    result["log"] = str(log_path)
    return result


def xcom(home: Path, run_id: str, task_id: str, key: str = "return_value") -> Any:
    with closing(sqlite3.connect(home / "airflow.db")) as db:
        row = db.execute(
            "SELECT value FROM xcom WHERE dag_id=? AND run_id=? AND task_id=? AND key=?",
            (DAG_ID, run_id, task_id, key),
        ).fetchone()
    return json.loads(row[0]) if row else None


def _failure_cause(log: Path) -> str:
    """The user-facing error of the failed job, from the DAG run's log (the last Python error line)."""
    causes = [
        line.strip()
        for line in log.read_text(errors="replace").splitlines()
        if line.strip().startswith(("ValueError:", "RuntimeError:", "PythonException:"))
    ]
    return causes[-1][:160] if causes else ""


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

    conf = {"events": args.events, "partitions": args.partitions}
    output = home / "lake" / "daily_events" / f"day={DAY.date().isoformat()}"

    what = "the job's UDF raising on it" if args.fail_in == "udf" else "its writer dying mid-file"
    print(f"\n[1] DAG run with a bad record in partition {args.fail_partition} of {args.partitions}, {what} ...")
    first = run_dag(env, home, {**conf, "fail_partition": args.fail_partition, "fail_in": args.fail_in}, "run1")
    plan1 = xcom(home, first["run_id"], SPARK_TASK, "checkpoint_plan")
    if first["state"] != "failed" or plan1 is None:
        sys.exit(f"demo: expected the first run to fail in the Spark job, got {first['state']}; see {first['log']}")
    store = open_store(plan1["checkpoint_uri"])
    progress = store.progress()
    files_after_failure = output_files(output)
    print(f"    run {first['run_id']}: {first['state']} in {first['seconds']:.0f} s")
    cause = _failure_cause(Path(first["log"]))
    if cause:
        print(f"    cause: {cause}")
    print(f"    store {store.uri}")
    print(
        f"    epoch {plan1['epoch']}: {progress.valid_checkpoints} partitions sealed, "
        f"{progress.keys_done} of {args.events} events checkpointed; "
        f"{len(files_after_failure)} Parquet files on disk"
    )

    print("\n[2] The same DAG run again, the record fixed (cleared: same run id, same store) ...")
    second = run_dag(env, home, {**conf, "fail_partition": -1, "fail_in": args.fail_in}, "run2")
    if second["state"] != "success":
        sys.exit(f"demo: the resumed run ended {second['state']}; see {second['log']}")
    plan2 = xcom(home, second["run_id"], SPARK_TASK, "checkpoint_plan")
    job = xcom(home, second["run_id"], SPARK_TASK)
    commit = xcom(home, second["run_id"], "commit")
    print(f"    run {second['run_id']}: {second['state']} in {second['seconds']:.0f} s")

    event_ids = [i for p in output_files(output) for i in pq.read_table(p, columns=["event_id"]).column(0).to_pylist()]
    rows, distinct = len(event_ids), len(set(event_ids))
    summary = [
        ("events in the day", args.events),
        ("checkpoints sealed by the failed attempt", plan2["checkpoints_skipped"]),
        ("events skipped on resume", plan2["keys_skipped"]),
        ("events processed on resume", job["keys"]),
        ("files committed", commit["files_committed"]),
        ("rows committed", commit["rows_committed"]),
        ("orphans of the failed attempt deleted", commit["orphans_deleted"]),
        ("bytes freed", commit["bytes_freed"]),
        ("unknown files (kept, reported)", commit["unknown_files"]),
        ("checkpoints removed by retention", commit["checkpoints_removed_by_retention"]),
        ("output rows / distinct event ids", f"{rows} / {distinct}"),
    ]
    print("\n[3] Summary")
    width = max(len(name) for name, _ in summary)
    for name, value in summary:
        print(f"    {name:<{width}}  {value}")
    ok = rows == distinct == args.events and commit["unknown_files"] == 0
    print("\n" + ("OK: every event is in the output exactly once." if ok else "MISMATCH: see the logs above."))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
