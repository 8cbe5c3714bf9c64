"""Benchmark: the cost of checkpointed writes, and what a resume saves.

One generated input (a few hundred Parquet files, a few hundred MB, cached under
``bench/work/``), one narrow transformation, one local[2] SparkSession, measured
in one run:

* **clean run** — ``CheckpointedJob.read_parquet`` + ``write_parquet`` (file keys,
  local store) against the baseline, plain ``spark.read.parquet`` +
  ``df.write.parquet``. Target: at most 1.10x.
* **rerun after a failure at 50% and 90%** — a checkpointed run whose task at that
  fraction of the work raises (local mode: one attempt, so the job fails), then a
  rerun that resumes; against a plain full rerun (the baseline above). Targets:
  rerun time <= (1 - done) + 0.05 of the full run, and input bytes read on the
  rerun in the same proportion.

Each timing is the median of ``--repeat`` runs, baseline and checkpointed runs
interleaved so that machine load hits both alike.

    .venv/bin/python bench/spark_overhead.py [--files 300] [--rows 40000] [--repeat 3] [--tasks 12]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark import SOURCE_FILE_COLUMN, CheckpointedJob
from airflow_ckpt_provider.spark.plan import native_layout
from bench import quiet

WORK = Path(__file__).resolve().parent / "work" / "spark_overhead"


def generate(files: int, rows: int) -> list[str]:
    directory = WORK / f"input-{files}x{rows}"
    paths = [str(directory / f"part-{i:05d}.parquet") for i in range(files)]
    if all(os.path.exists(p) for p in paths):
        return paths
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    for i, path in enumerate(paths):
        payload = rng.integers(0, 10**12, rows)
        table = pa.table(
            {
                "event_id": np.arange(i * rows, (i + 1) * rows, dtype=np.int64),
                "user_id": rng.integers(0, 100_000, rows),
                "amount": rng.random(rows) * 100,
                "country": pa.array(np.array(["DE", "FR", "US", "JP", "BR"])[rng.integers(0, 5, rows)]),
                "payload": pa.array([f"evt-{p:012d}-{'x' * 16}" for p in payload]),
            }
        )
        pq.write_table(table, path, compression="snappy")
    return paths


def transform(df: DataFrame) -> DataFrame:
    """A typical narrow step: derive, filter, normalize."""
    return (
        df.withColumn("amount_eur", F.col("amount") * F.lit(0.92))
        .withColumn("country", F.lower("country"))
        .where(F.col("user_id") % 10 != 0)
    )


def _fresh(path: Path) -> str:
    shutil.rmtree(path, ignore_errors=True)
    return str(path)


def plain_run(spark: SparkSession, inputs: list[str], out: Path) -> dict[str, Any]:
    target = _fresh(out)
    start = time.perf_counter()
    transform(spark.read.parquet(*inputs)).write.mode("overwrite").parquet(target)
    return {"seconds": time.perf_counter() - start, "bytes_read": sum(os.path.getsize(p) for p in inputs)}


def noop_run(spark: SparkSession, inputs: list[str]) -> float:
    """Read + transform only (Spark's no-op sink): the floor under both writers."""
    start = time.perf_counter()
    transform(spark.read.parquet(*inputs)).write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def checkpointed_run(
    spark: SparkSession,
    inputs: list[str],
    store: str,
    out: Path,
    tasks: int,
    fail_fraction: float | None = None,
    reader: str = "auto",
    engine: str = "auto",
) -> dict[str, Any]:
    """One submit: its own epoch, read the pending files, write checkpointed.

    ``fail_fraction``: the write task at that fraction of the run's tasks raises (tasks run in order).
    """
    start = time.perf_counter()
    job = CheckpointedJob(spark, store, owner="bench")
    source = job.read_parquet(inputs, reader=reader, min_partitions=tasks)
    df = transform(source)
    if fail_fraction is not None:
        layout = native_layout(job.backend, source, SOURCE_FILE_COLUMN)
        count = tasks if isinstance(layout, str) else len(layout)
        df = df.mapInArrow(_failing_from(round(fail_fraction * count)), df.schema)
    setup = time.perf_counter() - start
    failed = False
    used = None
    try:
        used = job.write_parquet(df, f"file://{out}", engine=engine).engine
    except Exception:
        failed = True
    result = job.finish(succeeded=not failed)
    seconds = time.perf_counter() - start
    commit_start = time.perf_counter()
    if not failed:
        job.store.commit(output_roots=[f"file://{out}"])
    return {
        "seconds": seconds,
        "setup_seconds": setup,
        "commit_seconds": time.perf_counter() - commit_start,
        # Spark's scan reads exactly the pending files it is handed (the pyarrow reader counts too).
        "bytes_read": result["input"]["bytes_pending"],
        "failed": failed,
        "keys_done": len(job.store.get_checkpointed_keys()),
        "engine": used,
    }


def _failing_from(first_failing_task: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def fail(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        if TaskContext.get().partitionId() >= first_failing_task:
            raise RuntimeError("injected failure")
        yield from batches

    return fail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=12, help="read_parquet tasks (whole files each)")
    parser.add_argument("--batch", type=int, default=50_000, help="spark.sql.execution.arrow.maxRecordsPerBatch")
    parser.add_argument(
        "--engines",
        default="spark,arrow",
        help="write_parquet engines for the clean run; the first one also runs the resume measurements",
    )
    parser.add_argument(
        "--max-partition-bytes",
        type=int,
        default=64 * 1024 * 1024,
        help="spark.sql.files.maxPartitionBytes (both runs): smaller tasks resume at a finer grain",
    )
    quiet.add_argument(parser)
    args = parser.parse_args()
    machine = quiet.gate(args)

    inputs = generate(args.files, args.rows)
    total_bytes = sum(os.path.getsize(p) for p in inputs)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-spark-overhead")
        .config("spark.driver.memory", "2g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(args.batch))
        .config("spark.sql.files.maxPartitionBytes", str(args.max_partition_bytes))
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    run_dir = WORK / "runs"
    # Warm-up: JIT, Python workers, imports, the page cache: both paths once, untimed.
    plain_run(spark, inputs[:20], run_dir / "warm-plain")
    checkpointed_run(spark, inputs[:20], _fresh(run_dir / "warm-store"), run_dir / "warm-out", 4)

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    plain, noop = [], []
    ckpt: dict[str, list[float]] = {e: [] for e in engines}
    commit: dict[str, list[float]] = {e: [] for e in engines}
    used: dict[str, str | None] = {}
    for i in range(args.repeat):
        noop.append(noop_run(spark, inputs))
        plain.append(plain_run(spark, inputs, run_dir / "plain")["seconds"])
        for engine in engines:
            clean = checkpointed_run(
                spark,
                inputs,
                _fresh(run_dir / f"store-{engine}-{i}"),
                Path(_fresh(run_dir / "ckpt")),
                args.tasks,
                engine=engine,
            )
            ckpt[engine].append(clean["seconds"])
            commit[engine].append(clean["commit_seconds"])
            used[engine] = clean["engine"]
    base = statistics.median(plain)
    resume_engine = engines[0]

    resumes = []
    for fraction in (0.5, 0.9):
        rows = []
        for i in range(args.repeat):
            store = _fresh(run_dir / f"resume-store-{fraction}-{i}")
            out = Path(_fresh(run_dir / f"resume-out-{fraction}-{i}"))
            failed = checkpointed_run(
                spark, inputs, store, out, args.tasks, fail_fraction=fraction, engine=resume_engine
            )
            assert failed["failed"], "the injected failure did not fail the run"
            done = failed["keys_done"] / len(inputs)
            rerun = checkpointed_run(spark, inputs, store, out, args.tasks, engine=resume_engine)
            # Each rerun is judged against the work its own failed run left (the kill point varies a little).
            rows.append((done, rerun["seconds"] / base, rerun["bytes_read"] / total_bytes, rerun["setup_seconds"]))
        resumes.append((fraction, *(statistics.median(r[k] for r in rows) for k in range(4)), rows))
    spark.stop()

    print()
    print(f"input: {len(inputs)} Parquet files, {total_bytes / 1e6:.0f} MB, {len(inputs) * args.rows:,} rows;")
    print(
        f"local[2], Spark's own Parquet scan, maxPartitionBytes {args.max_partition_bytes >> 20} MiB, "
        f"maxRecordsPerBatch {args.batch}; median of {args.repeat}"
    )
    machine.finish()
    print()
    print(f"{'measure':<44}{'value':>12}{'target':>14}{'ok':>5}")
    print("-" * 75)
    print(f"{'read + transform, no-op sink (s)':<44}{statistics.median(noop):>12.2f}{'':>14}")
    print(f"{'plain df.write.parquet (s)':<44}{base:>12.2f}{'':>14}")
    for engine in engines:
        ratio = statistics.median(ckpt[engine]) / base
        label = f"write_parquet clean run, engine {used[engine]} (s)"
        print(f"{label:<44}{statistics.median(ckpt[engine]):>12.2f}{'':>14}")
        print(f"{'  overhead ratio':<44}{ratio:>11.2f}x{'<= 1.10x':>14}{_ok(ratio <= 1.10):>5}")
        print(f"{'  commit afterwards (s, not in the ratio)':<44}{statistics.median(commit[engine]):>12.2f}{'':>14}")
    print(f"resumes below: engine {used[resume_engine]}")
    for fraction, done, time_ratio, read_ratio, setup, rows in resumes:
        limit = (1 - done) + 0.05
        time_ok = all(t <= (1 - d) + 0.05 for d, t, _, _ in rows)
        # Files differ in size, so bytes pending need not equal the share of files pending: judge like time.
        read_ok = all(r <= (1 - d) + 0.05 for d, _, r, _ in rows)
        print(f"{f'rerun after failure at {fraction:.0%} (done {done:.0%})':<44}{'':>12}{'':>14}")
        bound = f"<= {limit:.2f}"
        print(f"{'  rerun time / plain full rerun':<44}{time_ratio:>12.2f}{bound:>14}{_ok(time_ok):>5}")
        print(f"{'  of which job setup (s)':<44}{setup:>12.2f}{'':>14}")
        print(f"{'  input bytes read / all input':<44}{read_ratio:>12.2f}{f'<= {limit:.2f}':>14}{_ok(read_ok):>5}")
        for done_i, time_i, read_i, _ in rows:
            print(f"{'    one run: done, time, bytes':<44}{f'{done_i:.2f} {time_i:.2f} {read_i:.2f}':>12}")
    return 0


def _ok(flag: bool) -> str:
    return "yes" if flag else "NO"


if __name__ == "__main__":
    sys.exit(main())
