"""File URIs: the keys of file-level resume, and the Arrow filesystems that read and write them.

Spark has no S3 connector here, so Parquet on ``s3://`` is read and written by
pyarrow on the executors, with the store's endpoint and credentials. ``s3a://``
and ``s3n://`` name the same objects as ``s3://`` and get the same key.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from airflow_ckpt_provider.store.errors import InvalidArgumentError

_S3_SCHEMES = ("s3", "s3a", "s3n")


def file_key(path: str) -> str:
    """The normalized URI of an input file: its key for file-level resume.

    ``/data/a.parquet``, ``file:/data/a.parquet`` and ``file:///data/./a.parquet``
    are one key (``file:///data/a.parquet``); ``s3a://b/k`` and ``s3://b/k`` are
    one key (``s3://b/k``). Relative local paths resolve against the working directory.
    """
    if not isinstance(path, str) or not path.strip():
        raise InvalidArgumentError(
            f"{path!r} is not a file path: give a local path, file:///abs/path or s3://bucket/key", reason="path"
        )
    path = path.strip()
    parsed = urlparse(path)
    scheme = parsed.scheme.lower()
    if scheme in _S3_SCHEMES:
        if not parsed.netloc:
            raise InvalidArgumentError(f"{path!r} names no bucket: s3://bucket/key", reason="path")
        key = posixpath.normpath("/" + parsed.path.lstrip("/"))
        return f"s3://{parsed.netloc}{key}"
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidArgumentError(f"{path!r}: file URIs must be local (file:///absolute/path)", reason="path")
        return "file://" + os.path.normpath(unquote(parsed.path) or "/")
    if scheme and len(scheme) > 1:  # another filesystem (hdfs://, gs://...): normalize the path only
        return f"{scheme}://{parsed.netloc}{posixpath.normpath('/' + parsed.path.lstrip('/'))}"
    return "file://" + os.path.normpath(os.path.abspath(path))


def is_s3(uri: str) -> bool:
    return urlparse(uri).scheme.lower() in _S3_SCHEMES


def arrow_path(uri: str) -> str:
    """The path of ``uri`` inside its Arrow filesystem (``bucket/key`` for S3, ``/abs`` for local)."""
    key = file_key(uri)
    if key.startswith("s3://"):
        return key[len("s3://") :]
    if key.startswith("file://"):
        return key[len("file://") :]
    raise InvalidArgumentError(f"{uri!r}: only local paths and s3:// are supported for Parquet I/O", reason="store_uri")


def arrow_filesystem(uri: str, options: Mapping[str, Any]) -> pafs.FileSystem:
    """An Arrow filesystem for ``uri``, configured from store options (endpoint, region, credentials)."""
    if not is_s3(uri):
        if not file_key(uri).startswith("file://"):
            raise InvalidArgumentError(
                f"{uri!r}: only local paths and s3:// are supported for Parquet I/O", reason="store_uri"
            )
        return pafs.LocalFileSystem()
    kwargs: dict[str, Any] = {}
    endpoint = options.get("endpoint_url")
    if endpoint:
        parsed = urlparse(str(endpoint))
        kwargs["endpoint_override"] = parsed.netloc or parsed.path
        kwargs["scheme"] = parsed.scheme or "https"
    if options.get("region_name"):
        kwargs["region"] = str(options["region_name"])
    if options.get("aws_access_key_id"):
        kwargs["access_key"] = str(options["aws_access_key_id"])
        kwargs["secret_key"] = str(options.get("aws_secret_access_key") or "")
        if options.get("aws_session_token"):
            kwargs["session_token"] = str(options["aws_session_token"])
    timeout = options.get("timeout_seconds")
    if timeout:
        kwargs["connect_timeout"] = float(timeout)
        kwargs["request_timeout"] = float(timeout)
    # Path-style addressing works with every S3-compatible server; virtual-host needs DNS per bucket.
    kwargs["force_virtual_addressing"] = False
    return pafs.S3FileSystem(**kwargs)
