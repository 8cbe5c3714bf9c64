"""How the Spark side reaches a session: decided once per job by :func:`session_backend`.

Every touch of the JVM (Py4J) is in :mod:`.classic`; :mod:`.base` holds the protocols the
rest of ``spark/`` programs against.
"""

from __future__ import annotations

from typing import Any

from airflow_ckpt_provider.spark.backend.base import FileCounter, NativeJobHandle, Partitioning, PlanNode, SparkBackend

__all__ = ["FileCounter", "NativeJobHandle", "Partitioning", "PlanNode", "SparkBackend", "session_backend"]


def session_backend(spark: Any) -> SparkBackend:
    """The backend of ``spark``'s kind of session: Spark Connect when its class comes from
    ``pyspark.sql.connect`` (not an ``isinstance`` check: importing that module needs grpc), else classic."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        from airflow_ckpt_provider.spark.backend.connect import ConnectBackend

        return ConnectBackend(spark)
    from airflow_ckpt_provider.spark.backend.classic import ClassicBackend

    return ClassicBackend(spark)
