"""Fixtures of the Spark tests: one local SparkSession, one standalone cluster, local and S3 targets."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from airflow_ckpt_provider.contract import CONF_PYTHON_DAEMON, WORKER_DAEMON_MODULE
from ckpt_testkit.spark_cluster import SPARK_HOME
from ckpt_testkit.spark_events import event_log_confs
from tests.spark.helpers import Target


@pytest.fixture(scope="session")
def spark_event_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the in-process session writes Spark's event log (the progress oracle reads it)."""
    return tmp_path_factory.mktemp("spark-events")


@pytest.fixture(scope="session")
def spark(spark_event_log: Path) -> Iterator[SparkSession]:
    """A real local Spark (2 cores, small memory) shared by the in-process tests.

    Local mode runs each task once (``local[2]`` = ``spark.task.maxFailures`` 1).
    """
    os.environ.setdefault("SPARK_HOME", SPARK_HOME)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder
    for name, value in event_log_confs(spark_event_log).items():
        builder = builder.config(name, value)
    session = (
        builder.master("local[2]")
        .appName("ckpt-spark-tests")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        # One input file per scan task (the tests' files are tiny), so faults can target a file's task.
        .config("spark.sql.files.openCostInBytes", str(128 * 1024 * 1024))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        # Python tasks through the package's worker daemon, as the submit operator runs them.
        .config(CONF_PYTHON_DAEMON, WORKER_DAEMON_MODULE)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _local_target(tmp_path: Path) -> Target:
    return Target("local", f"file://{tmp_path}/store", f"file://{tmp_path}/out")


def _s3_target(request: pytest.FixtureRequest) -> Target:
    options = dict(request.getfixturevalue("s3_options"))
    bucket = request.getfixturevalue("s3_bucket")
    run = uuid.uuid4().hex[:8]
    return Target("s3", f"s3://{bucket}/ckpt/{run}", f"s3://{bucket}/out/{run}", options)


def _s3_store_target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    s3 = _s3_target(request)
    return Target("s3-store", s3.store_uri, f"file://{tmp_path}/out", s3.options)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """The store and the output on local disk, then on the S3 server (``s3-store``: store on S3, output local)."""
    if request.param == "s3":
        return _s3_target(request)
    if request.param == "s3-store":
        return _s3_store_target(request, tmp_path)
    return _local_target(tmp_path)


@pytest.fixture
def local_target(tmp_path: Path) -> Target:
    return _local_target(tmp_path)


@pytest.fixture
def s3_target(request: pytest.FixtureRequest) -> Target:
    return _s3_target(request)
