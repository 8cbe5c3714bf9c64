"""What every concern of a ``CheckpointedJob`` shares: the session, the store and epoch, the job's defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from airflow_ckpt_provider.spark.backend import SparkBackend, session_backend
from airflow_ckpt_provider.spark.job.epoch import JobEpoch, job_epoch
from airflow_ckpt_provider.spark.job.source_keys import SourceKeys
from airflow_ckpt_provider.spark.readers.file_inputs import FileInputs
from airflow_ckpt_provider.store import CheckpointStore, open_store
from airflow_ckpt_provider.store.rerun import OnRerun, RerunPlan


@dataclass
class JobContext:
    """One job's shared state. ``broadcast_threshold`` and ``num_partitions`` stay settable on the job."""

    spark: SparkSession
    #: How this job reaches its session (classic or Spark Connect), decided once.
    backend: SparkBackend
    store: CheckpointStore
    #: The epoch the job writes in (with ``skipped``: the live commit's, and nothing is written).
    epoch: int
    #: The store's options as opened (what executors reopen it with).
    options: dict[str, Any]
    files: FileInputs
    keys: SourceKeys
    broadcast_threshold: int
    #: The job's default task count where it partitions rows by key (None: ``spark.sql.shuffle.partitions``).
    num_partitions: int | None
    #: The store's rerun plan, when the job opened its own epoch (None: the operator's epoch).
    rerun: RerunPlan | None = None
    #: ``on_rerun="skip"`` over committed output: no epoch was opened; every key counts as done, nothing is written.
    skipped: bool = False

    @classmethod
    def open(
        cls,
        spark: SparkSession,
        store_uri: str,
        *,
        epoch: int | None,
        owner: str | None,
        broadcast_threshold: int,
        num_partitions: int | None,
        store_options: dict[str, Any],
        job: str | None = None,
        on_rerun: OnRerun | str = OnRerun.REPLACE,
    ) -> JobContext:
        """The session's backend checked, the store opened, the job's epoch opened or checked (:func:`job_epoch`)."""
        backend = session_backend(spark)
        # Over Spark Connect: the server's Python must run this package, checked before anything is written.
        backend.check_server()
        store = open_store(store_uri, **store_options)
        options = dict(store.options)
        opened: JobEpoch = job_epoch(store, backend, epoch, owner, job=job, on_rerun=on_rerun)
        return cls(
            spark=spark,
            backend=backend,
            store=store,
            epoch=opened.number,
            rerun=opened.rerun,
            skipped=opened.skipped,
            options=options,
            files=FileInputs(spark, backend, options),
            keys=SourceKeys(store),
            broadcast_threshold=broadcast_threshold,
            num_partitions=num_partitions,
        )

    def shuffle_partitions(self) -> int:
        return int(self.spark.conf.get("spark.sql.shuffle.partitions", "200") or 200)

    def partitions(self, requested: int | None) -> int:
        """``requested``, else the job's ``num_partitions``, else ``spark.sql.shuffle.partitions``."""
        return requested or self.num_partitions or self.shuffle_partitions()
