"""Records shared by the store's concerns: the JSON codec, timestamps, and in-memory records.

``PendingCheckpoint`` is what a writer staged but has not sealed; ``Intents`` is what
writers recorded before creating output files (exact paths and name patterns).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from airflow_ckpt_provider.store.model import CommitResult, FileMetadata


def now() -> str:
    """The current UTC time as the store writes it (ISO 8601, milliseconds, ``Z``)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def dumps(data: Any) -> bytes:
    """A record's bytes: compact, sorted JSON (the same record always gives the same bytes)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def record_time(data: bytes) -> dt.datetime | None:
    """When a record was written (its first timestamp field), or None if it says nothing readable."""
    try:
        record = json.loads(data)
    except ValueError:
        return None
    for field_name in ("ended_at", "created_at", "sealed_at", "at"):
        value = record.get(field_name) if isinstance(record, dict) else None
        if isinstance(value, str):
            try:
                return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                return None
    return None


@dataclass(frozen=True)
class NamePattern:
    """A write's intent for every file under ``root`` whose name holds ``marker`` (a native Spark write)."""

    root: str
    marker: str
    checkpoint_id: str
    epoch: int | None

    def matches(self, path: str) -> bool:
        if not path.startswith(self.root.rstrip("/") + "/"):
            return False
        return self.marker in path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Intents:
    """Every intent record: exact output paths (canonical), and name patterns of native writes.

    ``rejected``: (checkpoint id, why) of records that name nothing usable: a path that is not
    a plain location, a name marker too short to be unique. They are never acted on.
    """

    paths: dict[str, tuple[str, int | None]]
    patterns: tuple[NamePattern, ...]
    rejected: tuple[tuple[str, str], ...] = ()

    def owner(self, path: str) -> tuple[str, int | None] | None:
        """Who intended to write ``path``: (checkpoint id, epoch), or None."""
        found = self.paths.get(path)
        if found is not None:
            return found
        for pattern in self.patterns:
            if pattern.matches(path):
                return pattern.checkpoint_id, pattern.epoch
        return None


@dataclass
class PendingCheckpoint:
    """What this process staged into a checkpoint that it has not sealed yet."""

    created_at: str = field(default_factory=now)
    key_parts: list[str] = field(default_factory=list)
    file_parts: list[str] = field(default_factory=list)
    intent_parts: int = 0
    num_keys: int = 0
    key_type: str | None = None
    num_files: int = 0
    num_bytes: int = 0
    num_rows: int = 0
    poisoned: bool = False
    inline_keys: list[pa.Array] | None = field(default_factory=list)
    inline_files: list[FileMetadata] | None = field(default_factory=list)


def commit_result_from_json(data: Mapping[str, Any], *, already: bool) -> CommitResult:
    """The result a finished commit recorded in ``commits/{n}.done.json``."""
    return CommitResult(
        epoch=int(data["epoch"]),
        committed_checkpoints=tuple(data["committed_checkpoints"]),
        committed_files=tuple(FileMetadata.from_json(f) for f in data["committed_files"]),
        deleted_files=tuple(data["deleted_files"]),
        deleted_checkpoints=tuple(data["deleted_checkpoints"]),
        aborted_uploads=tuple(data.get("aborted_uploads", ())),
        unknown_files=tuple(data.get("unknown_files", ())),
        kept_unprovable=tuple(data.get("kept_unprovable", ())),
        bytes_freed=int(data.get("bytes_freed", 0)),
        degraded=bool(data.get("degraded", False)),
        already_committed=already,
        output_roots=tuple(data.get("output_roots", ())),
        refused_records=tuple(data.get("refused_records", ())),
        undeclared_output_files=tuple(data.get("undeclared_output_files", ())),
        replaced_files=tuple(data.get("replaced_files", ())),
        committed_keys=int(data.get("committed_keys", 0)),
        kept_earlier_files=tuple(data.get("kept_earlier_files", ())),
    )
