"""Opening stores: URIs, missing buckets, wrong credentials — typed errors that say what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.store import open_blobs, open_store
from airflow_ckpt_provider.store.errors import InvalidArgumentError, StoreUnavailableError
from tests.support.errors import raises_reason


@pytest.mark.parametrize(
    "uri",
    ["", "   ", "relative/path", "hdfs://namenode/x", "gs://bucket/x", "s3://", "file://remote-host/x", "ftp://x"],
)
def test_uris_that_are_not_stores(uri: str) -> None:
    with raises_reason(InvalidArgumentError, "store_uri", match="file:///absolute/path"):
        open_store(uri)


def test_unknown_option_is_rejected(tmp_path: Path) -> None:
    with raises_reason(InvalidArgumentError, "store_uri", match="unknown store options"):
        open_store(str(tmp_path), endpoint="http://x")


def test_plain_path_and_file_uri_are_the_same_store(tmp_path: Path) -> None:
    assert open_store(str(tmp_path)).uri == open_store(f"file://{tmp_path}").uri == f"file://{tmp_path}"
    assert open_store(f"file://{tmp_path}/a/../b/").uri == f"file://{tmp_path}/b"


def test_keys_cannot_escape_the_root(tmp_path: Path) -> None:
    blobs = open_blobs(str(tmp_path / "root"))
    for bad in ["../x", "a/../../x", "/etc/passwd", "a//b", "./a"]:
        with raises_reason(InvalidArgumentError, "path_outside_root"):
            blobs.put(bad, b"x")
    with raises_reason(InvalidArgumentError, "path_outside_root"):
        blobs.relative_key(f"file://{tmp_path}/elsewhere/x")
    assert not (tmp_path / "x").exists()


@pytest.mark.s3
def test_missing_bucket(s3_options: dict[str, Any]) -> None:
    store = open_store("s3://no-such-bucket-ckpt/prefix", **s3_options)
    with raises_reason(StoreUnavailableError, "store_not_found", match="no-such-bucket-ckpt"):
        store.epochs.begin(owner="t")
    with raises_reason(StoreUnavailableError, "store_not_found"):
        store.get_checkpointed_keys()


@pytest.mark.s3
def test_wrong_credentials(s3_options: dict[str, Any], s3_bucket: str) -> None:
    secret = "definitely-wrong-secret-value"
    store = open_store(f"s3://{s3_bucket}/p", **(s3_options | {"aws_secret_access_key": secret}))
    with raises_reason(StoreUnavailableError, "access_denied") as info:
        store.epochs.begin(owner="t")
    assert secret not in str(info.value)
    good = open_store(f"s3://{s3_bucket}/p", **s3_options)
    assert good.epochs.current() is None  # nothing was written with the bad credentials


@pytest.mark.parametrize(
    ("uri", "options", "message"),
    [
        ("s3://bucket/prefix", {"timeout_seconds": 0}, "timeout_seconds must be > 0"),
        ("s3://bucket/prefix", {"max_attempts": -1}, "max_attempts >= 0"),
        ("file:///tmp/ckpt-options", {"breaker_max_failures": 0}, "breaker_max_failures must be at least 1"),
    ],
)
def test_store_options_out_of_range_are_a_typed_error(uri: str, options: dict[str, object], message: str) -> None:
    with raises_reason(InvalidArgumentError, "out_of_range", match=message):
        open_store(uri, **options)
