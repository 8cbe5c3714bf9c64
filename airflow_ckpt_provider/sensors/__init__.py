"""Airflow sensors of the checkpointed-Spark provider (never imports pyspark)."""
