"""Fixtures of the Spark tests: one local SparkSession, one standalone cluster, local and S3 targets."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.spark.helpers import Target


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
