"""The S3 object layer against a real S3 server (SeaweedFS started by the suite)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest

from airflow_ckpt_provider.store.blobs.base import BlobNotFoundError, PendingUpload
from airflow_ckpt_provider.store.blobs.s3 import S3BlobStore
from airflow_ckpt_provider.store.errors import InvalidArgumentError, PreconditionFailedError, StoreUnavailableError
from ckpt_testkit.seaweed import SeaweedServer
from tests.support.errors import raises_reason

pytestmark = pytest.mark.s3

BlobsFactory = Callable[..., S3BlobStore]


@pytest.fixture
def make_blobs(s3_bucket: str, s3_options: dict[str, Any]) -> BlobsFactory:
    """``make_blobs(prefix="root", **extra)`` → an S3BlobStore in the test's fresh bucket."""

    def make(prefix: str = "root", **extra: Any) -> S3BlobStore:
        return S3BlobStore(f"s3://{s3_bucket}/{prefix}", **(s3_options | extra))

    return make


def test_uri_is_normalized_and_options_rebuild_the_store(make_blobs: BlobsFactory, s3_bucket: str) -> None:
    blobs = make_blobs("a/b/")
    assert blobs.uri == f"s3://{s3_bucket}/a/b"
    assert S3BlobStore(f"s3://{s3_bucket}").uri == f"s3://{s3_bucket}"
    options = blobs.options()
    assert json.loads(json.dumps(options)) == options  # ships to Spark executors as JSON
    assert "boto3_session" not in options
    blobs.put("x/y.json", b"1")
    rebuilt = S3BlobStore(blobs.uri, **options)
    assert rebuilt.get("x/y.json")[0] == b"1"
    assert rebuilt.child_uri("x/y.json") == f"s3://{s3_bucket}/a/b/x/y.json"
    assert rebuilt.relative_key(f"s3://{s3_bucket}/a/b/x/y.json") == "x/y.json"
    assert "secret" not in repr(rebuilt).lower()


@pytest.mark.parametrize("uri", ["s3://", "s3:///p", "s3://ab/p", "s3://b_ok/../x", "s3://bkt/a//b", "gs://bkt/p"])
def test_bad_uris_are_refused(uri: str) -> None:
    with raises_reason(InvalidArgumentError, "store_uri", match="s3://bucket"):
        S3BlobStore(uri)


def test_keys_and_prefixes_cannot_escape_the_root(make_blobs: BlobsFactory) -> None:
    blobs = make_blobs()
    for bad in ["../x", "a/../../x", "/etc/passwd", "a//b", "./a"]:
        with raises_reason(InvalidArgumentError, "path_outside_root"):
            blobs.put(bad, b"x")
    with raises_reason(InvalidArgumentError, "path_outside_root"):
        list(blobs.list("../"))
    assert blobs.request_count == 0  # refused before any request


def test_get_put_exists(make_blobs: BlobsFactory) -> None:
    blobs = make_blobs()
    with pytest.raises(BlobNotFoundError):
        blobs.get("missing.json")
    assert blobs.get_if_exists("missing.json") is None
    assert not blobs.exists("missing.json")
    etag = blobs.put("dir/a.json", b'{"a": 1}')
    assert blobs.get("dir/a.json") == (b'{"a": 1}', etag)
    assert blobs.exists("dir/a.json")


def test_racing_creates_have_exactly_one_winner(make_blobs: BlobsFactory) -> None:
    blobs = make_blobs()
    for round_ in range(8):
        key = f"epochs/{round_:08d}.json"
        barrier = threading.Barrier(2)
        outcomes: dict[str, str] = {}

        def create(
            writer: str, key: str = key, barrier: threading.Barrier = barrier, outcomes: dict[str, str] = outcomes
        ) -> None:
            barrier.wait()
            try:
                blobs.put(key, writer.encode(), if_absent=True)
                outcomes[writer] = "won"
            except PreconditionFailedError:
                outcomes[writer] = "lost"

        threads = [threading.Thread(target=create, args=(name,)) for name in ("w1", "w2")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes.values()) == ["lost", "won"], outcomes
        winner = next(name for name, outcome in outcomes.items() if outcome == "won")
        assert blobs.get(key)[0] == winner.encode()


