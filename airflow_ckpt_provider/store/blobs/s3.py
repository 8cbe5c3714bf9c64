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

Beside it: :mod:`.s3_client` (URIs, client settings, the client), :mod:`.s3_errors` (what each
failure means to the store), :mod:`.s3_bulk` (paginated listings, batched deletes).
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import logging
import threading
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import ClientError

from airflow_ckpt_provider.store.blobs import s3_bulk
from airflow_ckpt_provider.store.blobs.base import BlobInfo, BlobNotFoundError, BlobStore, PendingUpload, check_key
from airflow_ckpt_provider.store.blobs.s3_client import (
    MAX_PAGE_SIZE,
    S3ClientSettings,
    S3Root,
    parse_s3_uri,
    without_userinfo,
)
from airflow_ckpt_provider.store.blobs.s3_errors import (
    NOT_FOUND_CODES,
    S3ErrorTranslator,
    error_code,
    lost_condition,
    retried,
)
from airflow_ckpt_provider.store.errors import InvalidArgumentError, PreconditionFailedError, StoreUnavailableError

if TYPE_CHECKING:
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef, CopySourceTypeDef

log = logging.getLogger(__name__)

#: The largest object one ``CopyObject`` copies (S3's limit); larger ones are copied in parts.
COPY_OBJECT_LIMIT = 5 << 30
#: Part size of a multipart copy (S3 allows 5 MiB to 5 GiB per part).
COPY_PART_BYTES = 1 << 30


