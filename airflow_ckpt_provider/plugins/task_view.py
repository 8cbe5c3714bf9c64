"""What the Checkpoints view shows of one store, and how store failures are told to a person.

The page and the JSON endpoint render the same :class:`TaskReport`, so what a test
reads from the API is what a person sees. Nothing here may carry a credential: URIs
lose their user-info and query, and error messages pass through Airflow's secrets
masker plus the store's own secret option values.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from airflow_ckpt_provider.display.deletion_preview import StoreContents, preview_clear, preview_discard
from airflow_ckpt_provider.store import CheckpointStore
from airflow_ckpt_provider.store.errors import (
    CheckpointError,
    CorruptCheckpointError,
    EpochConflictError,
    InvalidStoreUriError,
    KeyTypeMismatchError,
    PathOutsideRootError,
    StoreUnavailableError,
)
from airflow_ckpt_provider.store.opener import SECRET_OPTIONS

log = logging.getLogger(__name__)

#: The view lists at most this many checkpoints (newest first); the counts cover all.
MAX_CHECKPOINT_ROWS = 200


def display_uri(uri: str) -> str:
    """``uri`` without user-info, query or fragment: what may be shown to anyone who can read the DAG."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "<unparseable store URI>"
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


# user-info of any URI in a message (scheme://user:password@host) and query strings of
# object URIs (pre-signed URLs carry signatures there).
_URI_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s'\"@]+@")
_URI_QUERY = re.compile(r"(\b(?:s3a?|https?|file)://[^\s'\"?]*)\?[^\s'\"]*")


def scrub(message: str, secrets: Iterable[str] = ()) -> str:
    """Remove secrets from a message: URI credentials and queries, the store's secret option
    values, then whatever Airflow's masker knows (connection passwords it has seen)."""
    message = _URI_QUERY.sub(r"\1", _URI_USERINFO.sub(r"\1", message))
    for secret in secrets:
        if secret and len(secret) >= 4:
            message = message.replace(secret, "***")
    try:
        from airflow._shared.secrets_masker import redact

        message = str(redact(message))
    except ImportError:  # pragma: no cover - older layouts: the store values are scrubbed already
        pass
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
    text = scrub(" ".join(str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc).split()), secrets)
    if type(exc).__name__ == "AirflowNotFoundException":  # the store's connection is not defined
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
    if isinstance(exc, CorruptCheckpointError | KeyTypeMismatchError):
        return StoreProblem(
            422,
            "store_corrupt",
            f"The checkpoint store {where} holds data that cannot be read: {text}. Nothing was changed. "
            "Run `airflow-ckpt check` on it for a full report.",
        )
    if isinstance(exc, InvalidStoreUriError | PathOutsideRootError):
        return StoreProblem(422, "store_misconfigured", f"The checkpoint store location is not valid: {text}")
    if isinstance(exc, EpochConflictError):
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


@dataclass(frozen=True)
class TaskReport:
    """Everything the task-instance view shows about one store."""

    store_uri: str
    progress: dict[str, Any]
    epochs: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]
    checkpoint_count: int
    uncommitted_count: int
    previews: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "store_uri": self.store_uri,
            "progress": self.progress,
            "epochs": self.epochs,
            "checkpoints": self.checkpoints,
            "checkpoint_count": self.checkpoint_count,
            "uncommitted_count": self.uncommitted_count,
            "previews": self.previews,
        }


def _epoch_json(epoch: Any) -> dict[str, Any]:
    return {
        "number": epoch.number,
        "status": epoch.status.value,
        "degraded": epoch.degraded,
        "base_size": len(epoch.base),
        "base_snapshot": epoch.base_snapshot,
        "expected_partitions": epoch.expected_partitions,
        "owner": epoch.owner,
        "created_at": epoch.created_at,
        "ended_at": epoch.ended_at,
    }


def build_task_report(store: CheckpointStore) -> TaskReport:
    """Read the store (never changes it). Raises the store's typed errors."""
    uri = display_uri(store.uri)
    state = store.progress()
    contents = StoreContents.read(store, state)
    progress = state.to_json()
    progress["store_uri"] = uri
    progress["epoch"] = None if state.epoch is None else _epoch_json(state.epoch)
    epochs = [_epoch_json(e) for e in reversed(store.list_epochs())]
    checkpoints = sorted(contents.checkpoints, key=lambda c: c.sealed_at, reverse=True)
    rows = [
        {
            "checkpoint_id": c.checkpoint_id,
            "status": c.status.value,
            "valid": c.checkpoint_id in contents.valid_ids,
            "epoch": c.epoch,
            "partition": c.partition,
            "keys": c.num_keys,
            "files": c.num_files,
            "rows": c.num_rows,
            "bytes": c.num_bytes,
            "sealed_at": c.sealed_at,
        }
        for c in checkpoints[:MAX_CHECKPOINT_ROWS]
    ]
    previews = {}
    for name, make in (("clear", preview_clear), ("discard", preview_discard)):
        preview = make(contents).to_json()
        preview["store_uri"] = uri
        preview["description"] = preview["description"].replace(store.uri, uri)
        previews[name] = preview
    return TaskReport(
        store_uri=uri,
        progress=progress,
        epochs=epochs,
        checkpoints=rows,
        checkpoint_count=len(checkpoints),
        uncommitted_count=len(contents.uncommitted),
        previews=previews,
    )


def summary_of(store: CheckpointStore) -> dict[str, Any]:
    """The short form the DAG view lists per store (one ``progress()`` read)."""
    progress = store.progress()
    epoch = progress.epoch
    return {
        "epoch": None if epoch is None else epoch.number,
        "epoch_status": None if epoch is None else epoch.status.value,
        "degraded": bool(progress.degraded_epochs) or bool(epoch and epoch.degraded),
        "sealed_partitions": progress.sealed_partitions,
        "expected_partitions": progress.expected_partitions,
        "keys_done": progress.keys_done,
        "files": progress.files,
        "bytes": progress.bytes,
        "committed": progress.committed,
    }
