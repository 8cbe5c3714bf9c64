"""Example 3 — a job submitted in cluster mode, watched by a deferrable sensor.

The submit task hands the job to a Spark standalone master in ``cluster`` deploy mode
and returns as soon as the driver is accepted (``wait_for_completion=False``): the
driver runs on a worker, not on the Airflow worker. ``CheckpointSensor`` then waits in
the triggerer — no worker slot held — until every partition the job expects has
sealed a checkpoint, logging the progress (sealed/expected, keys done). The commit
makes the output authoritative and closes the epoch.

Spark refuses ``.py`` applications in standalone cluster mode; the usual way round is
to submit Spark's own ``PythonRunner`` as the main class with the script as its first
argument (the second is the ``--py-files`` list, empty here). With YARN or Kubernetes,
submit the ``.py`` file directly instead.

Connection ``spark_cluster``, e.g. ``AIRFLOW_CONN_SPARK_CLUSTER='{"conn_type": "spark",
"host": "spark://master-host", "port": 7077, "extra": {"deploy-mode": "cluster",
"rest-port": 6066}}'``; the master needs ``spark.master.rest.enabled=true`` so that a
retry can re-attach to a running driver. Drivers and executors must see the output
directory and the store (here local paths: one machine; use ``s3://`` on a real cluster).
"""

from __future__ import annotations

import datetime as dt
import glob
import importlib.util
import os

from airflow.sdk import DAG, Param

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator
from airflow_ckpt_provider.sensors.checkpoint import CheckpointSensor

HERE = os.path.dirname(os.path.abspath(__file__))
LAKE = os.environ.get("CKPT_EXAMPLE_LAKE") or os.path.join(
    os.path.expanduser(os.environ.get("AIRFLOW_HOME", "~/airflow")), "lake"
)
OUTPUT = os.path.join(LAKE, "cluster_events", "day={{ ds }}")


def spark_core_jar() -> str:
    """Spark's core jar from the installed pyspark (found without importing pyspark)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return "spark-core.jar"  # parse-time placeholder where pyspark is not installed
    jars = glob.glob(os.path.join(next(iter(spec.submodule_search_locations)), "jars", "spark-core_*.jar"))
    return jars[0] if jars else "spark-core.jar"


with DAG(
    "ckpt_cluster_sensor",
    description="Cluster-mode submit, deferrable sensor on the checkpoints, commit",
    schedule="@daily",
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["checkpointed-spark", "example"],
    params={
        "events": Param(100_000, type="integer", minimum=1),
        "partitions": Param(4, type="integer", minimum=1),
    },
    default_args={"retries": 1, "retry_delay": dt.timedelta(seconds=5)},
) as dag:
    submit = CheckpointedSparkSubmitOperator(
        task_id="submit_to_cluster",
        output_roots=[OUTPUT],  # the only place clean-ups may delete output (docs/design.md, section 7)
        conn_id="spark_cluster",
        deploy_mode="cluster",
        application=spark_core_jar(),
        java_class="org.apache.spark.deploy.PythonRunner",
        application_args=[
            os.path.join(HERE, "jobs", "daily_events.py"),
            "",  # PythonRunner's --py-files list
            "--day",
            "{{ ds }}",
            "--output",
            OUTPUT,
            "--events",
            "{{ params.events }}",
            "--partitions",
            "{{ params.partitions }}",
        ],
        conf={
            "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON", "python3"),
            "spark.driver.memory": "512m",
            "spark.executor.memory": "512m",
            "spark.ui.enabled": "false",
        },
        name="cluster_events",
        wait_for_completion=False,
    )
    wait = CheckpointSensor(
        task_id="wait_for_partitions",
        spark_task_id="submit_to_cluster",
        wait_for="partitions",
        deferrable=True,
        poke_interval=5,
        timeout=dt.timedelta(hours=2),
    )
    commit = CheckpointCommitOperator(task_id="commit", spark_task_id="submit_to_cluster", output_roots=[OUTPUT])
    submit >> wait >> commit
