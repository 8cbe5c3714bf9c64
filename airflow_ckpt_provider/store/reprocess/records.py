"""The records a reprocess leaves in the store, and the one definition of committed output.

``retractions/{n:08d}.json`` is written when reprocess *n* finishes (its durable result: kept
like commit records); ``.undone.json`` and ``.purged.json`` mark what happened to it since.
The plan itself is in the maintenance epoch record ``epochs/{n:08d}.json`` (field
``maintenance``), the atomic intent (docs/reprocess.md, "Records").

Committed output = the files of every commit record minus the files of every retraction that is
not undone (paths are unique per task attempt, so order does not matter): ``check()``, the
commit's orphan cleanup and retention all use :func:`retracted_paths` through the store's
``_committed_paths``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_ckpt_provider.store.blobs.base import BlobStore
from airflow_ckpt_provider.store.errors import CorruptCheckpointError, corrupt_record
from airflow_ckpt_provider.store.reprocess.model import ReprocessRecord, Selection

PREFIX = "retractions/"
QUARANTINE_PREFIX = "quarantine/"
_RECORD_RE = re.compile(r"^retractions/(\d{8})\.json$")
_MARKER_RE = re.compile(r"^retractions/(\d{8})\.(undone|purged)\.json$")
#: Field of an epoch record holding a maintenance plan; metadata["maintenance"] flags the epoch cheaply.
PLAN_FIELD = "maintenance"


def record_key(epoch: int) -> str:
    return f"{PREFIX}{epoch:08d}.json"


def marker_key(epoch: int, marker: str) -> str:
    return f"{PREFIX}{epoch:08d}.{marker}.json"


def quarantine_prefix(epoch: int) -> str:
    return f"{QUARANTINE_PREFIX}{epoch:08d}/"


def _json(blobs: BlobStore, key: str, data: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise corrupt_record(blobs.child_uri(key), f"is corrupt or truncated ({exc})") from exc
    if not isinstance(parsed, dict):
        raise CorruptCheckpointError(f"{blobs.child_uri(key)} does not hold a JSON object", reason="corrupt")
    return parsed


@dataclass(frozen=True)
class Retractions:
    """Every finished reprocess record of a store, with its markers (one listing + one GET each)."""

    records: Mapping[int, Mapping[str, Any]]
    undone: frozenset[int]
    purged: frozenset[int]

    @classmethod
    def read(cls, blobs: BlobStore, map_fn: Any = None) -> Retractions:
        keys: list[str] = []
        undone: set[int] = set()
        purged: set[int] = set()
        for info in blobs.list(PREFIX):
            if _RECORD_RE.match(info.key):
                keys.append(info.key)
            elif match := _MARKER_RE.match(info.key):
                (undone if match.group(2) == "undone" else purged).add(int(match.group(1)))

        def load(key: str) -> tuple[int, dict[str, Any]]:
            return int(key[len(PREFIX) : len(PREFIX) + 8]), _json(blobs, key, blobs.get(key)[0])

        loaded = map_fn(load, keys) if map_fn is not None else [load(k) for k in keys]
        return cls(dict(loaded), frozenset(undone), frozenset(purged))

    def effective(self) -> list[Mapping[str, Any]]:
        """Records whose retraction holds (not undone)."""
        return [r for n, r in sorted(self.records.items()) if n not in self.undone]

    def retracted_paths(self) -> set[str]:
        return {str(f["path"]) for r in self.effective() for f in r.get("files", []) if f.get("outcome") != "refused"}

    def retracted_ids(self) -> set[str]:
        return {str(i) for r in self.effective() for i in r.get("checkpoints", [])}

    def as_records(self) -> list[ReprocessRecord]:
        return [record_from_json(n, r, n in self.undone, n in self.purged) for n, r in sorted(self.records.items())]


def record_from_json(epoch: int, data: Mapping[str, Any], undone: bool, purged: bool) -> ReprocessRecord:
    files = data.get("files") or []
    return ReprocessRecord(
        epoch=epoch,
        action=str(data.get("action", "reprocess")),
        mode=str(data.get("mode", "quarantine")),
        selection=None if data.get("selection") is None else Selection.from_json(data["selection"]),
        to_commit=data.get("to_commit"),
        requested_by=data.get("requested_by"),
        created_at=data.get("created_at"),
        finished_at=data.get("finished_at"),
        checkpoints=len(data.get("checkpoints") or []),
        keys=int(data.get("keys", 0)),
        files=len(files),
        bytes=sum(int(f.get("size_bytes", 0)) for f in files),
        paths=tuple(str(f["path"]) for f in files),
        undone=undone,
        purged=purged,
    )


def retracted_paths(blobs: BlobStore, map_fn: Any = None) -> set[str]:
    """Output paths retracted by a reprocess that is not undone (never committed output again)."""
    return Retractions.read(blobs, map_fn).retracted_paths()
