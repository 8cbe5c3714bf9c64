"""Benchmark: row keys at Spark's speed, and what a rerun after a failure costs (docs/row-keys.md).

One generated input (48 Parquet files, 5.76 M rows, cached under ``bench/work/``), the
issue's cheap map-only transformation, one local[2] SparkSession, everything measured
in the same run against the same baseline — ``spark.read.parquet`` + transformation +
``df.write.parquet``:

* **clean run** — ``skip_completed(df, key="event_id", unique=True)`` + ``write_parquet``
  (Spark's own writer, keys recorded by the JVM). Target: at most 1.10x. Also shown:
  the same with the exchange at the source (``unique=False``), and with ``--arrow`` the Arrow writer.
* **rerun after a failure** — a run whose *user* transformation raises in the task at
  50 % / 90 % of the run (earlier tasks finish and stay sealed), then a rerun that
  resumes; against a plain full run. Targets: <= 0.60 after 50 % done, <= 0.25 after
  90 % done, and the rerun's write stage keeps both cores busy (Spark's event log:
  tasks and peak concurrency). With ``--scan-share`` also the share of the rerun spent reading
  its input (the rerun's source alone into Spark's no-op sink).
* **incremental** — half the input files run and committed, then a run over all of them (the new
  half is pending): target <= 0.75 of a plain full run (``unique=True`` and ``False``).
* **floor** (``--measures floor``, not run by default) — what a rerun at 50 % / 90 % done cannot go below in plain
  Spark with no store: the plain job over the files a ``unique=True`` rerun reads, and the plain job reading every
  row (a ``unique=False`` bucket has rows in every file) but writing only the pending share of the keys.
* every measure above runs for integer keys (``event_id``) and string keys (``event_key``, such as
  ``u000000123456``: the same input with that column added), ``--keys int,string``; the rerun and the
  incremental run also with ``unique=False`` (targets 0.65 at 50 %, 0.30 at 90 %).
* ``--connect``: every run, the baseline too, through a Spark Connect client session on the same
  application (its Connect service), where the default writer is the Arrow one;
  ``bench/results/row_keys_connect.txt``.
* **store read of done keys** — a store holding 1 M, 5 M and 10 M done keys (250 k per
  checkpoint): the driver's read (``get_checkpointed_keys``) and the executors' read
  that a rerun on a changed input anti-joins with.

Each ratio is the median of ``--repeat`` repetitions, and their range is printed beside it: each
repetition's run divided by the plain run of the same repetition (the clean variants take turns with
it; every rerun and incremental repetition ends with its own plain run), so that a drift of the
machine between minutes does not move a ratio. The ``unique=False`` runs write ``--exchange-buckets``
(20) buckets: with the session's 8 a failure at 90 % leaves 75 % done (the task running beside the
failing one is killed with the job). The incremental ``unique=False`` run is measured twice: with the
default ``broadcast_threshold`` (1 M: its 2.9 M done keys are sort-merge joined, every input row
shuffled) and with ``--broadcast-threshold`` (4 M: broadcast, no shuffle of the input).

    .venv/bin/python bench/row_keys.py [--repeat 5] [--max-partition-bytes 8388608] [--store-keys 1,5,10]
        [--keys int,string] [--exchange-buckets 20] [--broadcast-threshold 4000000] [--arrow] [--scan-share]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.types import LongType  # noqa: E402
from spark_overhead import generate, transform  # noqa: E402

from airflow_ckpt_provider.contract import CONF_PYTHON_DAEMON, WORKER_DAEMON_MODULE  # noqa: E402
from airflow_ckpt_provider.spark import CheckpointedJob  # noqa: E402
from airflow_ckpt_provider.spark.skip import done_keys_frame  # noqa: E402
from airflow_ckpt_provider.store import new_checkpoint_id, open_store  # noqa: E402
from bench import quiet  # noqa: E402
from ckpt_testkit.spark_events import event_log_confs, peak_concurrency, write_task_intervals  # noqa: E402

WORK = ROOT / "bench" / "work" / "row_keys"
RESULTS = ROOT / "bench" / "results"
#: The key column of each key kind: integer ids, and string ids (``u`` + 12 digits) of the same rows.
KEY_COLUMNS = {"int": "event_id", "string": "event_key"}


def generate_string_keys(inputs: list[str]) -> list[str]:
    """The same files with a string key column ``event_key`` (cached beside them)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    paths = []
    for path in inputs:
        target = Path(path).parent.with_name(Path(path).parent.name + "-string") / Path(path).name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            table = pq.read_table(path)
            ids = pc.utf8_lpad(pc.cast(table.column("event_id"), pa.string()), width=12, padding="0")
            table = table.append_column("event_key", pc.binary_join_element_wise("u", ids, ""))
            pq.write_table(table, str(target) + ".tmp", compression="snappy")
            os.replace(str(target) + ".tmp", target)
        paths.append(str(target))
    return paths


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    return path


