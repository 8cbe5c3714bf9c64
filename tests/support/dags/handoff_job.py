"""A PySpark job that uses the store API directly (no CheckpointedJob): it checks the
operator's handoff contract on its own. Keys 0..N-1 in P partitions; each Spark task
skips the keys already checkpointed, writes one Parquet file for the rest, and seals a
checkpoint. ``--fail-partition p`` makes partition p fail after writing its file (an orphan),
the partitions before it sealed and none after it written (on local[1]). ``--hold-partition p``
makes partition p write its file, create ``--hold-marker`` and wait there until the test kills
the run (a killed run: its epoch stays open).

It reports its result as a driver whose files the Airflow worker cannot see would (a spark-submit
in a container): only through the ``CKPT_RESULT`` line on its stdout, printed because the operator's
confs ask for it (``spark.ckpt.result.line``), never a result file. So the operator tests that read
this job's result (tests/operators/test_spark_submit.py) show the line reaches the operator through
spark-submit's log; the example DAGs' tests show the file does (``CheckpointedJob``)."""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from airflow_ckpt_provider.contract import CONF_RESULT_LINE, format_result_line
from airflow_ckpt_provider.store import FileMetadata, new_checkpoint_id, open_store


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=40)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--output", required=True)
    parser.add_argument("--fail-partition", type=int, default=-1)
    parser.add_argument("--fail-once-marker", default="", help="fail only if this file does not exist yet")
    parser.add_argument("--hold-partition", type=int, default=-1)
    parser.add_argument("--hold-marker", default="", help="created when the held partition has written its file")
    args = parser.parse_args()

    spark = SparkSession.builder.getOrCreate()
    conf = spark.sparkContext.getConf()
    uri = conf.get("spark.ckpt.store.uri")
    epoch = int(conf.get("spark.ckpt.epoch"))
    options = json.loads(conf.get("spark.ckpt.store.options", "{}"))
    options.update(json.loads(os.environ.get("CKPT_STORE_SECRETS", "{}")))
    print_result = conf.get(CONF_RESULT_LINE, "false") == "true"

    store = open_store(uri, **options)
    store.epochs.set_expected_partitions(epoch, args.partitions)
    done = set(store.get_checkpointed_keys().column("key").to_pylist())
    done_b = spark.sparkContext.broadcast(done)
    output = "file://" + os.path.abspath(args.output.removeprefix("file://")).rstrip("/")
    fail_partition = args.fail_partition
    hold_partition, hold_marker = args.hold_partition, args.hold_marker
    if args.fail_once_marker:
        if os.path.exists(args.fail_once_marker):
            fail_partition = -1
        else:
            open(args.fail_once_marker, "w").close()

    def run_partition(index: int, rows: object) -> list[tuple[int, int, int]]:
        if 0 <= fail_partition < index:
            # Spark's local scheduler offers the freed core to the next task before it has handled the
            # failure (the failed status is handled on another thread), so on local[1] partition p+1 can
            # still start, and with a warm Python worker it seals before the abort kills it. A real job's
            # later partitions may run or not; this job makes "p failed, the ones after never ran" exact.
            raise RuntimeError(f"partition {index} runs after partition {fail_partition} failed")
        keys = [k for k in rows if k not in done_b.value]  # type: ignore[attr-defined]
        if not keys:
            return [(index, 0, 0)]
        task_store = open_store(uri, **options)
        cid = new_checkpoint_id()
        path = f"{output}/part-{index:05d}-{uuid.uuid4().hex}.parquet"
        task_store.record_intent(cid, [path])
        local = path.removeprefix("file://")
        pq.write_table(pa.table({"key": keys, "value": [k * 10 for k in keys]}), local)
        if index == fail_partition:  # after the write, before the seal: leaves an orphan
            raise RuntimeError(f"partition {index} fails on purpose")
        if index == hold_partition:  # after the write, before the seal: held until killed
            if hold_marker:
                open(hold_marker, "w").close()
            while True:
                time.sleep(1)
        task_store.stage_keys(cid, keys)
        task_store.stage_files(cid, [FileMetadata(path, os.path.getsize(local), len(keys))])
        task_store.checkpoint(cid, epoch=epoch, partition=index)
        return [(index, len(keys), 1)]

    os.makedirs(output.removeprefix("file://"), exist_ok=True)
    counts = (
        spark.sparkContext.parallelize(range(args.keys), args.partitions)
        .mapPartitionsWithIndex(run_partition)
        .collect()
    )
    # The same names CheckpointedJob.result() uses.
    result = {
        "keys": sum(c[1] for c in counts),
        "rows": sum(c[1] for c in counts),
        "sealed_partitions": sum(c[2] for c in counts),
        "degraded": store.degraded,
        "input": {"keys_skipped": len(done)},
        # What the operator put into the driver's SparkConf for OpenLineage (the Spark provider's
        # parent-job and transport injection), so the tests can see it arrived.
        "openlineage": {k: v for k, v in conf.getAll() if k.startswith("spark.openlineage.")},
    }
    if print_result:
        print(format_result_line(result), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
