"""What every concern of a ``CheckpointedJob`` shares: the session, the store and epoch, the job's defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from airflow_ckpt_provider.spark.backend import SparkBackend
from airflow_ckpt_provider.spark.job.source_keys import SourceKeys
from airflow_ckpt_provider.spark.readers.file_inputs import FileInputs
from airflow_ckpt_provider.store import CheckpointStore


@dataclass
class JobContext:
    """One job's shared state. ``broadcast_threshold`` and ``num_partitions`` stay settable on the job."""

    spark: SparkSession
    #: How this job reaches its session (classic or Spark Connect), decided once.
    backend: SparkBackend
    store: CheckpointStore
    epoch: int
    #: The store's options as opened (what executors reopen it with).
    options: dict[str, Any]
    files: FileInputs
    keys: SourceKeys
    broadcast_threshold: int
    #: The job's default task count where it partitions rows by key (None: ``spark.sql.shuffle.partitions``).
    num_partitions: int | None

    def shuffle_partitions(self) -> int:
        return int(self.spark.conf.get("spark.sql.shuffle.partitions", "200") or 200)

    def partitions(self, requested: int | None) -> int:
        """``requested``, else the job's ``num_partitions``, else ``spark.sql.shuffle.partitions``."""
        return requested or self.num_partitions or self.shuffle_partitions()
