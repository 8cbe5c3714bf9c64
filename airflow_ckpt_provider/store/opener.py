"""``open_store``: a store from a URI and options (the only place that knows the backends)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_ckpt_provider.store.blobs.base import BlobStore
from airflow_ckpt_provider.store.errors import InvalidArgumentError
from airflow_ckpt_provider.store.store import CheckpointStore
from airflow_ckpt_provider.store.tail import DEFAULT_MAX_LOOSE

#: Options that configure the store itself rather than its blob backend.
STORE_OPTIONS = ("breaker_max_failures", "max_workers", "max_loose_manifests")
#: Options that hold secrets: never log them, never put them on a command line.
SECRET_OPTIONS = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")
_S3_OPTIONS = (
    "endpoint_url",
    "region_name",
    "timeout_seconds",
    "max_attempts",
    "max_pool_connections",
    "page_size",
    *SECRET_OPTIONS,
)


def open_blobs(uri: str, *, anchor: str | None = None, **options: Any) -> BlobStore:
    """The object layer rooted at ``uri`` (a store root or an output directory). ``anchor`` (local
    paths only): the directory at or above ``uri`` below which no symbolic link is followed (default:
    ``uri`` itself; store/blobs/local.py)."""
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidArgumentError(
            "a store URI is required: file:///absolute/path, /absolute/path or s3://bucket/prefix", reason="store_uri"
        )
    uri = uri.strip()
    if uri.startswith("s3://") or uri.startswith("s3a://"):
        if uri.startswith("s3a://"):
            uri = "s3://" + uri[len("s3a://") :]
        bucket = uri[len("s3://") :].split("/", 1)[0]
        if not bucket:
            raise InvalidArgumentError(
                f"{uri!r} names no bucket: use s3://bucket/prefix (or file:///absolute/path for a local store)",
                reason="store_uri",
            )
        from airflow_ckpt_provider.store.blobs.s3 import S3BlobStore

        s3_kwargs = {k: v for k, v in options.items() if k in _S3_OPTIONS and v is not None}
        if options.get("boto3_session") is not None:
            s3_kwargs["boto3_session"] = options["boto3_session"]
        return S3BlobStore(uri, **s3_kwargs)
    if uri.startswith("file:") or os.path.isabs(uri):
        from airflow_ckpt_provider.store.blobs.local import LocalBlobStore

        return LocalBlobStore(uri, anchor=anchor)
    scheme = uri.split("://", 1)[0] if "://" in uri else None
    raise InvalidArgumentError(
        f"{uri!r} is not a store URI"
        + (f" (scheme {scheme!r} is not supported)" if scheme else " (relative paths are ambiguous)")
        + ": use file:///absolute/path, /absolute/path or s3://bucket/prefix",
        reason="store_uri",
    )


def open_store(
    uri: str,
    *,
    wrap_blobs: Callable[[BlobStore], BlobStore] | None = None,
    trusted_output_roots: Sequence[str] | None = None,
    output_roots_declared_by: str | None = None,
    configured_output_roots: Sequence[str] | None = None,
    **options: Any,
) -> CheckpointStore:
    """Open the checkpoint store at ``uri``. Nothing is created until the first write.

    ``uri``: ``file:///abs/dir``, ``/abs/dir`` or ``s3://bucket/prefix``. Options:
    ``endpoint_url``, ``region_name``, ``aws_access_key_id``, ``aws_secret_access_key``,
    ``aws_session_token`` or ``boto3_session`` (S3); ``timeout_seconds`` (per request,
    default 10), ``max_attempts`` (retries, default 3), ``breaker_max_failures``
    (default 3), ``max_workers`` (parallel reads, default 16), ``max_loose_manifests``
    (the bound sealing tasks keep the loose manifests under, from 1 to 2,000, the default:
    it cannot be turned off, store/tail.py). ``wrap_blobs`` wraps the
    object layer of the store and of every output location it opens (the UI bounds its
    requests in time this way). ``trusted_output_roots``: the output roots the caller vouches
    for (the DAG's operators' ``output_roots``, or roots a person gave): what the store's own
    records declare is bounded by them, and with an empty list no output file is ever deleted;
    without them, recorded roots count only in the store's scheme and bucket (docs/security.md,
    "The trust model"). ``output_roots_declared_by``: who declares ``trusted_output_roots`` (e.g.
    ``DAG task 'd.commit'``), named when a deletion is refused. ``configured_output_roots`` (the
    ``[ckpt] trusted_output_roots`` option), used only without ``trusted_output_roots``: the
    store's recorded roots count where they lie under one of them, nothing else (a store whose
    records declare nothing gets nothing). Raises :class:`InvalidArgumentError` (``store_uri``),
    :class:`InvalidArgumentError` for an option out of its range; reachability errors surface on
    first use.
    """
    unknown = set(options) - set(STORE_OPTIONS) - set(_S3_OPTIONS) - {"boto3_session"}
    if unknown:
        raise InvalidArgumentError(f"unknown store options {sorted(unknown)}", reason="store_uri")

    def opener(output_uri: str, anchor: str | None = None) -> BlobStore:
        opened = open_blobs(output_uri, anchor=anchor, **options)
        return wrap_blobs(opened) if wrap_blobs is not None else opened

    blobs = opener(uri)
    serialisable = {k: v for k, v in options.items() if k != "boto3_session" and v is not None}

    return CheckpointStore(
        blobs,
        options=serialisable,
        # 0 is a value (refused by the breaker), not "unset".
        breaker_max_failures=int(options["breaker_max_failures"])
        if options.get("breaker_max_failures") is not None
        else 3,
        max_workers=int(options.get("max_workers") or 16),
        blob_opener=opener,
        max_loose_manifests=options["max_loose_manifests"]
        if options.get("max_loose_manifests") is not None
        else DEFAULT_MAX_LOOSE,
        trusted_output_roots=trusted_output_roots,
        output_roots_declared_by=output_roots_declared_by,
        configured_output_roots=configured_output_roots,
    )


def public_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` without secrets: safe for logs, XCom and Spark confs."""
    return {k: v for k, v in options.items() if k not in SECRET_OPTIONS and k != "boto3_session"}


def secret_options(options: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k in SECRET_OPTIONS and v is not None}