def _timed(step: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = step()
    return time.perf_counter() - started, value


def plain_run(spark: SparkSession, inputs: list[str], out: Path) -> None:
    transform(spark.read.parquet(*inputs)).write.mode("overwrite").parquet(str(_fresh(out)))


def _failing_from(first_failing_task: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The user's code meeting a bad record: every task from ``first_failing_task`` on raises."""

    def fail(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        if TaskContext.get().partitionId() >= first_failing_task:
            raise ValueError("bad record")
        yield from batches

    return fail


def row_key_run(
    spark: SparkSession,
    inputs: list[str],
    store: Path,
    out: Path,
    *,
    key: str = "event_id",
    unique: bool = True,
    engine: str | None = None,
    fail_from: int | None = None,
    scan_only: bool = False,
    buckets: int | None = None,
    broadcast_threshold: int | None = None,
) -> dict[str, Any]:
    """One submit: its own epoch, skip the done keys, transform, write checkpointed."""
    started = time.perf_counter()
    # Where the run's wall time goes, phase by phase (driver-side calls; the write includes the tasks'
    # scan, the user's transformation, the writer and the sealing of each task's checkpoint).
    phases: dict[str, float] = {}
    settings = {} if broadcast_threshold is None else {"broadcast_threshold": broadcast_threshold}
    phases["open"], job = _timed(lambda: CheckpointedJob(spark, f"file://{store}", owner="bench", **settings))
    options: dict[str, Any] = {} if unique else {"num_partitions": buckets}
    phases["skip"], df = _timed(
        lambda: job.skip_completed(spark.read.parquet(*inputs), key=key, unique=unique, **options)
    )
    skip = job._skips[-1]
    result: dict[str, Any] = {"pruned_files": len(skip.prune), "keys_anti_joined": skip.needs_keys, "phases": phases}
    if scan_only:
        # The rerun's input alone (what it must read before any work): Spark's no-op sink.
        seconds, _ = _timed(lambda: df.write.format("noop").mode("overwrite").save())
        job.finish(succeeded=False)
        return {**result, "seconds": seconds}
    pipeline = transform(df)
    if fail_from is not None:
        pipeline = pipeline.mapInArrow(_failing_from(fail_from), pipeline.schema)
    failed = False
    summary = None
    write_started = time.perf_counter()
    try:
        summary = job.write_parquet(pipeline, f"file://{out}", engine=engine)
    except Exception:
        failed = True
    phases["write"] = time.perf_counter() - write_started
    phases["finish"], _ = _timed(lambda: job.finish(succeeded=not failed))
    seconds = time.perf_counter() - started
    return {
        **result,
        "seconds": seconds,
        "failed": failed,
        "engine": summary.engine if summary else None,
        "partitions": summary.partitions if summary else None,
        "keys_done": job.store.inspection.progress().keys_done,
        "keys_written": summary.keys if summary else 0,
    }


def _commit(store: Path, out: Path) -> float:
    seconds, _ = _timed(lambda: open_store(f"file://{store}").commit(output_roots=[f"file://{out}"]))
    return seconds


def measure_clean(
    spark: SparkSession, inputs: list[str], key: str, repeat: int, run_dir: Path, buckets: int, arrow: bool
) -> dict[str, list[float]]:
    variants: dict[str, Callable[[int], float]] = {
        "plain": lambda i: _timed(lambda: plain_run(spark, inputs, run_dir / "plain"))[0],
        "unique": lambda i: row_key_run(spark, inputs, _fresh(run_dir / f"s-u-{i}"), _fresh(run_dir / "o-u"), key=key)[
            "seconds"
        ],
        "exchange": lambda i: row_key_run(
            spark, inputs, _fresh(run_dir / f"s-x-{i}"), _fresh(run_dir / "o-x"), key=key, unique=False, buckets=buckets
        )["seconds"],
    }
    if arrow:
        variants["arrow"] = lambda i: row_key_run(
            spark, inputs, _fresh(run_dir / f"s-a-{i}"), _fresh(run_dir / "o-a"), key=key, engine="arrow"
        )["seconds"]
    times: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(repeat):
        for name, variant in variants.items():
            times[name].append(variant(i))
    return times


def measure_rerun(
    spark: SparkSession,
    inputs: list[str],
    key: str,
    unique: bool,
    fraction: float,
    repeat: int,
    run_dir: Path,
    events: Path,
    buckets: int,
    scan_share: bool,
    scan_tasks: int,
) -> list[dict[str, Any]]:
    """Fail at ``fraction`` of the write tasks (user code), then resume, then a plain full run (this
    repetition's baseline: the ratio pairs runs made a minute apart); one dict per repetition."""
    # The write stage's tasks: the scan's (unique keys, no exchange) or the buckets of the exchange.
    tasks = scan_tasks if unique else buckets
    rows = []
    tag = f"{key}-{'u' if unique else 'x'}-{fraction}"
    for i in range(repeat):
        store, out = _fresh(run_dir / f"r{tag}-{i}"), _fresh(run_dir / f"r{tag}-{i}-out")
        # Tasks run in order two at a time: the one beside the first failing task is killed with the job.
        fail_from = min(tasks - 1, round(fraction * tasks) + 1)
        run = functools.partial(row_key_run, spark, inputs, store, out, key=key, unique=unique, buckets=buckets)
        failed = run(fail_from=fail_from)
        assert failed["failed"], "the injected failure did not fail the run"
        scan = run(scan_only=True) if scan_share else None
        rerun = run()
        plain, _ = _timed(lambda: plain_run(spark, inputs, run_dir / "plain"))
        # The share of the work the failed run kept: its sealed keys of all the keys that reach the writer.
        done = failed["keys_done"] / max(1, failed["keys_done"] + rerun["keys_written"])
        assert not rerun["failed"]
        intervals = write_task_intervals(events, f"file://{out}")
        rows.append(
            {
                "done": done,
                "rerun_seconds": rerun["seconds"],
                "plain_seconds": plain,
                "scan_seconds": scan["seconds"] if scan else None,
                "phases": rerun["phases"],
                "pruned_files": rerun["pruned_files"],
                "keys_anti_joined": rerun["keys_anti_joined"],
                "write_tasks": len(intervals),
                "peak_concurrency": peak_concurrency(intervals),
            }
        )
        _commit(store, out)
    return rows


def measure_incremental(
    spark: SparkSession,
    inputs: list[str],
    key: str,
    unique: bool,
    repeat: int,
    run_dir: Path,
    buckets: int,
    broadcast_threshold: int | None = None,
    interleaved: bool = False,
) -> list[dict[str, Any]]:
    """Half the files run and committed, then a run over all of them, then a plain full run (the
    repetition's baseline); the second run, one dict per repetition. The first half: the first 24 files
    (the new files' keys all beyond the done ones), or with ``interleaved`` every other file (each new
    file's keys between two done files' keys: the done keys are joined)."""
    seconds = []
    tag = f"{key}-{'u' if unique else 'x'}-{broadcast_threshold}-{interleaved}"
    for i in range(repeat):
        store, out = _fresh(run_dir / f"i{tag}-{i}"), _fresh(run_dir / f"i{tag}-{i}-out")
        run = functools.partial(
            row_key_run,
            spark,
            store=store,
            out=out,
            key=key,
            unique=unique,
            buckets=buckets,
            broadcast_threshold=broadcast_threshold,
        )
        first = run(inputs=inputs[::2] if interleaved else inputs[: len(inputs) // 2])
        assert not first["failed"]
        _commit(store, out)
        second = run(inputs=inputs)
        assert not second["failed"] and second["keys_written"] > 0
        plain, _ = _timed(lambda: plain_run(spark, inputs, run_dir / "plain"))
        kept = {k: second[k] for k in ("seconds", "pruned_files", "keys_anti_joined", "phases")}
        seconds.append({**kept, "plain_seconds": plain})
        _commit(store, out)
    return seconds


def measure_floor(
    spark: SparkSession, inputs: list[str], key: str, repeat: int, run_dir: Path
) -> dict[str, dict[str, list[float]]]:
    """What a rerun at 50 % / 90 % done cannot go below, in plain Spark with no store at all; each repetition's
    time divided by a plain full run made beside it. ``unique``: the plain job over the input files a
    ``unique=True`` rerun still reads (the done ones skipped unread). ``exchange``: the plain job reading every
    row (a ``unique=False`` bucket has rows in every file) and writing only the pending share of the keys (a
    hash of the key), with no shuffle, no key recorded, nothing skipped by a store."""
    from pyspark.sql import functions as F

    ratios: dict[str, dict[str, list[float]]] = {"unique": {}, "exchange": {}}
    for i in range(repeat):
        for fraction in (0.5, 0.9):
            pending = inputs[round(fraction * len(inputs)) :]
            half, _ = _timed(functools.partial(plain_run, spark, pending, run_dir / "floor"))
            share = F.pmod(F.xxhash64(key), F.lit(100)) >= F.lit(round(fraction * 100))
            frame = transform(spark.read.parquet(*inputs).filter(share))
            write = functools.partial(frame.write.mode("overwrite").parquet, str(_fresh(run_dir / "floor")))
            read_all, _ = _timed(write)
            plain, _ = _timed(lambda: plain_run(spark, inputs, run_dir / "plain"))
            ratios["unique"].setdefault(str(fraction), []).append(half / plain)
            ratios["exchange"].setdefault(str(fraction), []).append(read_all / plain)
        print(f"floor repetition {i + 1} done", flush=True)
    return ratios


def measure_store_read(spark: SparkSession, millions: list[int], run_dir: Path) -> list[dict[str, Any]]:
    """Done keys of a store holding N million keys: the driver's read and the executors' read."""
    results = []
    per_checkpoint = 250_000
    for count in millions:
        store_dir = _fresh(run_dir / f"keys-{count}m")
        store = open_store(f"file://{store_dir}")
        epoch = store.epochs.begin(owner="bench-keys").number
        total = count * 1_000_000
        for start in range(0, total, per_checkpoint):
            checkpoint_id = new_checkpoint_id()
            store.stage_keys(checkpoint_id, pa.array(np.arange(start, start + per_checkpoint, dtype=np.int64)))
            store.checkpoint(checkpoint_id, epoch=epoch, partition=start // per_checkpoint)
        driver_seconds, table = _timed(store.get_checkpointed_keys)
        assert table.num_rows == total

        frame = done_keys_frame(spark, store, LongType(), broadcast_threshold=0, num_keys=total)
        assert frame is not None
        executor_seconds, _ = _timed(frame.write.format("noop").mode("overwrite").save)
        results.append(
            {
                "keys": total,
                "checkpoints": total // per_checkpoint,
                "driver_seconds": driver_seconds,
                "executor_seconds": executor_seconds,
            }
        )
        shutil.rmtree(store_dir, ignore_errors=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=48)
    parser.add_argument("--rows", type=int, default=120_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--max-partition-bytes",
        type=int,
        default=8 * 1024 * 1024,
        help="spark.sql.files.maxPartitionBytes for every run: 24 tasks (each a checkpoint) instead of 3",
    )
    parser.add_argument("--store-keys", default="1,5,10", help="millions of done keys for the store read")
    parser.add_argument(
        "--python-daemon",
        default=WORKER_DAEMON_MODULE,
        help="spark.python.daemon.module (default: the package's, as the submit operator sets it; pyspark.daemon)",
    )
    parser.add_argument("--keys", default="int,string", help="key kinds: int (event_id), string (event_key)")
    parser.add_argument(
        "--exchange-buckets",
        type=int,
        default=20,
        help="num_partitions of the unique=False runs: with 20 buckets a failure at 90 %% leaves 90 %% done "
        "(with 8 the task beside the failing one is killed too: 75 %%)",
    )
    parser.add_argument(
        "--broadcast-threshold",
        type=int,
        default=4_000_000,
        help="the incremental unique=False run again with this broadcast_threshold (above its 2.9 M done keys)",
    )
    parser.add_argument("--arrow", action="store_true", help="also the clean run with the Arrow writer")
    parser.add_argument(
        "--scan-share", action="store_true", help="also each rerun's source alone into the no-op sink (its read)"
    )
    parser.add_argument(
        "--connect",
        action="store_true",
        help="every run (the baseline too) over Spark Connect: a client session on the Connect service of the "
        "same local[2] application (its default writer: the Arrow one); default out row_keys_connect.txt",
    )
    parser.add_argument(
        "--measures",
        default="clean,rerun,incremental",
        help="which measures run for each key kind (comma-separated: clean, rerun, incremental, floor; the store "
        "read has --store-keys)",
    )
    parser.add_argument("--out", type=Path, default=None, help="the table; the JSON beside it")
    quiet.add_argument(parser)
    args = parser.parse_args()
    if args.out is None:
        args.out = RESULTS / ("row_keys_connect.txt" if args.connect else "row_keys.txt")
    machine = quiet.gate(args)

    os.environ["PYSPARK_PYTHON"] = sys.executable
    load_at_start = os.getloadavg()
    inputs = generate(args.files, args.rows)
    total_bytes = sum(os.path.getsize(p) for p in inputs)
    events = _fresh(WORK / "events")
    builder = SparkSession.builder
    for name, value in event_log_confs(events).items():
        builder = builder.config(name, value)
    spark = (
        builder.master("local[2]")
        .appName("bench-row-keys")
        .config("spark.driver.memory", "3g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50000")
        .config("spark.sql.files.maxPartitionBytes", str(args.max_partition_bytes))
        .config("spark.driver.host", "127.0.0.1")
        .config(CONF_PYTHON_DAEMON, args.python_daemon)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    print(f"Python worker daemon: {args.python_daemon}", flush=True)
    run_dir = _fresh(WORK / "runs")
    tasks = spark.read.parquet(*inputs).rdd.getNumPartitions()
    classic = spark
    sessions = contextlib.ExitStack()
    if args.connect:  # the same application serves Spark Connect; every run goes through a client session
        from ckpt_testkit.connect_server import connect_client, start_in_session

        spark = sessions.enter_context(connect_client(start_in_session(classic)))
    kinds = [k for k in args.keys.split(",") if k]
    measures = {m for m in args.measures.split(",") if m}
    sources = {"int": inputs, "string": generate_string_keys(inputs) if "string" in kinds else []}
    # Warm-up: JIT, Python workers, the page cache; untimed.
    plain_run(spark, inputs, run_dir / "warm-plain")
    row_key_run(spark, inputs, _fresh(run_dir / "warm-store"), _fresh(run_dir / "warm-out"))

    by_key: dict[str, Any] = {}
    for kind in kinds:
        files, key = sources[kind], KEY_COLUMNS[kind]
        buckets = args.exchange_buckets
        measured: dict[str, Any] = {"key": key, "clean_seconds": {}, "reruns": {}, "incremental": {}, "floor": {}}
        if "floor" in measures:
            measured["floor"] = measure_floor(spark, files, key, args.repeat, run_dir)
        if "clean" in measures:
            measured["clean_seconds"] = measure_clean(spark, files, key, args.repeat, run_dir, buckets, args.arrow)
        if "rerun" in measures:
            measured["reruns"] = {
                mode: {
                    str(f): measure_rerun(
                        spark,
                        files,
                        key,
                        mode == "unique",
                        f,
                        args.repeat,
                        run_dir,
                        events,
                        buckets,
                        args.scan_share,
                        classic.read.parquet(*files).rdd.getNumPartitions(),  # the scan's tasks (a classic-only call)
                    )
                    for f in (0.5, 0.9)
                }
                for mode in ("unique", "exchange")
            }
        if "incremental" in measures:
            measured["incremental"] = {
                mode: measure_incremental(spark, files, key, mode == "unique", args.repeat, run_dir, buckets)
                for mode in ("unique", "exchange")
            }
        if "incremental" in measures:
            measured["incremental"]["unique, new files between the done ones"] = measure_incremental(
                spark, files, key, True, args.repeat, run_dir, buckets, interleaved=True
            )
        if "incremental" in measures and args.broadcast_threshold:
            measured["incremental"][f"exchange, broadcast_threshold {args.broadcast_threshold / 1e6:g} M"] = (
                measure_incremental(spark, files, key, False, args.repeat, run_dir, buckets, args.broadcast_threshold)
            )
        by_key[kind] = measured
        print(f"{kind} keys measured", flush=True)
    store_read = measure_store_read(spark, [int(m) for m in args.store_keys.split(",") if m], run_dir)
    sessions.close()
    classic.stop()
    machine.finish()

    report = {
        "input": {"files": len(inputs), "rows": len(inputs) * args.rows, "bytes": total_bytes, "tasks": tasks},
        "load_average": {"start": list(load_at_start), "end": list(os.getloadavg())},
        "keys": by_key,
        "store_read": store_read,
        "python_daemon": args.python_daemon,
        "session": "connect" if args.connect else "classic",
        "exchange_buckets": args.exchange_buckets,
        "repeat": args.repeat,
        "machine": machine.record(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    (args.out.with_suffix(".json")).write_text(json.dumps(report, indent=2) + "\n")
    text = _table(report)
    args.out.write_text(text + "\n")
    print(text)
    return 0


def _loads(values: list[float]) -> str:
    return " / ".join(f"{v:.1f}" for v in values)


def _ok(flag: bool) -> str:
    return "yes" if flag else "NO"


#: Targets (docs: the row-key speed targets): clean run / plain; rerun / plain full run at 50 % and 90 %
#: done; incremental (half the files done, then all) / plain full run.
CLEAN_TARGETS = {"unique": 1.10, "exchange": 1.30}
RERUN_TARGETS = {"unique": {"0.5": 0.60, "0.9": 0.25}, "exchange": {"0.5": 0.65, "0.9": 0.30}}
INCREMENTAL_TARGET = 0.75


def _spread(ratios: list[float]) -> str:
    """The median and the range of per-repetition ratios, e.g. ``0.58 (0.55-0.63)``."""
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def _row(label: str, ratios: list[float], limit: float | None, unit: str = "") -> str:
    median = statistics.median(ratios)
    target, ok = (f"<= {limit:.2f}{unit}", _ok(median <= limit)) if limit else ("", "")
    return f"{label:<52}{_spread(ratios) + unit:>20}{target:>10}{ok:>5}"


def _table(report: dict[str, Any]) -> str:
    info = report["input"]
    lines = [
        f"input: {info['files']} Parquet files, {info['bytes'] / 1e6:.0f} MB, {info['rows']:,} rows, "
        f"{info['tasks']} scan tasks; local[2], one SparkSession"
        + (" reached over Spark Connect (every run, the baseline too)" if report.get("session") == "connect" else "")
        + f"; Python worker daemon {report['python_daemon']}; "
        f"unique=False runs in {report['exchange_buckets']} buckets",
        f"each ratio: the median of {report['repeat']} repetitions (their range in brackets), each divided by "
        "the plain run of the same repetition (made within a minute of it)",
        f"load average (1/5/15 min) at the start {_loads(report['load_average']['start'])}, at the end "
        f"{_loads(report['load_average']['end'])}, on {os.cpu_count()} cores"
        + (" -- NOISY: not evidence" if report["machine"]["noisy"] else ""),
    ]
    labels = {
        # Over Spark Connect the default writer is the Arrow one (Spark's own needs the JVM in this process).
        "unique": "unique=True, " + ("Arrow writer" if report.get("session") == "connect" else "Spark's writer"),
        "exchange": "unique=False (exchange at the source)",
        "arrow": "unique=True, Arrow writer",
    }
    for kind, measured in report["keys"].items():
        clean = measured["clean_seconds"]
        plain = clean.get("plain", [])
        lines += [
            "",
            f"{kind} keys ({measured['key']})",
            f"{'measure':<52}{'value':>20}{'target':>10}{'ok':>5}",
            "-" * 87,
        ]
        if plain:
            lines.append(f"{'plain df.write.parquet (s)':<52}{_spread(plain):>20}")
        for name, times in clean.items():
            if name == "plain":
                continue
            ratios = [t / p for t, p in zip(times, plain, strict=True)]
            lines.append(_row(f"clean, {labels[name]} / plain", ratios, CLEAN_TARGETS.get(name), "x"))
        for mode, by_fraction in measured["reruns"].items():
            for fraction, rows in by_fraction.items():
                ratios = [r["rerun_seconds"] / r["plain_seconds"] for r in rows]
                done = statistics.median(r["done"] for r in rows)
                lines.append(f"rerun, {labels[mode]}, failure in user code at {float(fraction):.0%} (done {done:.0%})")
                lines.append(_row("  rerun / plain full run", ratios, RERUN_TARGETS[mode][fraction]))
                pruned = statistics.median(r["pruned_files"] for r in rows)
                peak = min(r["peak_concurrency"] for r in rows)
                tasks = min(r["write_tasks"] for r in rows)
                lines.append(f"{'  done files skipped unread (median)':<52}{pruned:>20.0f}")
                lines.append(f"{'  done keys read (any run)':<52}{any(r['keys_anti_joined'] for r in rows)!s:>20}")
                lines.append(f"{'  write tasks / peak running at once (fewest)':<52}{f'{tasks}/{peak}':>20}")
                phases = {p: statistics.median(r["phases"][p] for r in rows) for p in rows[0]["phases"]}
                split = " / ".join(f"{p} {v:.2f}" for p, v in phases.items())
                scans = [r["scan_seconds"] / r["rerun_seconds"] for r in rows if r["scan_seconds"] is not None]
                read = f"; reading the input alone: {statistics.median(scans):.0%} of the rerun" if scans else ""
                lines.append(f"  rerun's wall time by phase (s): {split}{read}")
                one = ", ".join(f"{r['done']:.2f} {r['rerun_seconds']:.1f}/{r['plain_seconds']:.1f}" for r in rows)
                lines.append(f"    each run: done, rerun / plain (s): {one}")
        for mode, runs in measured["incremental"].items():
            ratios = [r["seconds"] / r["plain_seconds"] for r in runs]
            lines.append(_row(f"incremental (half done, then all), {mode}", ratios, INCREMENTAL_TARGET))
            pruned = statistics.median(r["pruned_files"] for r in runs)
            anti = any(r["keys_anti_joined"] for r in runs)
            phases = {p: statistics.median(r["phases"][p] for r in runs) for p in runs[0]["phases"]}
            split = " / ".join(f"{p} {v:.2f}" for p, v in phases.items())
            lines.append(f"  done files skipped unread {pruned:.0f}, done keys read {anti}; by phase (s): {split}")
        floors = {
            "unique": "plain job over the files a unique=True rerun reads",
            "exchange": "plain job reading every row, writing the pending share",
        }
        for mode, by_fraction in measured.get("floor", {}).items():
            for fraction, ratios in by_fraction.items():
                label = f"floor at {float(fraction):.0%} done: {floors[mode]}"
                lines.append(label)
                limit = RERUN_TARGETS[mode][fraction]
                lines.append(_row(f"  / plain full run (target of the {mode} rerun)", ratios, limit))
    if report["store_read"]:
        lines.append("")
        lines.append("store read of done keys (250 k keys per checkpoint, local store)")
    for row in report["store_read"]:
        label = f"  {row['keys'] / 1e6:.0f} M keys: driver read / executors read (s)"
        value = f"{row['driver_seconds']:.2f} / {row['executor_seconds']:.2f}"
        lines.append(f"{label:<52}{value:>20}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
