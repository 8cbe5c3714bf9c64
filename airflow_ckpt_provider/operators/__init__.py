"""Airflow operators of the checkpointed-Spark provider (never imports pyspark)."""