def test_if_match_with_a_stale_etag_loses(make_blobs: BlobsFactory) -> None:
    blobs = make_blobs()
    first = blobs.put("manifest.json", b"checkpointed")
    second = blobs.put("manifest.json", b"committed", if_match=first)
    assert second != first
    with pytest.raises(PreconditionFailedError, match="re-read it"):
        blobs.put("manifest.json", b"stale writer", if_match=first)
    assert blobs.get("manifest.json") == (b"committed", second)
    with pytest.raises(PreconditionFailedError):
        blobs.put("never-written.json", b"x", if_match=first)
    with pytest.raises(PreconditionFailedError, match="already exists"):
        blobs.put("manifest.json", b"again", if_absent=True)


def test_large_prefix_lists_in_pages_and_deletes_in_batches(make_blobs: BlobsFactory) -> None:
    blobs = make_blobs("root", page_size=100)
    keys = [f"k{i:05d}" for i in range(1050)]
    with ThreadPoolExecutor(16) as pool:  # one client from many threads
        list(pool.map(lambda key: blobs.put(key, key.encode()), keys))
    make_blobs("root2").put("k99999", b"sibling prefix: not under the root")
    assert blobs.requests_by_operation["PutObject"] == 1050

    before = blobs.requests_by_operation["ListObjectsV2"]
    listed = list(blobs.list(""))
    assert [info.key for info in listed] == keys  # relative to the root, in key order
    assert all(info.size == 6 and info.etag for info in listed)
    assert blobs.requests_by_operation["ListObjectsV2"] - before == 11  # 1050 keys / 100 per page
    assert [info.key for info in blobs.list("k0104")] == [f"k0104{i}" for i in range(10)]

    deleted = blobs.delete_many([*keys, "k00000", "not-there"])  # duplicates and missing keys are fine
    assert deleted == [*keys, "not-there"]
    assert blobs.requests_by_operation["DeleteObjects"] == 2  # 1051 keys: 1000 + 51
    assert list(blobs.list("")) == []
    assert make_blobs("root2").exists("k99999")
    assert blobs.delete_many([]) == []
    assert blobs.requests_by_operation["DeleteObjects"] == 2


def test_list_dirs_pages_and_forgets_emptied_directories(make_blobs: BlobsFactory) -> None:
    blobs = make_blobs("store", page_size=2)
    for name in ["c1", "c2", "c3", "c4", "c5"]:
        blobs.put(f"checkpoints/{name}/keys/0000.arrow", b"k")
        blobs.put(f"checkpoints/{name}/manifest.json", b"m")
    blobs.put("checkpoints/loose-file.json", b"not a directory")
    blobs.put("epochs/00000001.json", b"{}")
    assert blobs.list_dirs("checkpoints/") == ["c1", "c2", "c3", "c4", "c5"]
    assert blobs.list_dirs("checkpoints") == ["c1", "c2", "c3", "c4", "c5"]
    assert blobs.list_dirs("") == ["checkpoints", "epochs"]
    assert blobs.list_dirs("nothing/") == []

    blobs.delete_many(["checkpoints/c2/keys/0000.arrow", "checkpoints/c2/manifest.json"])
    # On AWS a prefix with no objects does not exist; SeaweedFS keeps the empty directory
    # unless the store removes it: listings must not resurrect deleted checkpoints.
    assert blobs.list_dirs("checkpoints/") == ["c1", "c3", "c4", "c5"]
    assert blobs.get("checkpoints/c3/manifest.json")[0] == b"m"  # neighbours untouched


def test_pending_multipart_uploads_are_listed_and_aborted(
    make_blobs: BlobsFactory, s3_server: SeaweedServer, s3_bucket: str
) -> None:
    blobs = make_blobs("out", page_size=1)
    raw = s3_server.client()
    started = [
        raw.create_multipart_upload(Bucket=s3_bucket, Key=key)["UploadId"]
        for key in ["out/part-1.parquet", "out/part-1.parquet", "out/date=1/part-2.parquet"]
    ]
    raw.upload_part(Bucket=s3_bucket, Key="out/part-1.parquet", UploadId=started[0], PartNumber=1, Body=b"x" * 64)
    outside = raw.create_multipart_upload(Bucket=s3_bucket, Key="other/part-9.parquet")["UploadId"]

    pending = blobs.list_pending_uploads("")
    assert sorted(upload.upload_id for upload in pending) == sorted(started)
    assert [upload.key for upload in pending] == [
        "date=1/part-2.parquet",
        "part-1.parquet",
        "part-1.parquet",
    ]
    assert blobs.requests_by_operation["ListMultipartUploads"] >= 3  # one upload per page
    assert [u.key for u in blobs.list_pending_uploads("date=1/")] == ["date=1/part-2.parquet"]

    for upload in pending:
        blobs.abort_upload(upload)
    blobs.abort_upload(pending[0])  # idempotent
    assert blobs.list_pending_uploads("") == []
    other = make_blobs("other").list_pending_uploads("")
    assert other == [PendingUpload(key="part-9.parquet", upload_id=outside)]


