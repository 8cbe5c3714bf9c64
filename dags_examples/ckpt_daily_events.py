"""Example 1 — the embedded default: a local checkpoint store, Spark ``local[*]``.

A daily batch keyed by ``event_id``. No configuration is needed: the store lives at
``$AIRFLOW_HOME/checkpoints/ckpt_daily_events/process_events/date=<logical date>``. The retention
policy (``delete_after_success``) removes the checkpoints after the commit.

Play a failure and its fix from the UI alone:

* Trigger a run with ``{"fail_partition": 6}``: Spark partition 6 holds a record whose amount
  is ``"N/A"``; the job's own UDF raises on it and the job fails, keeping every partition that
  finished. The task log names the event and the fix: correct the record in the Airflow
  Variable ``ckpt_daily_events_corrections`` (Admin > Variables), a JSON object such as
  ``{"20240601000174999": "0.00"}`` (event id -> raw amount). The task's next try — its
  retry (``retries=2``, 30 s apart), or Clear once its retries are spent — reads the Variable
  again and skips every event the failed attempts checkpointed; the commit deletes what they
  left behind. A run's params cannot change on Clear, so the fix lives in the data's own
  correction list, not in the run's conf.
* Trigger a run with ``{"fail_partition": 6, "fail_in": "writer"}``: on its first try only,
  the writer of partition 6 dies halfway through its file (like a killed executor); the retry
  resumes by itself and the commit deletes the half-written file.

Environment:

* connection ``spark_default``, e.g. ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark",
  "host": "local[*]"}'`` (environment of the worker, or the metadata DB);
* ``spark-submit`` on the worker's ``PATH`` (pyspark's ``bin``) and Java 17; ``PYSPARK_PYTHON``
  (else ``python3`` on the ``PATH``) a Python with pyspark and this package;
* optional ``CKPT_EXAMPLE_LAKE`` (default ``$AIRFLOW_HOME/lake``; ``s3://bucket/prefix`` on S3, the
  job's executors writing with the store's credentials), set where the DAG is parsed and where the
  task runs;
* on more than one machine (the CeleryExecutor, KubernetesExecutor, a Spark cluster): ``[ckpt]
  base_uri = s3://bucket/prefix`` for every worker, the triggerer and the API server. The embedded
  default store is refused there before spark-submit, since a retry on another worker could not see
  it (docs/deployment.md).
* optional Airflow Variable ``ckpt_daily_events_corrections`` (see above; absent: no corrections).
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
LAKE_URI = LAKE if "://" in LAKE else f"file://{LAKE}"
CORRECTIONS_VARIABLE = "ckpt_daily_events_corrections"

with DAG(
    "ckpt_daily_events",
    description="Daily events with key-level checkpoints (local store, Spark local mode)",
    schedule="@daily",
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["checkpointed-spark", "example"],
    params={
        "fail_partition": Param(-1, type="integer", description="Spark partition with a bad record (-1: none)"),
        "fail_in": Param(
            "udf",
            enum=["udf", "writer"],
            description="udf: the UDF raises until the record is corrected; writer: the writer dies (first try only)",
        ),
        "events": Param(200_000, type="integer", minimum=1, description="events in the day"),
        "partitions": Param(8, type="integer", minimum=1, description="Spark partitions (checkpoints)"),
    },
    # A retry resumes where the last attempt stopped; 30 s leave time to correct a record first.
    default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=30)},
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
            # Rendered again at every try: a record corrected meanwhile is read by the next try.
            "--corrections",
            "{{ var.json.get('" + CORRECTIONS_VARIABLE + "', {}) | tojson }}",
            "--try-number",
            "{{ ti.try_number }}",
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
        outlets=[Asset(f"{LAKE_URI}/daily_events")],
    )
    process_events >> commit
