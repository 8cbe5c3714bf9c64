"""Example 1 — the embedded default: a local checkpoint store, Spark ``local[*]``.

A daily batch keyed by ``event_id``. No configuration is needed: the store lives at
``$AIRFLOW_HOME/checkpoints/ckpt_daily_events/process_events/<run_id>``. Trigger a run
with ``{"fail_partition": 6}`` to put a bad record in partition 6: the job's own UDF
raises on it and the job fails, keeping every partition that finished. Clear the failed
task (or let it retry) once the record is fixed (``fail_partition`` back to -1): the next
submit skips every event the first attempt checkpointed. ``{"fail_in": "writer"}`` makes
the writer of that partition die halfway through its file instead; the commit then
deletes the half-written file. The retention policy (``delete_after_success``) removes
the checkpoints after the commit.

Spark connection: ``spark_default`` (for example
``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[*]"}'``).
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG, Asset, Param

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator

HERE = os.path.dirname(os.path.abspath(__file__))
LAKE = os.environ.get("CKPT_EXAMPLE_LAKE") or os.path.join(
    os.path.expanduser(os.environ.get("AIRFLOW_HOME", "~/airflow")), "lake"
)
OUTPUT = os.path.join(LAKE, "daily_events", "day={{ ds }}")

with DAG(
    "ckpt_daily_events",
    description="Daily events with key-level checkpoints (local store, Spark local mode)",
    schedule="@daily",
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["checkpointed-spark", "example"],
    params={
        "fail_partition": Param(-1, type="integer", description="Spark partition with a bad record (-1: none)"),
        "fail_in": Param("udf", enum=["udf", "writer"], description="what the bad record breaks"),
        "events": Param(200_000, type="integer", minimum=1, description="events in the day"),
        "partitions": Param(8, type="integer", minimum=1, description="Spark partitions (checkpoints)"),
    },
    default_args={"retry_delay": dt.timedelta(seconds=5)},
) as dag:
    process_events = CheckpointedSparkSubmitOperator(
        task_id="process_events",
        output_roots=[OUTPUT],  # the only place clean-ups may delete output (docs/design.md, section 7)
        application=os.path.join(HERE, "jobs", "daily_events.py"),
        application_args=[
            "--day",
            "{{ ds }}",
            "--output",
            OUTPUT,
            "--events",
            "{{ params.events }}",
            "--partitions",
            "{{ params.partitions }}",
            "--fail-partition",
            "{{ params.fail_partition }}",
            "--fail-in",
            "{{ params.fail_in }}",
        ],
        conf={
            "spark.sql.shuffle.partitions": "{{ params.partitions }}",
            # Small Arrow batches: a task writes its file in several steps (so a crash leaves half a file).
            "spark.sql.execution.arrow.maxRecordsPerBatch": "2000",
            "spark.ui.enabled": "false",
        },
        driver_memory="1g",
        name="daily_events",
    )
    commit = CheckpointCommitOperator(
        task_id="commit",
        spark_task_id="process_events",
        output_roots=[OUTPUT],
        # Named by its URI: Airflow activates an asset only when neither its name nor its URI names
        # another active asset, so a fixed name would block this DAG pointed at another lake (until
        # a scheduler's orphanage pass) in a shared metadata DB.
        outlets=[Asset(f"file://{LAKE}/daily_events")],
    )
    process_events >> commit
