"""Set a Spark session conf for the duration of one step, then put back what the caller had."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession


@contextmanager
def session_conf(spark: SparkSession, name: str, value: str) -> Iterator[None]:
    """``spark.conf.set(name, value)`` inside the block; afterwards the earlier value (or unset)."""
    previous = spark.conf.get(name, None)
    spark.conf.set(name, value)
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(name)
        else:
            spark.conf.set(name, previous)