class S3BlobStore(BlobStore):
    """Objects under ``s3://bucket/prefix``.

    Options mirror ``open_store``'s: explicit credentials (or ``boto3_session``, driver
    only), ``endpoint_url`` for S3-compatible servers, ``timeout_seconds`` for connect and
    read of each HTTP request, ``max_attempts`` for botocore's standard retries (botocore's
    meaning: retries after the first attempt, so 3 allows up to 4 requests; 0 disables them),
    ``max_pool_connections`` for parallel use from threads, and ``page_size`` (1..1000)
    for listings. Construction sends no request: a missing bucket or wrong credentials
    surface on first use as :class:`StoreUnavailableError` (``store_not_found``) / :class:`StoreUnavailableError`
    (``access_denied``).
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
            raise InvalidArgumentError(
                f"page_size must be between 1 and {MAX_PAGE_SIZE}, got {page_size}", reason="out_of_range"
            )
        if float(timeout_seconds) <= 0 or int(max_attempts) < 0 or int(max_pool_connections) < 1:
            raise InvalidArgumentError(
                "store options out of range: timeout_seconds must be > 0, max_attempts >= 0 and "
                f"max_pool_connections >= 1 (got {timeout_seconds}, {max_attempts}, {max_pool_connections})",
                reason="out_of_range",
            )
        if (aws_access_key_id is None) != (aws_secret_access_key is None):
            raise StoreUnavailableError(
                f"incomplete credentials for {self.uri}: give both aws_access_key_id and "
                "aws_secret_access_key, or neither (then the default AWS credential chain is used)",
                reason="access_denied",
            )
        #: How the client reaches S3 (two stores with equal settings may copy server-side).
        self.settings = S3ClientSettings(
            endpoint_url=endpoint_url,
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
            aws_session_token=aws_session_token,
            region_name=region_name,
            timeout_seconds=float(timeout_seconds),
            max_attempts=int(max_attempts),
            max_pool_connections=int(max_pool_connections),
            page_size=int(page_size),
        )
        self.page_size = self.settings.page_size
        self.endpoint_url = endpoint_url
        #: The endpoint as messages show it: without user-info (an endpoint URL may carry a password).
        self.shown_endpoint = without_userinfo(endpoint_url) if endpoint_url else None
        self._client = self.settings.new_client(boto3_session)
        self._translator = S3ErrorTranslator(
            self.uri, self.bucket, self.shown_endpoint, self.settings.timeout_seconds, self.settings.max_attempts
        )
        self._root = S3Root(self._client, self.bucket, self.prefix, self.uri, self.page_size, self._translator)
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
        return self.settings.options()

    def __repr__(self) -> str:  # no credentials in reprs
        return f"S3BlobStore({self.uri!r}, endpoint_url={self.shown_endpoint!r})"

    def _count_request(self, event_name: str = "", **_: Any) -> None:
        operation = event_name.rsplit(".", 1)[-1]
        with self._count_lock:
            self.request_count += 1
            self.requests_by_operation[operation] += 1

    # -- errors --------------------------------------------------------------------------------

    def _errors(self, action: str, key: str | None = None) -> AbstractContextManager[None]:
        """Botocore's errors raised in the block, as typed store errors (:mod:`.s3_errors`)."""
        return self._translator.around(action, key)

    def _confirm_bucket(self) -> None:
        """A HEAD 404 has no body, so a missing key and a missing bucket look alike. Ask once."""
        if self._bucket_confirmed:
            return
        with self._errors("checking the bucket of", None):
            try:
                self._client.head_bucket(Bucket=self.bucket)
            except ClientError as exc:
                if error_code(exc) in ("404", "NoSuchBucket", "NotFound"):
                    raise self._translator.missing_bucket(exc) from exc
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
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self._root.full_key(key), "Body": bytes(data)}
        if if_absent:
            kwargs["IfNoneMatch"] = "*"
        elif if_match is not None:
            kwargs["IfMatch"] = if_match
        with self._errors("writing", key):
            try:
                response = self._client.put_object(**kwargs)
            except ClientError as exc:
                if not lost_condition(exc):
                    raise
                current = self.get_if_exists(key) if if_absent or retried(exc) else None
                if current is not None and retried(exc) and current[0] == bytes(data):
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
                response = self._client.get_object(Bucket=self.bucket, Key=self._root.full_key(key))
            except ClientError as exc:
                if error_code(exc) in NOT_FOUND_CODES:
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
                self._client.head_object(Bucket=self.bucket, Key=self._root.full_key(key))
            except ClientError as exc:
                if error_code(exc) in NOT_FOUND_CODES:
                    self._confirm_bucket()
                    return False
                raise
        return True

    def copy_from(self, source: BlobStore, source_key: str, key: str, *, if_absent: bool = False) -> None:
        """A server-side copy when ``source`` is on the same endpoint with the same credentials
        (``CopyObject``, multipart above 8 MiB: the bytes never pass through this process).
        ``if_absent``: ``If-None-Match: *`` on the ``CopyObject`` (on ``CompleteMultipartUpload``
        above S3's 5 GiB limit for one copy): a key that exists, even one created meanwhile, is never
        overwritten (:class:`PreconditionFailedError`)."""
        if not (isinstance(source, S3BlobStore) and source.settings == self.settings):
            super().copy_from(source, source_key, key, if_absent=if_absent)
            return
        check_key(key)
        copy_source: CopySourceTypeDef = {"Bucket": source.bucket, "Key": source._root.full_key(check_key(source_key))}
        with self._errors("copying to", key):
            try:
                if if_absent:
                    self._copy_if_absent(copy_source, key)
                else:
                    self._client.copy(copy_source, self.bucket, self._root.full_key(key))
            except ClientError as exc:
                if error_code(exc) in NOT_FOUND_CODES:
                    raise BlobNotFoundError(f"{source.uri}/{source_key} does not exist") from exc
                if if_absent and lost_condition(exc):
                    raise PreconditionFailedError(f"{self.uri}/{key} already exists: not overwritten") from exc
                raise

    def _copy_if_absent(self, copy_source: CopySourceTypeDef, key: str) -> None:
        size = self._client.head_object(Bucket=copy_source["Bucket"], Key=copy_source["Key"])["ContentLength"]
        full_key = self._root.full_key(key)
        if size <= COPY_OBJECT_LIMIT:
            self._client.copy_object(CopySource=copy_source, Bucket=self.bucket, Key=full_key, IfNoneMatch="*")
            return
        upload = self._client.create_multipart_upload(Bucket=self.bucket, Key=full_key)["UploadId"]
        try:
            parts: builtins.list[CompletedPartTypeDef] = []
            for number, start in enumerate(range(0, size, COPY_PART_BYTES), start=1):
                end = min(start + COPY_PART_BYTES, size) - 1
                copied = self._client.upload_part_copy(
                    Bucket=self.bucket,
                    Key=full_key,
                    UploadId=upload,
                    PartNumber=number,
                    CopySource=copy_source,
                    CopySourceRange=f"bytes={start}-{end}",
                )
                parts.append({"ETag": copied["CopyPartResult"]["ETag"], "PartNumber": number})
            self._client.complete_multipart_upload(
                Bucket=self.bucket, Key=full_key, UploadId=upload, MultipartUpload={"Parts": parts}, IfNoneMatch="*"
            )
        except BaseException:
            with contextlib.suppress(ClientError):
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=full_key, UploadId=upload)
            raise

    def list(self, prefix: str = "") -> Iterator[BlobInfo]:
        """Every object under ``prefix``, in key order, one ``ListObjectsV2`` per ``page_size``
        keys. Pages are fetched lazily as the iterator advances."""
        return s3_bulk.list_objects(self._root, prefix)

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        """Names of the immediate sub-directories of ``prefix`` (``ListObjectsV2`` with
        ``Delimiter='/'``, paginated), sorted."""
        return s3_bulk.list_dirs(self._root, prefix)

    def delete_many(self, keys: Iterable[str]) -> builtins.list[str]:
        """Delete ``keys`` with ``DeleteObjects``, 1000 per request. Idempotent: missing keys
        count as deleted. If S3 reports a per-key failure, the other batches still run and then
        :class:`StoreUnavailableError` (``access_denied``) (all failures were denials) or
        :class:`StoreUnavailableError` is raised naming the failed keys; nothing is retried."""
        return s3_bulk.delete_keys(self._root, keys)

    def list_pending_uploads(self, prefix: str = "") -> builtins.list[PendingUpload]:
        """Incomplete multipart uploads under ``prefix`` (``ListMultipartUploads``, paginated),
        sorted by key then upload id. They hold storage until aborted."""
        return s3_bulk.list_pending_uploads(self._root, prefix)

    def abort_upload(self, upload: PendingUpload) -> None:
        """``AbortMultipartUpload``. Idempotent: an upload already gone is fine."""
        check_key(upload.key)
        with self._errors("aborting a multipart upload of", upload.key):
            try:
                self._client.abort_multipart_upload(
                    Bucket=self.bucket, Key=self._root.full_key(upload.key), UploadId=upload.upload_id
                )
            except ClientError as exc:
                if error_code(exc) not in ("NoSuchUpload", "404"):
                    raise

    def close(self) -> None:
        self._client.close()
