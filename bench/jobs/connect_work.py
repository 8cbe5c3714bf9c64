"""The job of ``bench/connect_resume.py``, shared by its ``spark-submit`` application
(``connect_job.py``) and its TaskFlow task (``connect_dag.py``), so both operators run the same work.

One day of orders: ``files`` Parquet files of ``rows`` orders each (``order_id`` unique). The user's
code prices every order in Python (``mapInArrow``), spending ``spin`` loop iterations per order, so
the run is dominated by the user's work as real jobs are. While the day's ``bad`` marker file exists,
the first order the write task it names meets is malformed and the user's code raises on it: with the
tasks running in order two at a time, the benchmark names the task after the middle one, so the run fails
at half way (a task, not a file: which files a task reads is Spark's choice); the marker removed, the next
run resumes.
"""

from __future__ import annotations

import os
from typing import Any

FILES, ROWS, SPIN = 16, 40_000, 3_000


def input_dir(lake: str, ds: str) -> str:
    return os.path.join(lake, "raw", f"day={ds}")


def output_dir(lake: str, operator: str, ds: str) -> str:
    return os.path.join(lake, "out", operator, f"day={ds}")


def bad_marker(lake: str, ds: str) -> str:
    return os.path.join(lake, f"bad-{ds}")


def land(lake: str, ds: str, files: int, rows: int) -> None:
    """The day's input (once)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = input_dir(lake, ds)
    os.makedirs(folder, exist_ok=True)
    for i in range(files):
        path = os.path.join(folder, f"part-{i:03d}.parquet")
        if not os.path.exists(path):
            ids = list(range(i * rows, (i + 1) * rows))
            pq.write_table(pa.table({"order_id": ids, "amount": [n % 97 * 1.5 for n in ids]}), path)


def run(spark: Any, job: Any, lake: str, operator: str, ds: str, spin: int = SPIN) -> dict[str, Any]:
    """Skip the done orders, price the rest, write them through ``job``; what was written. ``job`` None:
    the baseline, without checkpoints (the Spark provider's own ``@task.pyspark``): price every order and
    ``df.write.parquet`` them."""
    from pyspark.sql.types import DoubleType, StructField, StructType

    folder = input_dir(lake, ds)
    files = len([name for name in os.listdir(folder) if name.endswith(".parquet")])
    rows = spark.read.parquet(folder)
    marker = bad_marker(lake, ds)
    bad_task = None
    if os.path.exists(marker):
        with open(marker, encoding="utf-8") as handle:
            bad_task = int(handle.read())

    def priced(batches: Any) -> Any:
        import os as _os

        import pyarrow as _pa
        from pyspark import TaskContext

        task = TaskContext.get()
        failing = bad_task is not None and task is not None and task.partitionId() == bad_task
        for batch in batches:
            ids = batch.column("order_id").to_pylist()
            if failing and ids and _os.path.exists(marker):
                raise ValueError(f"order {ids[0]} is malformed")
            totals = []
            for n, amount in zip(ids, batch.column("amount").to_pylist(), strict=True):
                x = n
                for _ in range(spin):  # the user's per-order work
                    x = (x * 31 + 7) % 1_000_003
                totals.append(amount * 1.2 + x % 2)
            yield batch.append_column("total", _pa.array(totals, _pa.float64()))

    if job is None:
        schema = StructType([*rows.schema.fields, StructField("total", DoubleType())])
        rows.mapInArrow(priced, schema).write.mode("overwrite").parquet(output_dir(lake, operator, ds))
        return {}
    todo = job.skip_completed(rows, key="order_id", unique=True, num_partitions=files)
    schema = StructType([*todo.schema.fields, StructField("total", DoubleType())])
    summary = job.write_parquet(todo.mapInArrow(priced, schema), output_dir(lake, operator, ds))
    return {"rows": summary.rows, "keys": summary.keys}
