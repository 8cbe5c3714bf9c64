"""Test DAG: redo part of a ``@task.checkpointed_pyspark`` task's committed output from the DAG itself.

``choose`` >> (``reprocess`` | ``rewind``) >> ``job`` >> ``commit`` (``retain``: the store keeps its
committed checkpoints, so a re-run of the day is incremental). Neither the reprocess nor the rewind
names a store or output roots: both work on ``job``'s store through ``spark_task_id`` (the store of this
run's logical date, before ``job`` ran in this run) with the output roots ``job`` declares. Params:

* ``reprocess_keys``: a JSON list of keys; their checkpoints become pending and their output moves to
  the store's quarantine before ``job`` runs;
* ``rewind_to`` n >= 0: every checkpoint sealed after commit n becomes pending, its output quarantined.

With neither, ``choose`` skips both and ``job`` runs alone. Keys 0..39 in 4 partitions; each row's
``value`` is ``key * 10 + REDO_VERSION`` (the environment of the run: "the fixed code").
"""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import DAG, Param, task

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.operators.reprocess import ReprocessCheckpointsOperator, RewindCheckpointsOperator

OUTPUT = os.environ.get("REDO_OUTPUT", "/tmp/taskflow-redo-output")

with DAG(
    "ckpt_taskflow_redo",
    schedule=None,
    catchup=False,
    params={"reprocess_keys": Param("", type="string"), "rewind_to": Param(-1, type="integer")},
) as dag:

    @task.branch
    def choose(params: Any = None) -> list[str]:
        if params["reprocess_keys"]:
            return ["reprocess"]
        return ["rewind"] if int(params["rewind_to"]) >= 0 else []

    reprocess = ReprocessCheckpointsOperator(
        task_id="reprocess", spark_task_id="job", keys="{{ params.reprocess_keys }}"
    )
    rewind = RewindCheckpointsOperator(task_id="rewind", spark_task_id="job", to_commit="{{ params.rewind_to }}")

    @task.checkpointed_pyspark(conn_id="spark_serial", output_roots=[OUTPUT], retries=0, trigger_rule="none_failed")
    def job(spark: Any = None, ckpt_job: Any = None) -> dict[str, Any]:
        from pyspark.sql.types import LongType, StructField, StructType

        version = int(os.environ.get("REDO_VERSION", "1"))
        keys = spark.range(0, 40, numPartitions=4).withColumnRenamed("id", "key")
        todo = ckpt_job.skip_completed(keys, key="key", unique=True, num_partitions=4)

        def valued(batches: Any) -> Any:
            import pyarrow as pa

            for batch in batches:
                ids = batch.column("key").to_pylist()
                yield batch.append_column("value", pa.array([k * 10 + version for k in ids], pa.int64()))

        schema = StructType([*todo.schema.fields, StructField("value", LongType())])
        summary = ckpt_job.write_parquet(todo.mapInArrow(valued, schema), OUTPUT)
        return {"keys": summary.keys}

    commit = CheckpointCommitOperator(task_id="commit", spark_task_id="job", retention_policy="retain")
    choose() >> [reprocess, rewind] >> job() >> commit
