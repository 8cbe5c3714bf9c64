"""Airflow operators of the checkpointed-Spark provider (never imports pyspark)."""

from airflow_ckpt_provider.moved_modules import register_moved_modules

register_moved_modules(
    __name__,
    {
        "spark": "airflow_ckpt_provider.operators.spark_submit",
        "handoff": "airflow_ckpt_provider.contract",
        "target": "airflow_ckpt_provider.hooks.store_location",
    },
)