def test_interrupted_writes_of_named_keys_are_discarded(
    make_blobs: BlobsFactory, s3_server: SeaweedServer, s3_bucket: str
) -> None:
    """What a killed multipart copy leaves: an incomplete upload of the key. Only the named keys' uploads go."""
    blobs = make_blobs("out")
    raw = s3_server.client()
    raw.create_multipart_upload(Bucket=s3_bucket, Key="out/d/part-1.parquet")
    neighbour = raw.create_multipart_upload(Bucket=s3_bucket, Key="out/d/part-2.parquet")["UploadId"]
    blobs.put("d/part-1.parquet", b"restored")

    assert blobs.discard_interrupted_writes(["d/part-1.parquet", "e/absent.parquet"]) == ["d/part-1.parquet"]
    assert blobs.list_pending_uploads("") == [PendingUpload(key="d/part-2.parquet", upload_id=neighbour)]
    assert blobs.get("d/part-1.parquet")[0] == b"restored"  # the object itself stays
    assert blobs.discard_interrupted_writes(["d/part-1.parquet"]) == []  # idempotent


def test_every_request_is_counted_from_many_threads(make_blobs: BlobsFactory) -> None:
    blobs = make_blobs()
    blobs.put("a", b"1")
    blobs.get("a")
    blobs.exists("a")
    list(blobs.list(""))
    assert blobs.request_count == 4
    assert dict(blobs.requests_by_operation) == {
        "PutObject": 1,
        "GetObject": 1,
        "HeadObject": 1,
        "ListObjectsV2": 1,
    }
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: blobs.put(f"t/{i}", b"x"), range(200)))
    assert blobs.request_count == 204


def test_missing_bucket_says_create_it(s3_options: dict[str, Any]) -> None:
    blobs = S3BlobStore("s3://ckpt-no-such-bucket/p", **s3_options)
    calls: list[Callable[[], object]] = [
        lambda: blobs.get("x"),
        lambda: blobs.put("x", b"1"),
        lambda: blobs.put("x", b"1", if_absent=True),
        lambda: list(blobs.list("")),
        lambda: blobs.list_dirs(""),
        lambda: blobs.exists("x"),
        lambda: blobs.delete_many(["x"]),
        lambda: blobs.list_pending_uploads(""),
    ]
    for call in calls:
        with raises_reason(
            StoreUnavailableError,
            "store_not_found",
            match=r"'ckpt-no-such-bucket' does not exist.*create it or fix the URI",
        ):
            call()


def test_wrong_credentials_are_denied_without_echoing_the_secret(s3_bucket: str, s3_options: dict[str, Any]) -> None:
    secret = "wrong-secret-value-1234567890"
    blobs = S3BlobStore(f"s3://{s3_bucket}/p", **(s3_options | {"aws_secret_access_key": secret}))
    for call in (lambda: blobs.put("x", b"1"), lambda: blobs.get("x"), lambda: blobs.exists("x")):
        with raises_reason(StoreUnavailableError, "access_denied", match="check the access key and secret") as caught:
            call()
        assert secret not in str(caught.value)
    unknown_key = S3BlobStore(f"s3://{s3_bucket}/p", **(s3_options | {"aws_access_key_id": "AKIDUNKNOWN"}))
    with raises_reason(StoreUnavailableError, "access_denied", match="InvalidAccessKeyId"):
        list(unknown_key.list(""))


def test_no_credentials_at_all_is_access_denied(
    s3_bucket: str, s3_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    # An empty credential chain: no env keys, no files, and no instance metadata lookup.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    blobs = S3BlobStore(
        f"s3://{s3_bucket}/p",
        endpoint_url=s3_options["endpoint_url"],
        region_name="us-east-1",
        boto3_session=boto3.session.Session(),
    )
    with raises_reason(StoreUnavailableError, "access_denied", match="no usable AWS credentials"):
        blobs.get("x")
    with raises_reason(
        StoreUnavailableError, "access_denied", match="both aws_access_key_id and aws_secret_access_key"
    ):
        S3BlobStore(f"s3://{s3_bucket}/p", aws_access_key_id="only-the-id")
