"""How store failures are told to a person, and what must never reach the page: credentials.

Every message shown by the Checkpoints view passes through :func:`scrub`: URIs lose their
user-info and query, the store's own secret option values are masked, and so is whatever
Airflow's secrets masker knows. A failure becomes a :class:`StoreProblem` (an HTTP status
and one sentence that says what to do), never a stack trace; nothing is deleted then.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from airflow_ckpt_provider.display.redaction import without_uri_userinfo
from airflow_ckpt_provider.hooks.checkpoint import seen_secrets
from airflow_ckpt_provider.store.errors import (
    CheckpointError,
    CorruptCheckpointError,
    EpochConflictError,
    InvalidArgumentError,
    NotFoundError,
    RefusedError,
    StoreUnavailableError,
)
from airflow_ckpt_provider.store.opener import SECRET_OPTIONS

log = logging.getLogger(__name__)


def display_uri(uri: str) -> str:
    """``uri`` as anyone who can read the DAG may see it: without user-info (and, for web URLs,
    without query or fragment). ``s3://`` and ``file://`` URIs are kept verbatim otherwise: there
    '?' and '#' belong to the key (file URIs of this provider escape them), so cutting them off
    would name another store."""
    uri = without_uri_userinfo(uri)
    if uri.startswith(("s3://", "s3a://", "file:")):
        # Except a pre-signed URL's query pasted onto an S3 URI: its signature is a credential.
        return _PRESIGNED_QUERY.sub("", uri)
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "<unparseable store URI>"
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


_PRESIGNED_QUERY = re.compile(r"\?[^?]*x-amz-.*$", re.IGNORECASE)
# Query strings of web URLs (pre-signed URLs carry signatures there). Not of s3:// or file://
# URIs: there a '?' is part of the key or path (file URIs of this provider escape it anyway).
_URI_QUERY = re.compile(r"(\bhttps?://[^\s'\"?]*)\?[^\s'\"]*")
# A pre-signed URL's query pasted onto an s3:// URI: its signature is a credential.
_S3_PRESIGNED_QUERY = re.compile(r"(\bs3a?://[^\s'\"?]*)\?[^\s'\"]*x-amz-[^\s'\"]*", re.IGNORECASE)


def scrub(message: str, secrets: Iterable[str] = ()) -> str:
    """Remove secrets from a message: URI credentials and queries, ``secrets``, and every store
    credential a :class:`CheckpointHook` of this process has read (connection keys, session tokens).

    Airflow's own masker has no public call that redacts a string; the hook registers each value
    with it (``mask_secret``, for logs) and in :func:`seen_secrets` (for this).
    """
    message = _URI_QUERY.sub(r"\1", without_uri_userinfo(message))
    message = _S3_PRESIGNED_QUERY.sub(r"\1", message)
    # Longest first: a secret that contains another is replaced whole.
    for secret in sorted({*secrets, *seen_secrets()}, key=len, reverse=True):
        if secret and len(secret) >= 4:
            message = message.replace(secret, "***")
    return message


def secret_values(options: Mapping[str, Any]) -> list[str]:
    return [str(options[k]) for k in SECRET_OPTIONS if options.get(k)]


@dataclass(frozen=True)
class StoreProblem(Exception):
    """A store failure told as an HTTP status and one sentence (no stack trace, nothing deleted)."""

    status_code: int
    kind: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"error": self.kind, "detail": self.message}


def uri_secrets(uri: str) -> list[str]:
    """The parts of ``uri`` that may hold credentials (user-info, query), to scrub wherever they appear."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return [uri]
    found = [parts.query] if parts.query else []
    if "@" in parts.netloc:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        found += [userinfo, *userinfo.split(":")]
    return sorted(found, key=len, reverse=True)


def problem_from(exc: BaseException, store_uri: str, secrets: Iterable[str] = ()) -> StoreProblem:
    """Map an exception raised while reading or changing a store to what the view says."""
    where = display_uri(store_uri)
    secrets = [*uri_secrets(store_uri), *secrets]
    text = scrub(" ".join(str(exc).split()), secrets)
    reason = getattr(exc, "reason", "")
    if (isinstance(exc, StoreUnavailableError) and reason == "connection") or (
        type(exc).__name__ == "AirflowNotFoundException"
    ):
        return StoreProblem(
            503,
            "store_unavailable",
            f"The checkpoint store {where} cannot be opened: {text}. Nothing was changed. "
            "Define the connection (or fix [ckpt] aws_conn_id), then reload.",
        )
    if isinstance(exc, StoreUnavailableError):
        return StoreProblem(
            503,
            "store_unavailable",
            f"The checkpoint store {where} cannot be reached: {text}. Nothing was changed. "
            "Check the store's connection and credentials, then reload.",
        )
    if isinstance(exc, CorruptCheckpointError) or (
        isinstance(exc, InvalidArgumentError) and reason == "key_type_mismatch"
    ):
        return StoreProblem(
            422,
            "store_corrupt",
            f"The checkpoint store {where} holds data that cannot be read: {text}. Nothing was changed. "
            "Run `airflow-ckpt check` on it for a full report.",
        )
    if isinstance(exc, NotFoundError) and reason == "store_location":
        return StoreProblem(422, "store_location_unknown", f"{text}")
    if (isinstance(exc, InvalidArgumentError) and reason in ("store_uri", "path_outside_root")) or (
        isinstance(exc, RefusedError) and reason == "unsafe_path"
    ):
        return StoreProblem(422, "store_misconfigured", f"The checkpoint store location is not valid: {text}")
    if isinstance(exc, EpochConflictError) and reason in ("epoch_open", "reprocess_in_progress", "mapped_instance"):
        return StoreProblem(409, "store_busy", f"{text}")
    if isinstance(exc, CheckpointError):
        return StoreProblem(422, "store_error", f"{text}")
    # Not a typed store error: a bug or an unmapped client error. Log it fully, show one line.
    log.exception("unexpected error on checkpoint store %s", where)
    return StoreProblem(
        500,
        "internal_error",
        f"Unexpected error while reading {where} ({type(exc).__name__}). Nothing was changed; "
        "the API server log has the details.",
    )
