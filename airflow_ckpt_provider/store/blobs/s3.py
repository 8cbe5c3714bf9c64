"""S3 object layer on boto3: AWS S3 and any S3-compatible server (MinIO, SeaweedFS, Ceph …).

S3 has no rename, so atomicity comes from the protocol itself: one ``PutObject``
is all-or-nothing, ``If-None-Match: *`` makes it create-if-absent and
``If-Match: <etag>`` makes it compare-and-swap. Listing paginates (1000 keys per
page at most), deletes are batched (``DeleteObjects``, 1000 keys per call).

A :class:`S3BlobStore` can be rooted at any ``s3://bucket/prefix``: a checkpoint
store's root or an output directory such as ``s3://lake/out``. Every failure
becomes a typed :mod:`~airflow_ckpt_provider.store.errors` error whose message
says what to do; secrets never appear in messages. One instance is safe to use
from many threads (boto3 clients are thread-safe; the instance holds one client).
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import logging
import re
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import boto3
import botocore.session
from botocore.config import Config
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

from airflow_ckpt_provider.store.blobs.base import (
    BlobInfo,
    BlobNotFoundError,
    BlobStore,
    PendingUpload,
    check_key,
)
from airflow_ckpt_provider.store.errors import (
    CheckpointError,
    InvalidArgumentError,
    InvalidStoreUriError,
    PathOutsideRootError,
    PreconditionFailedError,
    StoreAccessDeniedError,
    StoreNotFoundError,
    StoreUnavailableError,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CopySourceTypeDef

#: S3's hard limit of keys per ``DeleteObjects`` call.
DELETE_BATCH = 1000
#: S3's largest (and default) page of ``ListObjectsV2`` / ``ListMultipartUploads``.
MAX_PAGE_SIZE = 1000

#: ``Server`` headers of S3 servers with real directories that outlive their last object.
_SERVERS_KEEPING_EMPTY_DIRS = ("SeaweedFS",)

# Lenient on purpose: S3-compatible servers accept names AWS would not (upper case, "_").
_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]$")

_ACCESS_DENIED_CODES = frozenset(
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
log = logging.getLogger(__name__)
# 409 ConditionalRequestConflict: AWS lost a race between two conditional writes of one key.
_PRECONDITION_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict"})
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
# Errors of the network path, after botocore's own retries gave up.
_NETWORK_ERRORS = (
    EndpointConnectionError,
    ConnectTimeoutError,
    ReadTimeoutError,
    ConnectionClosedError,
    BotoConnectionError,
    HTTPClientError,
    ResponseStreamingError,
)

# Building a boto3 Session parses the service models (~60 ms); clients made from one shared
# session cost ~3 ms. Sessions are not thread-safe, clients are: create clients under a lock.
_shared_session: boto3.session.Session | None = None
_session_lock = threading.Lock()


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


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b/`` → ``("bucket", "a/b")``. :class:`InvalidStoreUriError` if it is not one."""
    if not isinstance(uri, str):
        raise InvalidStoreUriError(f"{uri!r} is not an s3:// URI")
    for scheme in ("s3://", "s3a://"):
        if uri.startswith(scheme):
            rest = uri[len(scheme) :]
            break
    else:
        raise InvalidStoreUriError(f"{uri!r} is not an s3:// URI: use s3://bucket/prefix")
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET_RE.match(bucket):
        raise InvalidStoreUriError(
            f"{uri!r}: {bucket!r} is not a valid bucket name (3-255 letters, digits, '.', '-', '_'): "
            "use s3://bucket/prefix"
        )
    prefix = prefix.strip("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise InvalidStoreUriError(
            f"{uri!r}: the prefix holds an empty, '.' or '..' segment: use a plain s3://bucket/a/b prefix"
        )
    return bucket, prefix


