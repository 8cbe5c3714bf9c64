"""Airflow triggers of the checkpointed-Spark provider (never imports pyspark)."""
