"""Test DAG: ``@task.checkpointed_pyspark`` and its commit. Keys 0..39 in 4 partitions.

The Spark connection is ``HANDOFF_SPARK_CONN`` (default ``spark_serial``: local[1] in the task's process,
partitions in order; a ``spark_connect`` one for a Connect server). Params:

* ``hold_partition`` p: the user's code holds in partition p (after the partitions before it sealed) and
  creates ``hold_marker``; it holds until the test kills the run or creates ``<hold_marker>.released``, then
  raises. Once released, no try holds again (a cleared run keeps its params);
* ``connect_retries`` n >= 0: over Spark Connect, the client retries an unreachable server n times with
  short backoffs (the user's own session setting; pyspark's default retries for about 10 minutes).

Two ``CheckpointSensor`` s watch the TaskFlow task's store through ``spark_task_id`` (as they watch a
submit task's): every partition sealed before the commit, committed after it."""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import DAG, Param, task

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.sensors.checkpoint import CheckpointSensor

OUTPUT = os.environ.get("HANDOFF_OUTPUT", "/tmp/taskflow-handoff-output")
SPARK_CONN = os.environ.get("HANDOFF_SPARK_CONN", "spark_serial")

with DAG(
    "ckpt_taskflow_handoff",
    schedule=None,
    catchup=False,
    params={
        "hold_partition": Param(-1, type="integer"),
        "hold_marker": Param("", type="string"),
        "connect_retries": Param(-1, type="integer"),
    },
) as dag:

    @task.checkpointed_pyspark(conn_id=SPARK_CONN, retries=0)
    def handoff(params: Any = None, spark: Any = None, ckpt_job: Any = None) -> dict[str, Any]:
        from pyspark.sql.types import LongType, StructField, StructType

        hold, marker = int(params["hold_partition"]), str(params["hold_marker"])
        retries = int(params["connect_retries"])
        if retries >= 0 and hasattr(spark, "client"):  # a Spark Connect session
            policies = spark.client.get_retry_policies()
            for policy in policies:
                policy.max_retries, policy.initial_backoff, policy.max_backoff = retries, 50, 200
            spark.client.set_retry_policies(policies)
        keys = spark.range(0, 40, numPartitions=4).withColumnRenamed("id", "key")
        todo = ckpt_job.skip_completed(keys, key="key", unique=True, num_partitions=4)

        def valued(batches: Any) -> Any:
            import os
            import time

            import pyarrow as pa

            for batch in batches:
                ids = batch.column("key").to_pylist()
                released = f"{marker}.released"
                if hold >= 0 and any(k // 10 == hold for k in ids) and not os.path.exists(released):
                    open(marker, "w").close()
                    while not os.path.exists(released):  # held until the test kills the run or releases it
                        time.sleep(0.5)
                    raise RuntimeError(f"partition {hold} was held and released: it fails")
                yield batch.append_column("value", pa.array([k * 10 for k in ids], pa.int64()))

        schema = StructType([*todo.schema.fields, StructField("value", LongType())])
        summary = ckpt_job.write_parquet(todo.mapInArrow(valued, schema), OUTPUT)
        return {"keys": summary.keys}

    sealed = CheckpointSensor(task_id="sealed", spark_task_id="handoff", wait_for="partitions", poke_interval=1)
    commit = CheckpointCommitOperator(task_id="commit", spark_task_id="handoff", output_roots=[OUTPUT])
    landed = CheckpointSensor(task_id="landed", spark_task_id="handoff", wait_for="committed", poke_interval=1)
    handoff() >> sealed >> commit >> landed
