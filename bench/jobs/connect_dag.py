"""DAGs of ``bench/connect_resume.py``: the same job through the submit operator (a new Spark
application per try) and through ``@task.checkpointed_pyspark`` on a warm Spark Connect server; the
baseline: the Spark provider's own ``@task.pyspark`` on the same server, without checkpoints."""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import DAG, task

from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator

LAKE = os.environ.get("CKPT_BENCH_LAKE", "/tmp/ckpt-bench-lake")
SPIN = os.environ.get("CKPT_BENCH_SPIN", "3000")
HERE = os.path.dirname(os.path.abspath(__file__))

with DAG("bench_connect_submit", schedule=None, catchup=False):
    CheckpointedSparkSubmitOperator(
        task_id="job",
        application=os.path.join(HERE, "connect_job.py"),
        application_args=["--lake", LAKE, "--ds", "{{ ds }}", "--spin", SPIN],
        conn_id="spark_default",
        conf={"spark.ui.enabled": "false"},
        name="bench-connect-submit",
        retries=0,
    )

with DAG("bench_connect_taskflow", schedule=None, catchup=False):

    @task.checkpointed_pyspark(conn_id="spark_bench_connect", retries=0)
    def job(ds: str | None = None, spark: Any = None, ckpt_job: Any = None) -> dict[str, Any]:
        from bench.jobs.connect_work import run

        assert ds is not None
        return run(spark, ckpt_job, LAKE, "taskflow", ds, int(SPIN))

    job()

with DAG("bench_connect_plain", schedule=None, catchup=False):

    @task.pyspark(conn_id="spark_bench_connect", retries=0)
    def job(ds: str | None = None, spark: Any = None) -> dict[str, Any]:  # type: ignore[no-redef]
        from bench.jobs.connect_work import run

        assert ds is not None
        return run(spark, None, LAKE, "plain", ds, int(SPIN))

    job()
