"""The Spark side: what a user's PySpark application imports. Imports pyspark and the store, never Airflow.

``CheckpointedJob.from_spark(spark)`` reads the confs the Airflow operator sets
(``spark.ckpt.store.uri``, ``spark.ckpt.epoch``, ``spark.ckpt.store.options``,
``spark.ckpt.result.path``, ``spark.ckpt.result.line``; credentials from the environment variable
``CKPT_STORE_SECRETS``) and the optional ones a user may set
(``spark.ckpt.broadcast.threshold``, ``spark.ckpt.writer.engine``). The names are
defined once in ``airflow_ckpt_provider.contract``; :mod:`.job_settings` parses them.
"""

from airflow_ckpt_provider.contract import (
    CONF_BROADCAST_THRESHOLD,
    CONF_EPOCH,
    CONF_RESULT_LINE,
    CONF_RESULT_PATH,
    CONF_STORE_OPTIONS,
    CONF_STORE_URI,
    CONF_WRITER_ENGINE,
    ENV_SECRETS,
    RESULT_LINE_PREFIX,
    parse_result_line,
)
from airflow_ckpt_provider.spark.job import CheckpointedJob
from airflow_ckpt_provider.spark.keys import SOURCE_FILE_COLUMN, SOURCE_KEY_COLUMN
from airflow_ckpt_provider.spark.paths import file_key
from airflow_ckpt_provider.spark.summary import WriteSummary, WriteTaskReport
from airflow_ckpt_provider.spark.writers.arrow_parquet import ParquetSink
from airflow_ckpt_provider.spark.writers.arrow_task import WriterFn
from airflow_ckpt_provider.spark.writers.native import jar_path
from airflow_ckpt_provider.spark.writers.write_context import WriteContext

__all__ = [
    "CONF_BROADCAST_THRESHOLD",
    "CONF_EPOCH",
    "CONF_RESULT_LINE",
    "CONF_RESULT_PATH",
    "CONF_STORE_OPTIONS",
    "CONF_STORE_URI",
    "CONF_WRITER_ENGINE",
    "ENV_SECRETS",
    "RESULT_LINE_PREFIX",
    "SOURCE_FILE_COLUMN",
    "SOURCE_KEY_COLUMN",
    "CheckpointedJob",
    "ParquetSink",
    "WriteContext",
    "WriteSummary",
    "WriteTaskReport",
    "WriterFn",
    "file_key",
    "jar_path",
    "parse_result_line",
]
