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

If the driver dies (killed, out of memory, a port it cannot bind), the sensor fails within one
poll with the driver's state and the store's progress: it asks the master for the driver's
status as the Spark provider does. Clear the submit task then: it resumes from the sealed
partitions. ``no_progress_timeout`` covers what the master cannot tell.

Environment:

* connection ``spark_cluster``, e.g. ``AIRFLOW_CONN_SPARK_CLUSTER='{"conn_type": "spark",
  "host": "spark://master-host", "port": 7077, "extra": {"deploy-mode": "cluster",
  "rest-port": 6066}}'``, in the environment of the worker and of the triggerer (which asks
  the master for the driver's state), or in the metadata DB;
* the master started with ``spark.master.rest.enabled=true`` (``SPARK_MASTER_OPTS``): the
  sensor reads the driver's state there, and a retry re-attaches to a running driver;
* ``PYSPARK_PYTHON``: the Python the driver and executors run, with pyspark and this package
  installed, at that path on every Spark worker host. Read where the task runs (the worker
  parses this file again), so set it in the Airflow worker's environment (with the
  LocalExecutor: the scheduler's); unset, the Airflow worker's own Python is used;
* ``spark-submit`` on the worker's ``PATH`` (pyspark's ``bin``), and ``SPARK_HOME`` if it is
  not pyspark's;
* ``[ckpt] base_uri``: where the stores are, seen by the driver and executors on the cluster, the
  Airflow worker, the triggerer and the API server: ``s3://bucket/prefix`` on a real cluster, or a
  shared file system (``file:///mnt/shared/checkpoints``, the same path on every host). Without it the
  submit is refused before spark-submit: a store on the worker's own disk is not seen by a driver in
  cluster mode (docs/deployment.md);
* drivers and executors must see this file's ``jobs/`` directory and the output directory (here
  local paths: one machine; ``s3://`` on a real cluster);
* optional ``CKPT_EXAMPLE_LAKE`` (default ``$AIRFLOW_HOME/lake``).
"""

from __future__ import annotations

import datetime as dt
import glob
import importlib.util
import os
import sys

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
            "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON") or sys.executable,
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
        no_progress_timeout=dt.timedelta(minutes=30),  # no partition sealed for that long: give up
    )
    commit = CheckpointCommitOperator(task_id="commit", spark_task_id="submit_to_cluster", output_roots=[OUTPUT])
    submit >> wait >> commit
