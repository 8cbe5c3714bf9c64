"""``CheckpointedJob``: resumable input and checkpointed output inside a PySpark application.

Typical use (submitted by ``CheckpointedSparkSubmitOperator``)::

    job = CheckpointedJob.from_spark(spark)
    df = job.read_parquet(input_files)                  # file keys: done files are never read
    job.write_parquet(transform(df), "s3://lake/out/")  # per task: write, stage, seal

or with row keys::

    df = job.skip_completed(spark.read.parquet(path), key="event_id")
    job.write_parquet(transform(df), out, key="event_id")

Without Airflow, ``CheckpointedJob(spark, store_uri=...)`` opens its own epoch;
then call ``job.finish()`` (or use it as a context manager) and ``job.store.commit()``.

**Keys per mapping.** Between the source and the writer the pipeline may map,
filter and aggregate *by key*, never mix keys: an output row must come from one
input key. A global aggregation, a window or a join across keys breaks resume (a
resumed run would miss the other keys' contributions). Group by the hidden column
too (``df.groupBy("event_id", SOURCE_KEY_COLUMN)``) so it reaches the writer; the
writer raises :class:`InvalidArgumentError` (``source_key_lost``) when it is gone.

The package: :mod:`.checkpointed_job` (the facade a user calls; it only delegates),
:mod:`.job_context` (what the concerns share, opened once), :mod:`.epoch` (the job's epoch),
:mod:`.result` (the job's result and the end of its epoch), :mod:`.source_keys` (which
kind of key, the hidden key column), :mod:`.row_skip` (``skip_completed``),
:mod:`.partitioning` (how rows reach the writer: all of a key in one task),
:mod:`.write_pipeline` (one checkpointed write, Spark's or the Arrow writer),
:mod:`.write_setup` (the output root declared, the file packing pinned),
:mod:`.failures` (Spark errors translated to typed ones).
"""

from airflow_ckpt_provider.spark.job.checkpointed_job import CheckpointedJob

__all__ = ["CheckpointedJob"]
