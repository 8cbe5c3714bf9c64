"""The test job's pipeline, shared by in-process tests and the spark-submit job script.

Input rows: ``event_id`` (unique), ``account`` (the row key, raw: ``" acct-007"``),
``amount``. The transform rewrites the key column (trim + upper-case) — the
checkpoint must still record the key as read — and adds ``amount2``. It runs in
the writer's stage (after ``skip_completed``'s exchange for row keys, right after
``read_parquet`` for file keys), so faults injected here hit write tasks.

Faults are deterministic rules (JSON), matched on the Spark partition, the task
attempt and the job's epoch::

    {"partition": 2, "attempt": 0, "action": "raise" | "sleep" | "exit", "seconds": 3, "at": "start" | "end"}

``at: "end"`` fires after the last batch went downstream, i.e. after the writer
created its file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, StructField, StructType

from airflow_ckpt_provider.spark import CheckpointedJob, WriteSummary

FAULTS_ENV = "CKPT_TEST_FAULTS"


class InjectedTaskFault(RuntimeError):
    """Raised by a fault rule (the test's stand-in for a bug or a lost dependency)."""


def _matching(rules: Sequence[Mapping[str, Any]], partition: int, attempt: int, epoch: int, at: str) -> list[Any]:
    out = []
    for rule in rules:
        if rule.get("partition") is not None and int(rule["partition"]) != partition:
            continue
        if rule.get("attempt") is not None and int(rule["attempt"]) != attempt:
            continue
        if rule.get("epoch") is not None and int(rule["epoch"]) != epoch:
            continue
        if rule.get("at", "start") != at:
            continue
        out.append(rule)
    return out


def _fire(rules: Sequence[Mapping[str, Any]], where: str) -> None:
    for rule in rules:
        action = rule["action"]
        if action == "sleep":
            time.sleep(float(rule.get("seconds", 1)))
        elif action == "raise":
            raise InjectedTaskFault(f"injected fault at {where}")
        elif action == "exit":
            os._exit(23)  # a crashed Python worker: no cleanup runs


def make_transform(
    faults: Sequence[Mapping[str, Any]], epoch: int
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    rules = [dict(r) for r in faults]

    def transform(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition, attempt = ctx.partitionId(), ctx.attemptNumber()
        where = f"epoch {epoch} partition {partition} attempt {attempt}"
        _fire(_matching(rules, partition, attempt, epoch, "start"), where)
        for batch in batches:
            account = pc.utf8_upper(pc.utf8_trim_whitespace(batch.column("account")))
            amount2 = pc.multiply(batch.column("amount"), 2.0)
            columns = [account if name == "account" else batch.column(name) for name in batch.schema.names]
            yield pa.RecordBatch.from_arrays([*columns, amount2], names=[*batch.schema.names, "amount2"])
        _fire(_matching(rules, partition, attempt, epoch, "end"), where)

    return transform


def faults_from_env() -> list[dict[str, Any]]:
    raw = os.environ.get(FAULTS_ENV, "")
    return list(json.loads(raw)) if raw else []


def run_pipeline(
    spark: SparkSession,
    job: CheckpointedJob,
    *,
    mode: str,
    inputs: Sequence[str],
    output: str,
    faults: Sequence[Mapping[str, Any]] = (),
    num_partitions: int = 4,
    partition_by: Sequence[str] | None = None,
    python_transform: bool = True,
    engine: str | None = None,
) -> WriteSummary:
    """Read (skipping done keys), transform, write checkpointed Parquet. ``mode``: ``files`` or ``rows``.

    ``python_transform=False``: the same transform in Spark expressions (no faults), so that
    the writer is the only Python code of its stage.
    """
    df: DataFrame
    if mode == "files":
        df = job.read_parquet(inputs, min_partitions=num_partitions)
    elif mode == "rows":
        source = spark.read.parquet(*inputs)
        df = job.skip_completed(source, "account", num_partitions=num_partitions)
    else:
        raise ValueError(mode)
    if python_transform:
        schema = StructType([*df.schema.fields, StructField("amount2", DoubleType())])
        transformed = df.mapInArrow(make_transform(faults, job.epoch), schema)
    else:
        transformed = df.withColumn("account", F.upper(F.trim("account"))).withColumn("amount2", F.col("amount") * 2.0)
    return job.write_parquet(
        transformed, output, partition_by=partition_by, num_partitions=num_partitions, engine=engine
    )
