"""``CheckpointedJob`` on a Spark Connect session (a real Connect server: ``connect_server``)."""

from __future__ import annotations

from typing import Any


def test_the_connect_server_fixture_serves_a_remote_session(connect_spark: Any) -> None:
    assert type(connect_spark).__module__.startswith("pyspark.sql.connect")
    assert connect_spark.range(3).count() == 3
