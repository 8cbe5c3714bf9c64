"""A row-keyed job whose *own* transformation fails: a Python UDF raising on a bad record.

Shared by the in-process tests and ``spark-submit`` (``main``). Input rows come from
``tests.spark.helpers.make_inputs`` (``event_id`` unique, ``account`` spread over
every file). The user's UDF normalizes ``account`` (trim + upper-case); it raises on
the row whose ``event_id`` is ``bad_event`` while the file ``fail_marker`` exists
(the record is "bad" on the first run, fixed before the rerun).

For the progress oracle the UDF logs every key it sees, per task attempt, under
``key_log`` (``t<task attempt id>.keys``, one JSON key a line): Spark's event log
says which task attempts finished, this log says which keys they held.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from airflow_ckpt_provider.spark import CheckpointedJob, WriteSummary

#: Key layouts the tests run: columns, and whether each key is in one row of the input.
KEYS: dict[str, tuple[list[str], bool]] = {
    "row": (["account"], False),
    "composite": (["account", "bucket"], False),
    "unique": (["event_id"], True),
    "unique-composite": (["event_id", "account"], True),
}


class BadRecordError(ValueError):
    """The user's code meeting a record it cannot handle."""


def source(spark: SparkSession, inputs: Sequence[str]) -> DataFrame:
    return spark.read.parquet(*inputs).withColumn("bucket", F.col("event_id") % 3)


def normalize_account(
    bad_event: int | None,
    fail_marker: str | None,
    key_log: str | None,
    columns: list[str],
    slow_seconds: float = 0.0,
) -> Any:
    """The user's UDF: ``account`` trimmed and upper-cased; raises on the bad record while the marker exists.

    ``slow_seconds``: each task attempt sleeps that long on its first row (a stage long enough to
    lose an executor in the middle of it).
    """
    files: dict[int, Any] = {}
    started: set[int] = set()

    def normalize(event_id: int, account: str, bucket: int) -> str:
        import time

        from pyspark import TaskContext

        task = TaskContext.get()
        attempt_id = task.taskAttemptId() if task else -1
        if slow_seconds and attempt_id not in started:
            started.add(attempt_id)
            time.sleep(slow_seconds)
        if key_log:
            log = files.get(attempt_id)
            if log is None:
                log = files[attempt_id] = open(Path(key_log) / f"t{attempt_id}.keys", "a", encoding="utf-8")  # noqa: SIM115
            values = {"event_id": event_id, "account": account, "bucket": bucket}
            key = [values[c] for c in columns]
            log.write(json.dumps(key if len(key) > 1 else key[0]) + "\n")
            log.flush()
        if bad_event is not None and event_id == bad_event and fail_marker and os.path.exists(fail_marker):
            raise BadRecordError(f"bad record: event {event_id} has an account the parser rejects")
        return account.strip().upper()

    return F.udf(normalize, StringType())


def run(
    spark: SparkSession,
    job: CheckpointedJob,
    *,
    inputs: Sequence[str],
    output: str,
    key: str,
    num_partitions: int = 4,
    bad_event: int | None = None,
    fail_marker: str | None = None,
    key_log: str | None = None,
    engine: str | None = None,
    slow_seconds: float = 0.0,
) -> WriteSummary:
    columns, unique = KEYS[key]
    df = job.skip_completed(source(spark, inputs), columns, unique=unique, num_partitions=num_partitions)
    udf = normalize_account(bad_event, fail_marker, key_log, columns, slow_seconds)
    transformed = df.withColumn("account", udf("event_id", "account", "bucket")).withColumn(
        "amount2", F.col("amount") * 2.0
    )
    return job.write_parquet(transformed.drop("bucket"), output, engine=engine)


def main() -> int:
    spec = json.loads(sys.argv[1])
    spark = SparkSession.builder.appName("ckpt-user-udf-job").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    job = CheckpointedJob.from_spark(spark)
    summary = run(
        spark,
        job,
        inputs=spec["inputs"],
        output=spec["output"],
        key=spec["key"],
        num_partitions=int(spec.get("num_partitions", 4)),
        bad_event=spec.get("bad_event"),
        fail_marker=spec.get("fail_marker"),
        key_log=spec.get("key_log"),
        engine=spec.get("engine"),
        slow_seconds=float(spec.get("slow_seconds", 0.0)),
    )
    job.finish()
    print(f"SUMMARY {json.dumps(summary.to_json())}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
