"""Reaching S3: ``s3://`` URIs, the client settings of an :class:`~.s3.S3BlobStore` (credentials,
endpoint, timeouts, retries) and the boto3 client built from them, and :class:`S3Root`, what its
request helpers share.

The client's configuration is the store's contract with S3-compatible servers: botocore's
standard retries, one timeout for connect and read, and checksums only where S3 requires
them. Clients come from one shared boto3 session unless the caller gives its own.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
import botocore.session
from botocore.config import Config

from airflow_ckpt_provider.store.blobs.s3_errors import S3ErrorTranslator
from airflow_ckpt_provider.store.errors import InvalidArgumentError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

#: S3's largest (and default) page of ``ListObjectsV2`` / ``ListMultipartUploads``.
MAX_PAGE_SIZE = 1000

# Lenient on purpose: S3-compatible servers accept names AWS would not (upper case, "_").
_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]$")

# Building a boto3 Session parses the service models (~60 ms); clients made from one shared
# session cost ~3 ms. Sessions are not thread-safe, clients are: create clients under a lock.
_shared_session: boto3.session.Session | None = None
_session_lock = threading.Lock()


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b/`` → ``("bucket", "a/b")``. :class:`InvalidArgumentError` (``store_uri``) if it is not one."""
    if not isinstance(uri, str):
        raise InvalidArgumentError(f"{uri!r} is not an s3:// URI", reason="store_uri")
    for scheme in ("s3://", "s3a://"):
        if uri.startswith(scheme):
            rest = uri[len(scheme) :]
            break
    else:
        raise InvalidArgumentError(f"{uri!r} is not an s3:// URI: use s3://bucket/prefix", reason="store_uri")
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET_RE.match(bucket):
        raise InvalidArgumentError(
            f"{uri!r}: {bucket!r} is not a valid bucket name (3-255 letters, digits, '.', '-', '_'): "
            "use s3://bucket/prefix",
            reason="store_uri",
        )
    prefix = prefix.strip("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise InvalidArgumentError(
            f"{uri!r}: the prefix holds an empty, '.' or '..' segment: use a plain s3://bucket/a/b prefix",
            reason="store_uri",
        )
    return bucket, prefix


def without_userinfo(url: str) -> str:
    """``http://user:pw@host:1/x`` → ``http://host:1/x``: what a message may show of an endpoint URL."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rsplit('@', 1)[-1]}{slash}{path}"


@dataclass(frozen=True)
class S3ClientSettings:
    """How a store's client reaches S3: credentials (or the default AWS chain), the endpoint of an
    S3-compatible server, the timeout of each HTTP request's connect and read, botocore's standard
    retries (``max_attempts`` retries after the first attempt), the connection pool, the listing
    page size (1..1000). Field order is the order of :meth:`options`. The store checks the ranges."""

    endpoint_url: str | None = None
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = None
    aws_session_token: str | None = None
    region_name: str | None = None
    timeout_seconds: float = 10.0
    max_attempts: int = 3
    max_pool_connections: int = 32
    page_size: int = MAX_PAGE_SIZE

    def options(self) -> dict[str, Any]:
        """The JSON-serialisable options that rebuild these settings elsewhere (unset ones left out).
        Holds credentials when they were given explicitly: never log it."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def new_client(self, boto3_session: boto3.session.Session | None) -> S3Client:
        """A client with these settings, from ``boto3_session`` or the shared session. Sends no
        request: a missing bucket or wrong credentials surface on first use."""
        config = Config(
            connect_timeout=self.timeout_seconds,
            read_timeout=self.timeout_seconds,
            retries={"max_attempts": self.max_attempts, "mode": "standard"},
            max_pool_connections=self.max_pool_connections,
            # Checksums only where S3 requires them (DeleteObjects): the newer defaults
            # (CRC32 on every request, aws-chunked bodies) break many S3-compatible servers.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        client_kwargs: dict[str, Any] = {
            "endpoint_url": self.endpoint_url,
            "aws_access_key_id": self.aws_access_key_id,
            "aws_secret_access_key": self.aws_secret_access_key,
            "aws_session_token": self.aws_session_token,
            "region_name": self.region_name,
            "config": config,
        }
        if boto3_session is not None:
            return boto3_session.client("s3", **client_kwargs)
        global _shared_session
        with _session_lock:
            if _shared_session is None:
                _shared_session = _new_session()
            return _shared_session.client("s3", **client_kwargs)


@dataclass(frozen=True)
class S3Root:
    """One ``s3://bucket/prefix`` as requests name it: what the store's request helpers share."""

    client: S3Client
    bucket: str
    #: The key prefix without slashes at either end ("" at the bucket's root).
    prefix: str
    uri: str
    page_size: int
    errors: S3ErrorTranslator

    def full_key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def full_prefix(self, prefix: str) -> str:
        # The root prefix always ends with "/": s3://b/ckpt must not list s3://b/ckpt2/….
        return f"{self.prefix}/{prefix}" if self.prefix else prefix

    def relative(self, full_key: str) -> str:
        return full_key[len(self.prefix) + 1 :] if self.prefix else full_key


def _keep_timestamp_text(value: str) -> str:
    return value


def _new_session() -> boto3.session.Session:
    """The shared session, whose responses keep timestamps as the text S3 sent. Nothing here reads
    them, and dateutil parsing every ``LastModified`` was 60 % of listing a page of 1,000 objects
    (0.25 of 0.4 s): the listings under ``checkpoints/`` are on every state read. A caller's own
    ``boto3_session`` is left as it is."""
    core = botocore.session.get_session()
    core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=_keep_timestamp_text)
    return boto3.session.Session(botocore_session=core)
