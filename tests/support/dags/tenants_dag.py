"""Test DAG: dynamic task mapping and a mapped task group, one checkpointed submit per tenant.

Tenants' ``order_no`` keys overlap; each mapped instance must keep its own store.
``TENANTS_OUTPUT`` is the base directory (one sub-directory per tenant for the mapped task,
``group/<tenant>`` for the mapped task group), ``TENANTS_MAPPED`` the mapped task's tenants
(``name:rows,...``; default ``a:300,b:400``; the group always has a and b),
``TENANTS_GROUP_ON_RERUN`` the group's submit ``on_rerun`` (default ``replace``), ``TENANTS_STORE`` an explicit
``checkpoint_uri`` for every instance of ``tenants`` (default: none, each instance gets its
default location), ``TENANTS_EVENT_LOG`` a directory for Spark's event log (the fault campaign's
mapped trials, ``ckpt_testkit/faults/mapped_trials.py``).

* ``tenants`` (mapped) -> ``commit`` (mapped) -> ``clear_all`` (not mapped: clears every
  instance's store);
* ``tenant`` (a mapped task group: submit -> sensor -> commit, so a tenant that succeeds
  commits while another fails) -> ``commit_all`` (not mapped: commits every instance's store).

Both halves share the DAG so that one DAG run exercises both (each spark-submit costs a JVM).
"""

from __future__ import annotations

import os

from airflow.sdk import DAG, task_group

from airflow_ckpt_provider.operators.clear import ClearCheckpointsOperator
from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator
from airflow_ckpt_provider.sensors.checkpoint import CheckpointSensor

HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.environ.get("TENANTS_OUTPUT", "/tmp/tenants-output")
GROUP_TENANTS = {"a": 300, "b": 400}
TENANTS = {
    name: int(rows)
    for name, _, rows in (item.partition(":") for item in os.environ.get("TENANTS_MAPPED", "a:300,b:400").split(","))
}
ROW_DELAY_MS = os.environ.get("TENANTS_ROW_DELAY_MS", "0")
CONF = {"spark.ui.enabled": "false", "spark.driver.memory": "512m"}
if os.environ.get("TENANTS_EVENT_LOG"):  # Spark's event log, for the fault campaign's progress oracle
    os.makedirs(os.environ["TENANTS_EVENT_LOG"], exist_ok=True)
    CONF.update(
        {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": "file://" + os.environ["TENANTS_EVENT_LOG"],
            "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false",
        }
    )

with DAG("ckpt_tenants", schedule=None, catchup=False) as dag:
    tenants = CheckpointedSparkSubmitOperator.partial(
        task_id="tenants",
        application=os.path.join(HERE, "tenant_job.py"),
        conn_id="spark_serial",  # local[1]: partitions run in order, so the failure is deterministic
        conf=CONF,
        checkpoint_uri=os.environ.get("TENANTS_STORE") or None,
    ).expand(
        application_args=[
            ["--tenant", name, "--rows", str(rows), "--output", f"{OUTPUT}/{name}", "--row-delay-ms", ROW_DELAY_MS]
            for name, rows in TENANTS.items()
        ]
    )
    commit = CheckpointCommitOperator.partial(
        task_id="commit",
        spark_task_id="tenants",
        checkpoint_uri=os.environ.get("TENANTS_STORE") or None,
    ).expand(output_roots=[[f"{OUTPUT}/{name}"] for name in TENANTS])
    # Not mapped: works on the store of every mapped instance of "tenants".
    clear_all = ClearCheckpointsOperator(task_id="clear_all", spark_task_id="tenants")
    tenants >> commit >> clear_all

    @task_group
    def tenant(args: list[str], roots: list[str]) -> None:
        submit = CheckpointedSparkSubmitOperator(
            task_id="submit",
            application=os.path.join(HERE, "tenant_job.py"),
            application_args=args,
            conn_id="spark_serial",
            conf=CONF,
            on_rerun=os.environ.get("TENANTS_GROUP_ON_RERUN", "replace"),
        )
        sensor = CheckpointSensor(
            task_id="sensor", spark_task_id="tenant.submit", deferrable=False, poke_interval=1, timeout=60
        )
        group_commit = CheckpointCommitOperator(task_id="commit", spark_task_id="tenant.submit", output_roots=roots)
        submit >> sensor >> group_commit

    # expand_kwargs: one group instance per tenant (expand over two lists would map their product).
    groups = tenant.expand_kwargs(
        [
            {
                "args": ["--tenant", name, "--rows", str(rows), "--output", f"{OUTPUT}/group/{name}"],
                "roots": [f"{OUTPUT}/group/{name}"],
            }
            for name, rows in GROUP_TENANTS.items()
        ]
    )
    # Not mapped: commits the store of every mapped instance of "tenant.submit" (each already
    # committed by its group's commit, so each says so).
    commit_all = CheckpointCommitOperator(task_id="commit_all", spark_task_id="tenant.submit")
    groups >> commit_all
