"""``spark/paths.py``: file keys are normalized URIs (no Spark needed)."""

from __future__ import annotations

import pytest

from airflow_ckpt_provider.spark import file_key
from airflow_ckpt_provider.store.errors import InvalidArgumentError
from tests.support.errors import raises_reason


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("/data/a.parquet", "file:///data/a.parquet"),
        ("file:/data/./a.parquet", "file:///data/a.parquet"),
        ("file:///data/x/../a.parquet", "file:///data/a.parquet"),
        ("file:///data/a%20b.parquet", "file:///data/a b.parquet"),
        ("s3a://bucket/k/a.parquet", "s3://bucket/k/a.parquet"),
        ("s3://bucket//k/a.parquet", "s3://bucket/k/a.parquet"),
    ],
)
def test_file_keys_are_normalized_uris(path: str, key: str) -> None:
    assert file_key(path) == key


@pytest.mark.parametrize("path", ["", "  ", "s3://", "s3:///key", "file://otherhost/data/a.parquet"])
def test_a_path_that_names_no_file_is_a_typed_error(path: str) -> None:
    with raises_reason(InvalidArgumentError, "path"):
        file_key(path)
