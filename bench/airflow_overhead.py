"""Benchmark: the time the Airflow operators add around ``spark-submit``, on local and S3 stores.

The real operator code runs — ``CheckpointedSparkSubmitOperator.execute`` and
``CheckpointCommitOperator.execute`` — with only the ``spark-submit`` process
replaced: ``SparkSubmitHook.submit`` (the base class the operator's hook calls after
opening the epoch) is swapped for a stand-in job that seals ``--new`` checkpoints in
the epoch it was given and writes the driver's result file. So the timings are:

* **pre-submit**: ``execute`` start → the moment ``spark-submit`` would start (hook
  and connection lookup, store opened, epoch opened, skip plan logged and pushed);
* **post-submit**: ``spark-submit`` exit → ``execute`` returns (job result read,
  degraded check, epoch ended);
* **commit**: ``CheckpointCommitOperator.execute`` (commit, orphan cleanup,
  ``delete_after_success`` retention).

Scenarios: a first submit on an empty store, and resumed submits on a store
holding N checkpoints of an earlier failed attempt. Each scenario runs on a fresh
store, ``--repeats`` times (the median counts); the first operator call of the
process (Airflow imports) is a warm-up, not counted.

    .venv/bin/python bench/airflow_overhead.py [--done 0,1000,10000] [--s3-done 0,1000] [--new 40]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench import quiet  # noqa: E402

WORK = ROOT / "bench" / "work"
RESULTS = ROOT / "bench" / "results"
S3_CONN = "bench_s3"


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def configure_airflow(home: Path) -> None:
    """A private AIRFLOW_HOME; connections come from the environment (no metadata DB is needed)."""
    home.mkdir(parents=True, exist_ok=True)
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(home / "dags")
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{home / 'airflow.db'}"
    os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[2]"})


def s3_connection(options: dict[str, Any]) -> None:
    os.environ[f"AIRFLOW_CONN_{S3_CONN.upper()}"] = json.dumps(
        {
            "conn_type": "aws",
            "login": options["aws_access_key_id"],
            "password": options["aws_secret_access_key"],
            "extra": {"endpoint_url": options["endpoint_url"], "region_name": options["region_name"]},
        }
    )


class StandInJob:
    """Replaces the ``spark-submit`` process: seals checkpoints in the epoch it got, writes the result."""

    def __init__(self, new: int, keys: int, options: dict[str, Any]) -> None:
        self.new, self.keys, self.options = new, keys, options
        self.submitted_at = 0.0
        self.returned_at = 0.0
        self.offset = 10**9  # keys of the stand-in job never overlap the filled ones

    def __call__(self, hook: Any, application: str = "", **kwargs: Any) -> None:
        from airflow_ckpt_provider.contract import CONF_EPOCH, CONF_RESULT_PATH, CONF_STORE_URI
        from airflow_ckpt_provider.store import FileMetadata, open_store

        self.submitted_at = time.perf_counter()
        conf = hook._conf
        store = open_store(conf[CONF_STORE_URI], **self.options)
        epoch = int(conf[CONF_EPOCH])
        output = f"{store.uri}-out"
        for index in range(self.new):
            checkpoint_id = str(uuid.uuid4())
            path = f"{output}/part-{epoch}-{index:05d}.parquet"
            store.record_intent(checkpoint_id, [path], epoch=epoch)
            store.stage_files(checkpoint_id, [FileMetadata(path, 100, self.keys, "parquet")])
            start = self.offset + epoch * 10**7 + index * self.keys
            store.stage_keys(checkpoint_id, pa.array(range(start, start + self.keys), pa.int64()))
            store.checkpoint(checkpoint_id, epoch=epoch, partition=index)
        result = {
            "store_uri": store.uri,
            "epoch": epoch,
            "degraded": False,
            "rows": self.new * self.keys,
            "files": self.new,
            "keys": self.new * self.keys,
            "sealed_partitions": self.new,
            "input": {"files_listed": 0, "files_skipped": 0, "files_pending": 0, "bytes_read": 0, "files_read": 0},
            "writes": [],
        }
        Path(conf[CONF_RESULT_PATH]).write_text(json.dumps(result))
        store.close()
        self.returned_at = time.perf_counter()


@contextmanager
def stand_in_submit(job: StandInJob) -> Iterator[None]:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    original = SparkSubmitHook.submit

    def submit(hook: Any, application: str = "", **kwargs: Any) -> None:
        job(hook, application, **kwargs)

    SparkSubmitHook.submit = submit  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        SparkSubmitHook.submit = original  # type: ignore[method-assign]


def one_run(uri: str, aws_conn_id: str | None, options: dict[str, Any], new: int, keys: int) -> dict[str, float]:
    from airflow.sdk import DAG

    from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
    from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator

    with DAG("bench_overhead", schedule=None, start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC)):
        submit = CheckpointedSparkSubmitOperator(
            task_id="process", application="job.py", checkpoint_uri=uri, aws_conn_id=aws_conn_id
        )
        commit = CheckpointCommitOperator(task_id="commit", checkpoint_uri=uri, aws_conn_id=aws_conn_id, degraded=False)
    context: dict[str, Any] = {"run_id": "bench__1"}
    job = StandInJob(new, keys, options)
    with stand_in_submit(job):
        started = time.perf_counter()
        summary = submit.execute(context)  # type: ignore[arg-type]
        ended = time.perf_counter()
    assert summary["sealed_partitions"] == new, summary
    commit_started = time.perf_counter()
    committed = commit.execute(context)  # type: ignore[arg-type]
    commit_seconds = time.perf_counter() - commit_started
    return {
        "pre_submit": job.submitted_at - started,
        "post_submit": ended - job.returned_at,
        "commit": commit_seconds,
        "checkpoints_committed": committed["checkpoints_committed"],
    }


def scenario(
    backend: str, base_uri: str, options: dict[str, Any], done: int, new: int, keys: int, repeats: int
) -> dict[str, Any]:
    from store_scale import fill

    from airflow_ckpt_provider.store import EpochStatus, open_store

    aws_conn_id = S3_CONN if backend == "s3" else None
    runs = []
    for _ in range(repeats):
        uri = f"{base_uri}/{uuid.uuid4().hex[:10]}"
        if done:
            store = open_store(uri, **options)
            # The failed earlier attempt of the same task (same owner: the operator's retry).
            fill(store, f"{uri}-out", done, keys, status=EpochStatus.FAILED, owner="bench_overhead/process/bench__1")
            store.close()
        runs.append(one_run(uri, aws_conn_id, options, new, keys))
    row: dict[str, Any] = {"backend": backend, "done_checkpoints": done, "new_checkpoints": new, "runs": runs}
    for phase in ("pre_submit", "post_submit", "commit"):
        row[phase] = statistics.median(r[phase] for r in runs)
    print(
        f"[airflow] {backend}, {done:,} done + {new} new: pre-submit {row['pre_submit'] * 1000:.0f} ms, "
        f"post-submit {row['post_submit'] * 1000:.0f} ms, commit {row['commit'] * 1000:.0f} ms",
        flush=True,
    )
    return row


def run(local_done: list[int], s3_done: list[int], new: int, keys: int, repeats: int) -> dict[str, Any]:
    result: dict[str, Any] = {"load_start": load(), "new_checkpoints": new, "keys_per_checkpoint": keys, "rows": []}
    print(f"[airflow] load average at start: {result['load_start']}", flush=True)
    WORK.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ckpt-airflow-", dir=WORK) as tmp:
        configure_airflow(Path(tmp) / "airflow-home")
        base = f"file://{tmp}/stores"
        warm_up = time.perf_counter()
        one_run(f"{base}/warm-up", None, {}, 1, keys)
        result["warm_up_seconds"] = time.perf_counter() - warm_up
        # Task logs at INFO would flood the bench output; they cost the same either way.
        for name in ("airflow", "airflow_ckpt_provider", "botocore", "boto3"):
            logging.getLogger(name).setLevel(logging.ERROR)
        for done in local_done:
            result["rows"].append(scenario("local", base, {}, done, new, keys, repeats if done < 10_000 else 1))
        if s3_done:
            from ckpt_testkit.seaweed import SeaweedServer

            server = SeaweedServer(Path(tmp) / "seaweed")
            server.start()
            try:
                bucket = server.create_bucket("overhead")
                s3_connection(server.options())
                # The first S3 call of a process loads boto3's service models: an Airflow task pays it
                # once (any AWS access does), so it is reported apart from the per-run medians.
                cold = one_run(f"s3://{bucket}/warm-up", S3_CONN, server.options(), 1, keys)
                result["s3_cold_pre_submit_seconds"] = cold["pre_submit"]
                for done in s3_done:
                    result["rows"].append(
                        scenario(
                            "s3",
                            f"s3://{bucket}/ckpt",
                            server.options(),
                            done,
                            new,
                            keys,
                            repeats if done < 10_000 else 1,
                        )
                    )
            finally:
                server.close()
    result["load_end"] = load()
    print(f"[airflow] load average at end: {result['load_end']}", flush=True)
    return result


def _sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--done", default="0,1000,10000", help="checkpoints of the failed attempt (local)")
    parser.add_argument("--s3-done", default="0,1000", help="checkpoints of the failed attempt (S3)")
    parser.add_argument("--new", type=int, default=40, help="checkpoints the submitted job seals")
    parser.add_argument("--keys", type=int, default=100, help="keys per checkpoint")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "airflow_overhead.json")
    quiet.add_argument(parser)
    args = parser.parse_args()
    machine = quiet.gate(args)
    result = run(_sizes(args.done), _sizes(args.s3_done), args.new, args.keys, args.repeats)
    machine.finish()
    result["machine"] = machine.record()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
