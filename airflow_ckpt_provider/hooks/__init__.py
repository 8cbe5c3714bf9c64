"""Airflow hooks of the checkpointed-Spark provider (never imports pyspark)."""
