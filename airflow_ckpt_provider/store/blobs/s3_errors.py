"""What an S3 failure means to the store: botocore's errors as typed store errors.

Every failure of :class:`~airflow_ckpt_provider.store.blobs.s3.S3BlobStore` passes through
:class:`S3ErrorTranslator`, which turns it into a :mod:`~airflow_ckpt_provider.store.errors`
error whose message says what to do next (fix the credentials, create the bucket, retry later,
use a server with conditional writes). Messages name the store and the endpoint without its
user-info, never a secret.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NoReturn

from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    PartialCredentialsError,
    ReadTimeoutError,
    ResponseStreamingError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from airflow_ckpt_provider.store.errors import (
    CheckpointError,
    InvalidArgumentError,
    StoreUnavailableError,
    UnsupportedError,
)

ACCESS_DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "AccountProblem",
        "AllAccessDisabled",
        "ExpiredToken",
        "InvalidAccessKeyId",
        "InvalidSecurity",
        "InvalidToken",
        "RequestTimeTooSkewed",
        "SignatureDoesNotMatch",
        "TokenRefreshRequired",
        "Forbidden",
        "403",
    }
)
# 409 ConditionalRequestConflict: AWS lost a race between two conditional writes of one key.
PRECONDITION_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict"})
NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
# Errors of the network path, after botocore's own retries gave up.
NETWORK_ERRORS = (
    EndpointConnectionError,
    ConnectTimeoutError,
    ReadTimeoutError,
    ConnectionClosedError,
    BotoConnectionError,
    HTTPClientError,
    ResponseStreamingError,
)


def error_code(exc: ClientError) -> str:
    """The S3 error code of a response (``NoSuchKey``, ``412``, ...), or ""."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def lost_condition(exc: ClientError) -> bool:
    """A conditional write (``If-None-Match`` / ``If-Match``) that lost: HTTP 412, or 409 for a race."""
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status == 412 or error_code(exc) in PRECONDITION_CODES


def retried(exc: ClientError) -> bool:
    """botocore sent the request more than once (so an earlier attempt may have landed)."""
    return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0


@dataclass(frozen=True)
class S3ErrorTranslator:
    """Turns the errors of one S3 store (``uri``, on ``bucket``) into typed store errors.

    ``shown_endpoint``: the endpoint as messages show it (None: AWS); ``timeout_seconds`` and
    ``max_attempts`` (botocore's retries) only go into the message of a network failure.
    """

    uri: str
    bucket: str
    shown_endpoint: str | None
    timeout_seconds: float
    max_attempts: int

    @contextlib.contextmanager
    def around(self, action: str, key: str | None = None) -> Iterator[None]:
        """Translate what the block raises while ``action``-ing ``key`` (the store's own errors pass)."""
        try:
            yield
        except CheckpointError:
            raise
        except (ClientError, NoCredentialsError, PartialCredentialsError, *NETWORK_ERRORS) as exc:
            self.raise_typed(exc, action, key)

    def raise_typed(self, exc: Exception, action: str, key: str | None) -> NoReturn:
        where = f"{self.uri}/{key}" if key else self.uri
        endpoint = self._at_endpoint()
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            message = str(error.get("Message", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if code == "NoSuchBucket":
                raise self.missing_bucket(exc) from exc
            if code in ACCESS_DENIED_CODES or status == 403:
                raise StoreUnavailableError(
                    f"S3{endpoint} refused {action} {where} ({code or status}: {message or 'forbidden'}): "
                    "check the access key and secret (the Airflow connection or the store options), "
                    "and that they may read, write, list and delete under this prefix",
                    reason="access_denied",
                ) from exc
            if code in ("NotImplemented", "501") or status == 501:
                raise UnsupportedError(
                    f"the S3 server{endpoint} does not implement {action} ({message or code}): the store "
                    "needs conditional writes (If-None-Match / If-Match) and batched deletes; use AWS S3 or "
                    "a compatible server that supports them",
                    reason="s3_not_implemented",
                ) from exc
            if status >= 500 or code in ("SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout"):
                raise StoreUnavailableError(
                    f"S3{endpoint} failed {action} {where} after retries ({code or status}: {message}): "
                    "the service is unavailable or throttling; retry later",
                    reason="unreachable",
                ) from exc
            if code == "InvalidBucketName":
                raise InvalidArgumentError(
                    f"{self.uri}: S3 rejects the bucket name ({message})", reason="store_uri"
                ) from exc
            raise UnsupportedError(
                f"S3{endpoint} rejected {action} {where} ({code or status}: {message}); "
                "this is unexpected for a compatible server: check the endpoint and server version",
                reason="s3_rejected",
            ) from exc
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            raise StoreUnavailableError(
                f"no usable AWS credentials for {self.uri}: set aws_access_key_id and aws_secret_access_key "
                "(or an Airflow AWS connection), or configure the default AWS credential chain",
                reason="access_denied",
            ) from exc
        if isinstance(exc, NETWORK_ERRORS):
            raise StoreUnavailableError(
                f"S3 endpoint{endpoint or ' (AWS)'} unreachable during {action} {where} "
                f"({type(exc).__name__} after {self.max_attempts + 1} attempts, {self.timeout_seconds:g}s "
                "timeout each): check that the server runs and the endpoint URL is right, then retry",
                reason="unreachable",
            ) from exc
        raise exc

    def missing_bucket(self, cause: Exception | None = None) -> StoreUnavailableError:
        error = StoreUnavailableError(
            f"bucket {self.bucket!r} does not exist{self._at_endpoint()}: create it or fix the URI ({self.uri})",
            reason="store_not_found",
        )
        error.__cause__ = cause
        return error

    def _at_endpoint(self) -> str:
        return f" at {self.shown_endpoint}" if self.shown_endpoint else ""
