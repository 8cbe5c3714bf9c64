"""``spark/writers/arrow_parquet.py``: Hive-style partition directory names (no Spark needed)."""

from __future__ import annotations

from airflow_ckpt_provider.spark.writers.arrow_parquet import hive_value


def test_hive_directory_values_are_escaped_like_spark() -> None:
    assert hive_value("2026-01-01") == "2026-01-01"
    assert hive_value("a/b=c") == "a%2Fb%3Dc"
    assert hive_value(None) == "__HIVE_DEFAULT_PARTITION__"
    assert hive_value(True) == "true"
