"""Example 2 — incremental file ingestion on an S3 store with the ``retain`` policy.

Like job bookmarks: each run ingests only the Parquet files that landed under
``s3://<bucket>/landing/events/`` since the last successful run. The store
(``s3://<bucket>/checkpoints/ckpt_incremental_ingest``) is the same for every run, and
the commit keeps the committed file keys, compacted into one snapshot, so the next run
reads one object to know what it can skip. A run that fails half-way resumes from the
files it did ingest.

Environment:

* an ``aws`` connection ``ckpt_s3`` (keys; for S3-compatible servers the extra
  ``{"endpoint_url": "http://host:port"}``), in the worker's environment or the metadata DB;
* ``CKPT_EXAMPLE_BUCKET`` (default ``ckpt-examples``): an existing bucket, set where the DAG
  is parsed and where the task runs (the dag-processor's and the worker's environment);
* connection ``spark_default`` (e.g. ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark",
  "host": "local[*]"}'``), ``spark-submit`` on the worker's ``PATH`` and ``PYSPARK_PYTHON``
  (or ``python3`` on the ``PATH``) a Python with pyspark and this package.

Spark reads and writes S3 through pyarrow in its Python workers (no Hadoop S3A jars needed).
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG, Asset

from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator

HERE = os.path.dirname(os.path.abspath(__file__))
BUCKET = os.environ.get("CKPT_EXAMPLE_BUCKET", "ckpt-examples")
LANDING = f"s3://{BUCKET}/landing/events/"
LAKE = f"s3://{BUCKET}/lake/events/"
STORE = f"s3://{BUCKET}/checkpoints/ckpt_incremental_ingest"
AWS_CONN_ID = "ckpt_s3"

with DAG(
    "ckpt_incremental_ingest",
    description="Ingest only the files that landed since the last run (S3 store, retain policy)",
    schedule="@hourly",
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,  # one store, one writer at a time (a second submit would fail fast anyway)
    tags=["checkpointed-spark", "example"],
    default_args={"retries": 1, "retry_delay": dt.timedelta(seconds=30)},
) as dag:
    ingest = CheckpointedSparkSubmitOperator(
        task_id="ingest",
        output_roots=[LAKE],  # the only place clean-ups may delete output (docs/design.md, section 7)
        application=os.path.join(HERE, "jobs", "incremental_ingest.py"),
        application_args=["--landing", LANDING, "--output", LAKE],
        checkpoint_uri=STORE,
        aws_conn_id=AWS_CONN_ID,
        conf={"spark.ui.enabled": "false"},
        driver_memory="1g",
        name="incremental_ingest",
    )
    commit = CheckpointCommitOperator(
        task_id="commit",
        spark_task_id="ingest",
        aws_conn_id=AWS_CONN_ID,
        output_roots=[LAKE],
        retention_policy="retain",
        # The asset is named by its URI: Airflow activates an asset only when neither its name
        # nor its URI names another active asset, so a fixed name would block the same DAG
        # pointed at another bucket (until a scheduler's orphanage pass) in a shared metadata DB.
        outlets=[Asset(LAKE)],
    )
    ingest >> commit
