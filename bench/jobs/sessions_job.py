"""The benchmark's Spark application: sessionize raw web sessions, four ways.

Input: Parquet files of raw sessions (``session_id`` unique, ``events`` a packed
string of page views). The transformation is the same in every mode: parse the
events, aggregate them per session (count, clicks, purchases, distinct pages,
dwell time), parse the referrer, enrich with a broadcast user dimension. It is
per key and stateless, so Structured Streaming can run it with a file sink (a
streaming ``groupBy`` would need a watermark, and append mode would hold the
last windows back).

Modes (``sys.argv[1]`` is a JSON spec, see ``main``):

* ``plain``: ``spark.read.parquet`` → transform → ``df.write.parquet`` (overwrite);
* ``streaming``: ``readStream`` with ``maxFilesPerTrigger`` → transform → Parquet file
  sink with a checkpoint location, ``trigger(availableNow=True)``;
* ``files``: ``CheckpointedJob.read_parquet`` (file-path keys) → transform → ``write_parquet``;
* ``rows``: ``spark.read.parquet`` → ``skip_completed(key="session_id", unique=True)`` → transform →
  ``write_parquet``.

The driver prints one line ``BENCH_JOB {json}`` with its own timings (from a ready
SparkSession to the end) and, for the checkpointed modes, the job's result.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

COUNTRIES = ["US", "DE", "FR", "GB", "JP", "BR", "IN", "CA", "ES", "IT", "NL", "SE", "PL", "MX", "KR"]
SEGMENTS = ["new", "casual", "regular", "loyal", "vip"]
OUTPUT_COLUMNS = [
    "session_id",
    "user_id",
    "started_at",
    "day",
    "device",
    "country",
    "segment",
    "n_events",
    "n_clicks",
    "n_buys",
    "n_pages",
    "dwell_ms",
    "last_offset_s",
    "bounce",
    "ref_domain",
    "utm_source",
]


def users_dimension(spark: SparkSession, users: int) -> DataFrame:
    """A deterministic user dimension (country, segment, signup year), small enough to broadcast."""
    return spark.range(0, users, 1, 2).select(
        F.col("id").alias("user_id"),
        F.element_at(F.array(*[F.lit(c) for c in COUNTRIES]), (F.col("id") % len(COUNTRIES) + 1).cast("int")).alias(
            "country"
        ),
        F.element_at(F.array(*[F.lit(s) for s in SEGMENTS]), (F.col("id") * 7 % len(SEGMENTS) + 1).cast("int")).alias(
            "segment"
        ),
    )


def _field(event: Column, index: int) -> Column:
    return F.element_at(event, index + 1)


def transform(df: DataFrame, users: DataFrame) -> DataFrame:
    """Parse, aggregate per session, enrich. Keeps any hidden ``__ckpt_*`` column of ``df``."""
    hidden = [c for c in df.columns if c.startswith("__ckpt")]
    events = F.transform(F.split("events", ";"), lambda e: F.split(e, r"\|"))
    parsed = df.withColumn("ev", events)
    aggregated = parsed.select(
        "*",
        F.size("ev").alias("n_events"),
        F.size(F.filter("ev", lambda e: _field(e, 3) == "click")).alias("n_clicks"),
        F.size(F.filter("ev", lambda e: _field(e, 3) == "buy")).alias("n_buys"),
        F.size(F.array_distinct(F.transform("ev", lambda e: _field(e, 0)))).alias("n_pages"),
        F.aggregate("ev", F.lit(0).cast("long"), lambda acc, e: acc + _field(e, 1).cast("long")).alias("dwell_ms"),
        F.array_max(F.transform("ev", lambda e: _field(e, 2).cast("int"))).alias("last_offset_s"),
        F.regexp_extract("referrer", r"^https?://([^/]+)/", 1).alias("ref_domain"),
        F.regexp_extract("referrer", r"[?&]utm_source=([^&]+)", 1).alias("utm_source"),
        F.to_date("started_at").alias("day"),
    ).withColumn("bounce", F.col("n_events") <= 1)
    enriched = aggregated.join(F.broadcast(users), "user_id")
    return enriched.select(*OUTPUT_COLUMNS, *hidden)


def run(spark: SparkSession, spec: dict[str, Any]) -> dict[str, Any]:
    mode = spec["mode"]
    users = users_dimension(spark, int(spec.get("users", 50_000)))
    inputs = sorted(str(p) for p in Path(spec["input_dir"]).glob("*.parquet"))
    output = spec["output"]
    units = int(spec["units"])
    if mode == "plain":
        transform(spark.read.parquet(*inputs), users).write.mode("overwrite").parquet(output)
        return {}
    if mode == "streaming":
        schema = spark.read.parquet(inputs[0]).schema
        stream = (
            spark.readStream.schema(schema)
            .option("maxFilesPerTrigger", max(1, -(-len(inputs) // units)))
            .parquet(spec["input_dir"])
        )
        query = (
            transform(stream, users)
            .writeStream.format("parquet")
            .option("checkpointLocation", spec["checkpoint_location"])
            .trigger(availableNow=True)
            .start(output)
        )
        query.awaitTermination()
        return {"batches": int(query.lastProgress["batchId"]) + 1 if query.lastProgress else 0}

    from airflow_ckpt_provider.spark import CheckpointedJob

    job = CheckpointedJob.from_spark(spark)
    if mode == "files":
        df = job.read_parquet(inputs, min_partitions=units)
        job.write_parquet(transform(df, users), output)
    elif mode == "rows":
        # session_id is unique per input row (each generated file holds its own range of ids), as an event
        # or order id is: declared, there is no shuffle and each task of the source's scan is a checkpoint.
        df = job.skip_completed(spark.read.parquet(*inputs), key="session_id", unique=True, num_partitions=units)
        job.write_parquet(transform(df, users), output)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    return {"result": job.finish()}


def decompose(spark: SparkSession, spec: dict[str, Any]) -> dict[str, Any]:
    """Where a clean run's time goes, in this one session (no JVM start in the numbers).

    Each step is run once to warm up, then ``repeats`` times interleaved; wall and CPU
    seconds (whole process tree: JVM, driver, Python workers) per run:

    * ``df.write.parquet`` — the baseline;
    * ``write_parquet`` (file keys) — this package's clean run;
    * ``mapInArrow, rows discarded`` — the same rows shipped to Python workers as Arrow
      batches and dropped: the cost of leaving the JVM, without writing or checkpointing;
    * ``transform only (noop sink)`` — the job without any write.
    """
    import os
    import shutil

    import pyarrow as pa
    from resume_vs_alternatives import CpuSampler

    from airflow_ckpt_provider.spark import CheckpointedJob

    users = users_dimension(spark, int(spec.get("users", 50_000)))
    inputs = sorted(str(p) for p in Path(spec["input_dir"]).glob("*.parquet"))
    work = Path(spec["output"])

    def fresh(name: str) -> str:
        shutil.rmtree(work / name, ignore_errors=True)
        return str(work / name)

    def plain() -> None:
        transform(spark.read.parquet(*inputs), users).write.mode("overwrite").parquet(fresh("plain"))

    def checkpointed() -> None:
        job = CheckpointedJob(spark, fresh("store"), owner="decompose")
        job.write_parquet(transform(job.read_parquet(inputs), users), fresh("ckpt"))
        job.finish()

    def to_python() -> None:
        def drop(batches: Any) -> Any:
            rows = sum(b.num_rows for b in batches)
            yield pa.RecordBatch.from_pydict({"rows": [rows]})

        transform(spark.read.parquet(*inputs), users).mapInArrow(drop, "rows long").collect()

    def noop() -> None:
        transform(spark.read.parquet(*inputs), users).write.format("noop").mode("overwrite").save()

    steps = {
        "df.write.parquet": plain,
        "write_parquet (file keys)": checkpointed,
        "mapInArrow, rows discarded": to_python,
        "transform only (noop sink)": noop,
    }
    for step in steps.values():
        step()
    sampler = CpuSampler(os.getsid(0))
    runs: dict[str, list[list[float]]] = {name: [] for name in steps}
    for _ in range(int(spec.get("repeats", 2))):
        for name, step in steps.items():
            cpu_before, started = sampler.total(), time.perf_counter()
            step()
            runs[name].append([time.perf_counter() - started, sampler.total() - cpu_before])
    sampler.stop()
    return {"decomposition": runs}


def main() -> int:
    spec = json.loads(sys.argv[1])
    if spec["mode"] == "decompose":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        spark = SparkSession.builder.appName("bench-sessions-decompose").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        print("BENCH_JOB " + json.dumps(decompose(spark, spec)), flush=True)
        spark.stop()
        return 0
    spark = SparkSession.builder.appName(f"bench-sessions-{spec['mode']}").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    started = time.time()
    extra = run(spark, spec)
    finished = time.time()
    print("BENCH_JOB " + json.dumps({"session_ready": started, "job_seconds": finished - started, **extra}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
