"""The S3 object layer when the network or the server fails: typed errors, within bounded time.

Faults come from a real server that is killed and restarted, and from the fault
proxy (ckpt_testkit/faultproxy.py) between the client and the real server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from airflow_ckpt_provider.store.blobs.s3 import S3BlobStore
from airflow_ckpt_provider.store.errors import PreconditionFailedError, StoreUnavailableError
from ckpt_testkit.faultproxy import FaultProxy
from ckpt_testkit.seaweed import SeaweedServer

pytestmark = pytest.mark.s3

# Small client bounds keep the tests fast. ``max_attempts`` is botocore's: retries after the
# first attempt. Each attempt waits at most TIMEOUT seconds, and botocore's standard backoff
# sleeps at most 1 s before the first retry.
TIMEOUT = 1.0
RETRIES = 1
ATTEMPTS = RETRIES + 1
WORST_CASE = ATTEMPTS * TIMEOUT + 1.0 + 2.0  # attempts + backoff + slack for a loaded machine


def _through_proxy(proxy: FaultProxy, bucket: str, options: dict[str, Any], **extra: Any) -> S3BlobStore:
    settings = options | {"endpoint_url": proxy.endpoint_url, "timeout_seconds": TIMEOUT, "max_attempts": RETRIES}
    return S3BlobStore(f"s3://{bucket}/p", **(settings | extra))


def _timed(call: Callable[[], object]) -> tuple[BaseException, float]:
    began = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        call()
    return caught.value, time.monotonic() - began


def test_stopped_server_is_unavailable_then_recovers_with_its_data(
    s3_server_factory: Callable[[], SeaweedServer],
) -> None:
    server = s3_server_factory()
    bucket = server.create_bucket("outage")
    blobs = S3BlobStore(
        f"s3://{bucket}/p", **(server.options() | {"timeout_seconds": TIMEOUT, "max_attempts": RETRIES})
    )
    etag = blobs.put("manifest.json", b"sealed")

    server.stop()
    error, elapsed = _timed(lambda: blobs.get("manifest.json"))
    assert elapsed < WORST_CASE
    assert "unreachable" in str(error) and server.endpoint_url in str(error)
    _timed(lambda: blobs.put("other.json", b"x"))

    server.start()  # same ports, same data directory
    assert blobs.get("manifest.json") == (b"sealed", etag)  # the same client reconnects
    blobs.put("other.json", b"x", if_absent=True)


def test_reset_connections_are_retried_then_unavailable(
    fault_proxy: FaultProxy, s3_bucket: str, s3_options: dict[str, Any]
) -> None:
    blobs = _through_proxy(fault_proxy, s3_bucket, s3_options)
    blobs.put("a.json", b"1")  # a pooled connection exists before the fault
    fault_proxy.reset()
    before = blobs.request_count
    error, elapsed = _timed(lambda: blobs.get("a.json"))
    assert blobs.request_count - before == ATTEMPTS  # botocore retried once, then gave up
    assert fault_proxy.resets >= ATTEMPTS
    assert elapsed < WORST_CASE
    assert "unreachable" in str(error)

    fault_proxy.pass_through()
    assert blobs.get("a.json")[0] == b"1"


def test_http_503_is_retried_then_unavailable(
    fault_proxy: FaultProxy, s3_bucket: str, s3_options: dict[str, Any]
) -> None:
    blobs = _through_proxy(fault_proxy, s3_bucket, s3_options, max_attempts=2)
    fault_proxy.http_error(503)
    error, _ = _timed(lambda: blobs.put("a.json", b"1", if_absent=True))
    assert blobs.request_count == 3  # the first attempt and two retries
    assert fault_proxy.error_responses == 3
    assert "ServiceUnavailable" in str(error) and "retry later" in str(error)

    fault_proxy.http_error(500)
    _timed(lambda: list(blobs.list("")))
    fault_proxy.pass_through()
    assert blobs.get_if_exists("a.json") is None  # the refused writes never reached the server


def test_stalled_server_times_out_within_the_bound(
    fault_proxy: FaultProxy, s3_bucket: str, s3_options: dict[str, Any]
) -> None:
    blobs = _through_proxy(fault_proxy, s3_bucket, s3_options)
    with fault_proxy.fault("stall"):
        error, elapsed = _timed(lambda: blobs.exists("a.json"))
    assert ATTEMPTS * TIMEOUT <= elapsed < WORST_CASE  # it did wait for each read timeout
    assert "ReadTimeoutError" in str(error)
    assert fault_proxy.stalled_requests == ATTEMPTS
    assert not blobs.exists("a.json")  # back to normal after the block


def test_conditional_create_whose_answer_was_lost_still_counts_as_done(
    fault_proxy: FaultProxy, s3_bucket: str, s3_options: dict[str, Any]
) -> None:
    blobs = _through_proxy(fault_proxy, s3_bucket, s3_options)
    # The server stores the first attempt, the answer is lost, the retry meets 412 from its
    # own write: the put must still succeed, or a writer would think someone else sealed.
    fault_proxy.drop_responses(1)
    etag = blobs.put("manifest.json", b"mine", if_absent=True)
    assert fault_proxy.dropped_responses == 1
    assert blobs.request_count >= 3  # lost attempt, retried attempt (412), read-back
    assert blobs.get("manifest.json") == (b"mine", etag)

    # Someone else's content is still a lost race, even when the 412 came on a retry.
    blobs.put("epoch.json", b"theirs")
    fault_proxy.drop_responses(1)
    with pytest.raises(PreconditionFailedError):
        blobs.put("epoch.json", b"mine", if_absent=True)
    assert fault_proxy.dropped_responses == 2
    assert blobs.get("epoch.json")[0] == b"theirs"
