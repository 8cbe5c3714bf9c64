"""A real Spark Connect server for tests, started inside an existing classic session's JVM.

``SparkConnectService.start`` (PySpark's own ``spark-connect`` jar) serves Spark Connect from
the driver of a classic local session: no second JVM (about 0.2 s instead of a new
application's 10-30 s), and the server's Python workers are this venv's. The service binds
port 0 on 127.0.0.1 and reports the port it got.

A client in the *same* process as a classic session must set ``SPARK_CONNECT_MODE_ENABLED``
while it builds Connect frames: ``pyspark.sql.functions`` picks the classic or the Connect
implementation by that variable (``pyspark.sql.utils.is_remote``), as a real Connect client
process (``SparkSession.builder.remote(...)``, ``pyspark-client``) always has it. See
``connect_client`` below and the ``connect_spark`` fixture in tests/conftest.py.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Server confs for tests: a killed client's operation ends 10 s after it detached (default: 5 min).
TEST_SERVER_CONFS = {
    "spark.connect.grpc.binding.address": "127.0.0.1",
    "spark.connect.grpc.binding.port": "0",
    "spark.connect.execute.manager.detachedTimeout": "10s",
}


def start_in_session(classic_spark: Any) -> str:
    """Start the Connect service in ``classic_spark``'s driver (idempotent); its ``sc://127.0.0.1:port`` URL."""
    jsc = classic_spark.sparkContext._jsc.sc()
    conf = jsc.conf()
    for name, value in TEST_SERVER_CONFS.items():
        conf.set(name, value)
    service = getattr(classic_spark._jvm.org.apache.spark.sql.connect.service, "SparkConnectService$")
    module = service.__getattr__("MODULE$")
    port = int(module.localPort()) if _started(module) else 0
    if not port:
        module.start(jsc)
        port = int(module.localPort())
    return f"sc://127.0.0.1:{port}"


def _started(module: Any) -> bool:
    try:
        return int(module.localPort()) > 0
    except Exception:
        return False


@contextmanager
def connect_client(url: str, *, retries: int = 2) -> Iterator[Any]:
    """A new Connect session on ``url`` (its own server-side session), in Connect mode while open.

    ``retries``: the client's retry policies are cut to this many tries with short backoffs
    (the default retries an unreachable server for about 10 minutes).
    """
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    # pyspark 4.1.3's Connect client can deadlock when the cyclic garbage collector finalizes an earlier
    # session (SparkSession.__del__ -> client.close() -> a class-wide RLock) inside a thread that another
    # thread is starting while it holds that lock (reattach.py's release pool): seen once in the suite, a
    # probe hung until the test's timeout. Fixed upstream by SPARK-55406 / SPARK-55020 (not in 4.1.3).
    # Earlier tests' clients are collected here, where no lock is held, and a stopped session's __del__ is
    # left nothing to do (its channel is closed already).
    gc.collect()
    previous = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    session = RemoteSparkSession.builder.remote(url).create()
    try:
        policies = session.client.get_retry_policies()
        for policy in policies:
            policy.max_retries = retries
            policy.initial_backoff = 50
            policy.max_backoff = 200
        session.client.set_retry_policies(policies)
        yield session
    finally:
        try:
            session.stop()
            session.client.close = lambda: None  # closed by stop(): see the deadlock above
        finally:
            if previous is None:
                os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
            else:
                os.environ["SPARK_CONNECT_MODE_ENABLED"] = previous
