"""Test DAG: ``@task.checkpointed_pyspark`` in local mode (a classic session in the task's process,
``spark_serial``: local[1], partitions in order) and its commit. Keys 0..39 in 4 partitions. Param
``hold_partition`` p: the user's code holds in partition p (after the partitions before it sealed)
and creates ``hold_marker``, until the test kills the run."""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import DAG, Param, task

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator

OUTPUT = os.environ.get("HANDOFF_OUTPUT", "/tmp/taskflow-handoff-output")

with DAG(
    "ckpt_taskflow_handoff",
    schedule=None,
    catchup=False,
    params={"hold_partition": Param(-1, type="integer"), "hold_marker": Param("", type="string")},
) as dag:

    @task.checkpointed_pyspark(conn_id="spark_serial", retries=0)
    def handoff(params: Any = None, spark: Any = None, ckpt_job: Any = None) -> dict[str, Any]:
        from pyspark.sql.types import LongType, StructField, StructType

        hold, marker = int(params["hold_partition"]), str(params["hold_marker"])
        keys = spark.range(0, 40, numPartitions=4).withColumnRenamed("id", "key")
        todo = ckpt_job.skip_completed(keys, key="key", unique=True, num_partitions=4)

        def valued(batches: Any) -> Any:
            import time

            import pyarrow as pa

            for batch in batches:
                ids = batch.column("key").to_pylist()
                if hold >= 0 and any(k // 10 == hold for k in ids):
                    open(marker, "w").close()
                    while True:  # held until the test kills the run
                        time.sleep(1)
                yield batch.append_column("value", pa.array([k * 10 for k in ids], pa.int64()))

        schema = StructType([*todo.schema.fields, StructField("value", LongType())])
        summary = ckpt_job.write_parquet(todo.mapInArrow(valued, schema), OUTPUT)
        return {"keys": summary.keys}

    commit = CheckpointCommitOperator(task_id="commit", spark_task_id="handoff", output_roots=[OUTPUT])
    handoff() >> commit
