"""The requests of an :class:`~.s3.S3BlobStore` over many keys: paginated listings (objects,
sub-directories, incomplete multipart uploads) and batched deletes.

S3 pages a listing (``page_size`` keys per request, at most 1000) and deletes at most 1000 keys
per ``DeleteObjects``; the functions here hide both, and the quirks of compatible servers: a
multipart-upload listing paged by one marker only, and directories that outlive their last object.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from airflow_ckpt_provider.store.blobs.base import BlobInfo, PendingUpload, check_key, check_prefix
from airflow_ckpt_provider.store.blobs.s3_client import S3Root
from airflow_ckpt_provider.store.blobs.s3_errors import ACCESS_DENIED_CODES
from airflow_ckpt_provider.store.errors import CheckpointError, StoreUnavailableError

#: S3's hard limit of keys per ``DeleteObjects`` call.
DELETE_BATCH = 1000

#: ``Server`` headers of S3 servers with real directories that outlive their last object.
_SERVERS_KEEPING_EMPTY_DIRS = ("SeaweedFS",)


def list_objects(root: S3Root, prefix: str) -> Iterator[BlobInfo]:
    """Every object under ``prefix`` in key order; the prefix is checked now, pages are fetched lazily."""
    full_prefix = root.full_prefix(check_prefix(prefix))
    return _objects(root, prefix, full_prefix)


def _objects(root: S3Root, prefix: str, full_prefix: str) -> Iterator[BlobInfo]:
    for page in _object_pages(root, prefix, full_prefix):
        for obj in page.get("Contents", []):
            full = obj["Key"]
            if full.endswith("/"):  # a "directory marker" some tools create: not a blob
                continue
            yield BlobInfo(key=root.relative(full), size=int(obj.get("Size", 0)), etag=obj.get("ETag"))


def list_dirs(root: S3Root, prefix: str) -> list[str]:
    """Names of the immediate sub-directories of ``prefix`` (``Delimiter='/'``), sorted."""
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    full_prefix = root.full_prefix(check_prefix(prefix))
    names: set[str] = set()
    for page in _object_pages(root, prefix, full_prefix, delimiter="/"):
        for common in page.get("CommonPrefixes", []):
            name = common["Prefix"][len(full_prefix) :].rstrip("/")
            if name:
                names.add(name)
    return sorted(names)


def _object_pages(root: S3Root, prefix: str, full_prefix: str, delimiter: str | None = None) -> Iterator[Any]:
    """The ``ListObjectsV2`` pages under ``full_prefix``, following the continuation token."""
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"Bucket": root.bucket, "Prefix": full_prefix, "MaxKeys": root.page_size}
        if delimiter is not None:
            kwargs["Delimiter"] = delimiter
        if token:
            kwargs["ContinuationToken"] = token
        with root.errors.around("listing", prefix or None):
            page = root.client.list_objects_v2(**kwargs)
        yield page
        token = page.get("NextContinuationToken")
        if not page.get("IsTruncated") or not token:
            return


def list_pending_uploads(root: S3Root, prefix: str) -> list[PendingUpload]:
    """Incomplete multipart uploads under ``prefix``, sorted by key then upload id."""
    full_prefix = root.full_prefix(check_prefix(prefix))
    found: list[PendingUpload] = []
    key_marker: str | None = None
    upload_marker: str | None = None
    seen_markers: set[tuple[str | None, str | None]] = set()
    while True:
        kwargs: dict[str, Any] = {"Bucket": root.bucket, "Prefix": full_prefix, "MaxUploads": root.page_size}
        if key_marker:
            kwargs["KeyMarker"] = key_marker
        if upload_marker:
            kwargs["UploadIdMarker"] = upload_marker
        with root.errors.around("listing multipart uploads under", prefix or None):
            page = root.client.list_multipart_uploads(**kwargs)
        for upload in page.get("Uploads", []):
            found.append(PendingUpload(key=root.relative(upload["Key"]), upload_id=upload["UploadId"]))
        if not page.get("IsTruncated"):
            break
        # AWS pages with both markers; some compatible servers (SeaweedFS) only with the
        # upload-id marker. Follow whatever the server returns, and refuse to loop.
        key_marker = page.get("NextKeyMarker") or key_marker
        upload_marker = page.get("NextUploadIdMarker") or upload_marker
        if (key_marker, upload_marker) in seen_markers or not (key_marker or upload_marker):
            raise StoreUnavailableError(
                f"S3 returned a truncated multipart-upload listing for {root.uri} without a new marker: "
                "the server's ListMultipartUploads pagination is broken; list with a larger page_size",
                reason="unreachable",
            )
        seen_markers.add((key_marker, upload_marker))
    return sorted(set(found), key=lambda upload: (upload.key, upload.upload_id))


def delete_keys(root: S3Root, keys: Iterable[str]) -> list[str]:
    """Delete ``keys``, :data:`DELETE_BATCH` per request; raise naming the keys S3 failed to delete
    (after every batch ran). Returns the keys, each once, in their first order."""
    unique = list(dict.fromkeys(check_key(key) for key in keys))
    failed: list[tuple[str, str, str]] = []
    keeps_empty_dirs = False
    for start in range(0, len(unique), DELETE_BATCH):
        response = _delete_batch(root, unique[start : start + DELETE_BATCH])
        server = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("server", "")
        keeps_empty_dirs = keeps_empty_dirs or server.startswith(_SERVERS_KEEPING_EMPTY_DIRS)
        for error in response.get("Errors", []):
            failed.append((root.relative(error.get("Key", "")), error.get("Code", "?"), error.get("Message", "")))
    if failed:
        denied = all(code in ACCESS_DENIED_CODES for _, code, _ in failed)
        sample = ", ".join(f"{key} ({code}: {message})" for key, code, message in failed[:5])
        raise StoreUnavailableError(
            f"S3 could not delete {len(failed)} of {len(unique)} objects under {root.uri}: {sample}"
            + (" …" if len(failed) > 5 else "")
            + "; the others were deleted. Fix the cause (permissions, object lock) and run again: "
            "deleting is idempotent",
            reason="access_denied" if denied else "unreachable",
        )
    if keeps_empty_dirs:
        _prune_empty_dirs(root, unique)
    return unique


def _delete_batch(root: S3Root, keys: list[str]) -> Any:
    with root.errors.around("deleting under", None):
        return root.client.delete_objects(
            Bucket=root.bucket,
            Delete={"Objects": [{"Key": root.full_key(key)} for key in keys], "Quiet": True},
        )


def _prune_empty_dirs(root: S3Root, deleted: list[str]) -> None:
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
            _delete_batch(root, ordered[start : start + DELETE_BATCH])