def without_userinfo(url: str) -> str:
    """``http://user:pw@host:1/x`` → ``http://host:1/x``: what a message may show of an endpoint URL."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rsplit('@', 1)[-1]}{slash}{path}"


def _check_prefix(prefix: str) -> str:
    """A listing prefix: a key or the start of one (may end with ``/``), never escaping the root."""
    if prefix == "":
        return prefix
    if prefix.startswith("/") or "\\" in prefix or "\x00" in prefix:
        raise PathOutsideRootError(f"invalid prefix {prefix!r}: prefixes are relative '/'-separated paths")
    parts = prefix.split("/")
    if parts[-1] == "":  # a trailing "/" names a directory
        parts = parts[:-1]
    if any(part in ("", ".", "..") for part in parts):
        raise PathOutsideRootError(f"invalid prefix {prefix!r}: '.', '..' and empty segments are not allowed")
    return prefix


class S3BlobStore(BlobStore):
    """Objects under ``s3://bucket/prefix``.

    Options mirror ``open_store``'s: explicit credentials (or ``boto3_session``, driver
    only), ``endpoint_url`` for S3-compatible servers, ``timeout_seconds`` for connect and
    read of each HTTP request, ``max_attempts`` for botocore's standard retries (botocore's
    meaning: retries after the first attempt, so 3 allows up to 4 requests; 0 disables them),
    ``max_pool_connections`` for parallel use from threads, and ``page_size`` (1..1000)
    for listings. Construction sends no request: a missing bucket or wrong credentials
    surface on first use as :class:`StoreNotFoundError` / :class:`StoreAccessDeniedError`.
    """

    def __init__(
        self,
        uri: str,
        *,
        endpoint_url: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        region_name: str | None = None,
        boto3_session: boto3.session.Session | None = None,
        timeout_seconds: float = 10.0,
        max_attempts: int = 3,
        max_pool_connections: int = 32,
        page_size: int = MAX_PAGE_SIZE,
    ) -> None:
        self.bucket, self.prefix = parse_s3_uri(uri)
        self.uri = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        if not 1 <= int(page_size) <= MAX_PAGE_SIZE:
            raise InvalidArgumentError(f"page_size must be between 1 and {MAX_PAGE_SIZE}, got {page_size}")
        if float(timeout_seconds) <= 0 or int(max_attempts) < 0 or int(max_pool_connections) < 1:
            raise InvalidArgumentError(
                "store options out of range: timeout_seconds must be > 0, max_attempts >= 0 and "
                f"max_pool_connections >= 1 (got {timeout_seconds}, {max_attempts}, {max_pool_connections})"
            )
        if (aws_access_key_id is None) != (aws_secret_access_key is None):
            raise StoreAccessDeniedError(
                f"incomplete credentials for {self.uri}: give both aws_access_key_id and "
                "aws_secret_access_key, or neither (then the default AWS credential chain is used)"
            )
        self.page_size = int(page_size)
        self.endpoint_url = endpoint_url
        #: The endpoint as messages show it: without user-info (an endpoint URL may carry a password).
        self.shown_endpoint = without_userinfo(endpoint_url) if endpoint_url else None
        self._options: dict[str, Any] = {
            "endpoint_url": endpoint_url,
            "aws_access_key_id": aws_access_key_id,
            "aws_secret_access_key": aws_secret_access_key,
            "aws_session_token": aws_session_token,
            "region_name": region_name,
            "timeout_seconds": float(timeout_seconds),
            "max_attempts": int(max_attempts),
            "max_pool_connections": int(max_pool_connections),
            "page_size": self.page_size,
        }
        config = Config(
            connect_timeout=float(timeout_seconds),
            read_timeout=float(timeout_seconds),
            retries={"max_attempts": int(max_attempts), "mode": "standard"},
            max_pool_connections=int(max_pool_connections),
            # Checksums only where S3 requires them (DeleteObjects): the newer defaults
            # (CRC32 on every request, aws-chunked bodies) break many S3-compatible servers.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        client_kwargs: dict[str, Any] = {
            "endpoint_url": endpoint_url,
            "aws_access_key_id": aws_access_key_id,
            "aws_secret_access_key": aws_secret_access_key,
            "aws_session_token": aws_session_token,
            "region_name": region_name,
            "config": config,
        }
        if boto3_session is not None:
            self._client: S3Client = boto3_session.client("s3", **client_kwargs)
        else:
            global _shared_session
            with _session_lock:
                if _shared_session is None:
                    _shared_session = _new_session()
                self._client = _shared_session.client("s3", **client_kwargs)
        self.request_count = 0
        #: Requests per S3 operation (``{"ListObjectsV2": 3, …}``), retries included.
        self.requests_by_operation: collections.Counter[str] = collections.Counter()
        self._count_lock = threading.Lock()
        # botocore builds a fresh request for every HTTP attempt (retries included) and
        # announces each one as "request-created.s3.<Operation>".
        self._client.meta.events.register("request-created.s3", self._count_request)
        self._bucket_confirmed = False

    # -- configuration -------------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        """The JSON-serialisable keyword arguments that rebuild this store elsewhere (a Spark
        executor): ``S3BlobStore(uri, **options())``. Holds credentials when they were given
        explicitly: never log it. A ``boto3_session`` is not included (it cannot travel)."""
        return {k: v for k, v in self._options.items() if v is not None}

    def __repr__(self) -> str:  # no credentials in reprs
        return f"S3BlobStore({self.uri!r}, endpoint_url={self.shown_endpoint!r})"

    def _count_request(self, event_name: str = "", **_: Any) -> None:
        operation = event_name.rsplit(".", 1)[-1]
        with self._count_lock:
            self.request_count += 1
            self.requests_by_operation[operation] += 1

    def _full_key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _full_prefix(self, prefix: str) -> str:
        # The root prefix always ends with "/": s3://b/ckpt must not list s3://b/ckpt2/….
        return f"{self.prefix}/{prefix}" if self.prefix else prefix

    def _relative(self, full_key: str) -> str:
        return full_key[len(self.prefix) + 1 :] if self.prefix else full_key

    # -- error translation ---------------------------------------------------------------------

    def _raise(self, exc: Exception, action: str, key: str | None) -> NoReturn:
        where = f"{self.uri}/{key}" if key else self.uri
        endpoint = f" at {self.shown_endpoint}" if self.shown_endpoint else ""
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            message = str(error.get("Message", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if code == "NoSuchBucket":
                raise self._missing_bucket(exc) from exc
            if code in _ACCESS_DENIED_CODES or status == 403:
                raise StoreAccessDeniedError(
                    f"S3{endpoint} refused {action} {where} ({code or status}: {message or 'forbidden'}): "
                    "check the access key and secret (the Airflow connection or the store options), "
                    "and that they may read, write, list and delete under this prefix"
                ) from exc
            if code in ("NotImplemented", "501") or status == 501:
                raise CheckpointError(
                    f"the S3 server{endpoint} does not implement {action} ({message or code}): the store "
                    "needs conditional writes (If-None-Match / If-Match) and batched deletes; use AWS S3 or "
                    "a compatible server that supports them"
                ) from exc
            if status >= 500 or code in ("SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout"):
                raise StoreUnavailableError(
                    f"S3{endpoint} failed {action} {where} after retries ({code or status}: {message}): "
                    "the service is unavailable or throttling; retry later"
                ) from exc
            if code == "InvalidBucketName":
                raise InvalidStoreUriError(f"{self.uri}: S3 rejects the bucket name ({message})") from exc
            raise CheckpointError(
                f"S3{endpoint} rejected {action} {where} ({code or status}: {message}); "
                "this is unexpected for a compatible server: check the endpoint and server version"
            ) from exc
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            raise StoreAccessDeniedError(
                f"no usable AWS credentials for {self.uri}: set aws_access_key_id and aws_secret_access_key "
                "(or an Airflow AWS connection), or configure the default AWS credential chain"
            ) from exc
        if isinstance(exc, _NETWORK_ERRORS):
            timeout = self._options["timeout_seconds"]
            attempts = self._options["max_attempts"] + 1
            raise StoreUnavailableError(
                f"S3 endpoint{endpoint or ' (AWS)'} unreachable during {action} {where} "
                f"({type(exc).__name__} after {attempts} attempts, {timeout:g}s timeout each): "
                "check that the server runs and the endpoint URL is right, then retry"
            ) from exc
        raise exc

    @contextlib.contextmanager
    def _errors(self, action: str, key: str | None = None) -> Iterator[None]:
        try:
            yield
        except CheckpointError:
            raise
        except (ClientError, NoCredentialsError, PartialCredentialsError, *_NETWORK_ERRORS) as exc:
            self._raise(exc, action, key)

    @staticmethod
    def _code(exc: ClientError) -> str:
        return str(exc.response.get("Error", {}).get("Code", ""))

    @staticmethod
    def _lost_condition(exc: ClientError) -> bool:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return status == 412 or S3BlobStore._code(exc) in _PRECONDITION_CODES

    @staticmethod
    def _retried(exc: ClientError) -> bool:
        return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0

    def _missing_bucket(self, cause: Exception | None = None) -> StoreNotFoundError:
        endpoint = f" at {self.shown_endpoint}" if self.shown_endpoint else ""
        error = StoreNotFoundError(
            f"bucket {self.bucket!r} does not exist{endpoint}: create it or fix the URI ({self.uri})"
        )
        error.__cause__ = cause
        return error

    def _confirm_bucket(self) -> None:
        """A HEAD 404 has no body, so a missing key and a missing bucket look alike. Ask once."""
        if self._bucket_confirmed:
            return
        with self._errors("checking the bucket of", None):
            try:
                self._client.head_bucket(Bucket=self.bucket)
            except ClientError as exc:
                if self._code(exc) in ("404", "NoSuchBucket", "NotFound"):
                    raise self._missing_bucket(exc) from exc
                raise
        self._bucket_confirmed = True

    # -- BlobStore -----------------------------------------------------------------------------

    def put(self, key: str, data: bytes, *, if_absent: bool = False, if_match: str | None = None) -> str:
        """One ``PutObject``: readers see all of ``data`` or the previous state, never a part.

        ``if_absent`` sends ``If-None-Match: *``, ``if_match`` sends ``If-Match``; losing
        raises :class:`PreconditionFailedError` (HTTP 412, or 409 for a concurrent
        conditional write). A retried conditional write whose first attempt landed but
        whose answer was lost would report 412 against itself: then the object is read
        back and the put counts as done if it holds exactly ``data``.
        """
        check_key(key)
        if if_absent and if_match is not None:  # pragma: no cover - a caller bug, not input
            raise ValueError("put(): give if_absent or if_match, not both")
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self._full_key(key), "Body": bytes(data)}
        if if_absent:
            kwargs["IfNoneMatch"] = "*"
        elif if_match is not None:
            kwargs["IfMatch"] = if_match
        with self._errors("writing", key):
            try:
                response = self._client.put_object(**kwargs)
            except ClientError as exc:
                if not self._lost_condition(exc):
                    raise
                current = self.get_if_exists(key) if if_absent or self._retried(exc) else None
                if current is not None and self._retried(exc) and current[0] == bytes(data):
                    return current[1]
                if if_absent and current is not None and not current[0] and data:
                    # An upload cut short left it empty (this server's PUT is not atomic): take its place.
                    log.warning("%s/%s is empty (an upload cut short): writing it", self.uri, key)
                    return self.put(key, data, if_match=current[1])
                if if_absent:
                    raise PreconditionFailedError(
                        f"conditional create of {self.uri}/{key} lost: the object already exists"
                    ) from exc
                raise PreconditionFailedError(
                    f"conditional write of {self.uri}/{key} lost: its etag is no longer {if_match} "
                    "(another writer changed or deleted it); re-read it and decide again"
                ) from exc
        return str(response["ETag"])

    def get(self, key: str) -> tuple[bytes, str]:
        """Content and etag of ``key``; :class:`BlobNotFoundError` if absent. Reads are
        strongly consistent on AWS S3: a completed put is visible to every later get."""
        check_key(key)
        with self._errors("reading", key):
            try:
                response = self._client.get_object(Bucket=self.bucket, Key=self._full_key(key))
            except ClientError as exc:
                if self._code(exc) in _NOT_FOUND_CODES:
                    raise BlobNotFoundError(f"{self.uri}/{key} does not exist") from exc
                raise
            body = response["Body"]
            try:
                data = body.read()
            finally:
                body.close()
        return data, str(response["ETag"])

    def exists(self, key: str) -> bool:
        """One ``HeadObject`` (plus one ``HeadBucket`` the first time a key is missing, since a
        HEAD 404 cannot tell a missing key from a missing bucket)."""
        check_key(key)
        with self._errors("checking", key):
            try:
                self._client.head_object(Bucket=self.bucket, Key=self._full_key(key))
            except ClientError as exc:
                if self._code(exc) in _NOT_FOUND_CODES:
                    self._confirm_bucket()
                    return False
                raise
        return True

    def copy_from(self, source: BlobStore, source_key: str, key: str) -> None:
        """A server-side copy when ``source`` is on the same endpoint with the same credentials
        (``CopyObject``, multipart above 8 MiB: the bytes never pass through this process)."""
        if not (isinstance(source, S3BlobStore) and source._options == self._options):
            super().copy_from(source, source_key, key)
            return
        check_key(key)
        copy_source: CopySourceTypeDef = {"Bucket": source.bucket, "Key": source._full_key(check_key(source_key))}
        with self._errors("copying to", key):
            try:
                self._client.copy(copy_source, self.bucket, self._full_key(key))
            except ClientError as exc:
                if self._code(exc) in _NOT_FOUND_CODES:
                    raise BlobNotFoundError(f"{source.uri}/{source_key} does not exist") from exc
                raise

    def list(self, prefix: str = "") -> Iterator[BlobInfo]:
        """Every object under ``prefix``, in key order, one ``ListObjectsV2`` per ``page_size``
        keys. Pages are fetched lazily as the iterator advances."""
        full_prefix = self._full_prefix(_check_prefix(prefix))
        return self._list_pages(prefix, full_prefix)

    def _list_pages(self, prefix: str, full_prefix: str) -> Iterator[BlobInfo]:
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full_prefix, "MaxKeys": self.page_size}
            if token:
                kwargs["ContinuationToken"] = token
            with self._errors("listing", prefix or None):
                page = self._client.list_objects_v2(**kwargs)
            for obj in page.get("Contents", []):
                full = obj["Key"]
                if full.endswith("/"):  # a "directory marker" some tools create: not a blob
                    continue
                yield BlobInfo(key=self._relative(full), size=int(obj.get("Size", 0)), etag=obj.get("ETag"))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        """Names of the immediate sub-directories of ``prefix`` (``ListObjectsV2`` with
        ``Delimiter='/'``, paginated), sorted."""
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        full_prefix = self._full_prefix(_check_prefix(prefix))
        names: builtins.list[str] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {
                "Bucket": self.bucket,
                "Prefix": full_prefix,
                "Delimiter": "/",
                "MaxKeys": self.page_size,
            }
            if token:
                kwargs["ContinuationToken"] = token
            with self._errors("listing", prefix or None):
                page = self._client.list_objects_v2(**kwargs)
            for common in page.get("CommonPrefixes", []):
                name = common["Prefix"][len(full_prefix) :].rstrip("/")
                if name:
                    names.append(name)
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return sorted(set(names))

    def delete_many(self, keys: Iterable[str]) -> builtins.list[str]:
        """Delete ``keys`` with ``DeleteObjects``, 1000 per request. Idempotent: missing keys
        count as deleted. If S3 reports a per-key failure, the other batches still run and then
        :class:`StoreAccessDeniedError` (all failures were denials) or
        :class:`StoreUnavailableError` is raised naming the failed keys; nothing is retried."""
        unique = builtins.list(dict.fromkeys(check_key(key) for key in keys))
        failed: builtins.list[tuple[str, str, str]] = []
        keeps_empty_dirs = False
        for start in range(0, len(unique), DELETE_BATCH):
            response = self._delete_batch(unique[start : start + DELETE_BATCH])
            server = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("server", "")
            keeps_empty_dirs = keeps_empty_dirs or server.startswith(_SERVERS_KEEPING_EMPTY_DIRS)
            for error in response.get("Errors", []):
                failed.append((self._relative(error.get("Key", "")), error.get("Code", "?"), error.get("Message", "")))
        if failed:
            denied = all(code in _ACCESS_DENIED_CODES for _, code, _ in failed)
            sample = ", ".join(f"{key} ({code}: {message})" for key, code, message in failed[:5])
            error_type = StoreAccessDeniedError if denied else StoreUnavailableError
            raise error_type(
                f"S3 could not delete {len(failed)} of {len(unique)} objects under {self.uri}: {sample}"
                + (" …" if len(failed) > 5 else "")
                + "; the others were deleted. Fix the cause (permissions, object lock) and run again: "
                "deleting is idempotent"
            )
        if keeps_empty_dirs:
            self._prune_empty_dirs(unique)
        return unique

    def _delete_batch(self, keys: builtins.list[str]) -> Any:
        with self._errors("deleting under", None):
            return self._client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": self._full_key(key)} for key in keys], "Quiet": True},
            )

    def _prune_empty_dirs(self, deleted: builtins.list[str]) -> None:
        """Remove the directories the deleted keys leave empty, on servers with real directories.

        SeaweedFS keeps an emptied directory for minutes and lists it as a common prefix, so
        ``list_dirs`` would report checkpoints that no longer exist. Deleting ``dir/`` there
        removes it only if it is empty. Deepest first; only below the root; best effort.
        """
        dirs: set[str] = set()
        for key in deleted:
            parts = key.split("/")[:-1]
            dirs.update("/".join(parts[:depth]) + "/" for depth in range(1, len(parts) + 1))
        ordered = sorted(dirs, key=lambda d: (-d.count("/"), d))
        for start in range(0, len(ordered), DELETE_BATCH):
            with contextlib.suppress(CheckpointError):
                self._delete_batch(ordered[start : start + DELETE_BATCH])

    def list_pending_uploads(self, prefix: str = "") -> builtins.list[PendingUpload]:
        """Incomplete multipart uploads under ``prefix`` (``ListMultipartUploads``, paginated),
        sorted by key then upload id. They hold storage until aborted."""
        full_prefix = self._full_prefix(_check_prefix(prefix))
        found: builtins.list[PendingUpload] = []
        key_marker: str | None = None
        upload_marker: str | None = None
        seen_markers: set[tuple[str | None, str | None]] = set()
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full_prefix, "MaxUploads": self.page_size}
            if key_marker:
                kwargs["KeyMarker"] = key_marker
            if upload_marker:
                kwargs["UploadIdMarker"] = upload_marker
            with self._errors("listing multipart uploads under", prefix or None):
                page = self._client.list_multipart_uploads(**kwargs)
            for upload in page.get("Uploads", []):
                found.append(PendingUpload(key=self._relative(upload["Key"]), upload_id=upload["UploadId"]))
            if not page.get("IsTruncated"):
                break
            # AWS pages with both markers; some compatible servers (SeaweedFS) only with the
            # upload-id marker. Follow whatever the server returns, and refuse to loop.
            key_marker = page.get("NextKeyMarker") or key_marker
            upload_marker = page.get("NextUploadIdMarker") or upload_marker
            if (key_marker, upload_marker) in seen_markers or not (key_marker or upload_marker):
                raise StoreUnavailableError(
                    f"S3 returned a truncated multipart-upload listing for {self.uri} without a new marker: "
                    "the server's ListMultipartUploads pagination is broken; list with a larger page_size"
                )
            seen_markers.add((key_marker, upload_marker))
        return sorted(set(found), key=lambda upload: (upload.key, upload.upload_id))

    def abort_upload(self, upload: PendingUpload) -> None:
        """``AbortMultipartUpload``. Idempotent: an upload already gone is fine."""
        check_key(upload.key)
        with self._errors("aborting a multipart upload of", upload.key):
            try:
                self._client.abort_multipart_upload(
                    Bucket=self.bucket, Key=self._full_key(upload.key), UploadId=upload.upload_id
                )
            except ClientError as exc:
                if self._code(exc) not in ("NoSuchUpload", "404"):
                    raise

    def close(self) -> None:
        self._client.close()
