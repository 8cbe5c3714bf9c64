"""What a reprocess, rewind, undo or purge will do (``ReprocessPlan``: the checkpoints, keys and
exact files, each with where it goes) and what it did (``ReprocessResult``).

A plan is computed without changing anything (:mod:`.planner`), shown to a person, confirmed by
its fingerprint, and carried whole by the maintenance epoch record, so an interrupted action
resumes from it; all are immutable and JSON-round-trippable (docs/reprocess.md, "Records").
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_ckpt_provider.store.reprocess.model import PURGE, QUARANTINE, REWIND, UNDO, Selection


@dataclass(frozen=True)
class PlannedFile:
    """An output file a reprocess retracts, and where it goes (a key under the store root)."""

    path: str
    size_bytes: int
    num_rows: int
    checkpoint_id: str
    quarantine: str
    present: bool = True  # False: already gone from the output when the plan was made

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlannedFile:
        return cls(
            path=str(data["path"]),
            size_bytes=int(data["size_bytes"]),
            num_rows=int(data.get("num_rows", 0)),
            checkpoint_id=str(data.get("checkpoint_id", "")),
            quarantine=str(data["quarantine"]),
            present=bool(data.get("present", True)),
        )


@dataclass(frozen=True)
class PreviousState:
    """The store before the reprocess: what an undo restores."""

    epoch: int | None
    status: str | None
    valid: tuple[str, ...]
    snapshot: int | None

    def to_json(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "status": self.status, "valid": list(self.valid), "snapshot": self.snapshot}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PreviousState:
        return cls(
            epoch=None if data.get("epoch") is None else int(data["epoch"]),
            status=data.get("status"),
            valid=tuple(str(i) for i in data.get("valid") or ()),
            snapshot=None if data.get("snapshot") is None else int(data["snapshot"]),
        )


@dataclass(frozen=True)
class ReprocessPlan:
    """What a reprocess, rewind, undo or purge will do, computed without changing anything.

    ``epoch``: the store's latest epoch when the plan was made (the action refuses if it moved on);
    ``new_epoch``: the maintenance epoch the action will open (None when it needs none).
    ``checkpoints``: the units made pending; ``keys``: how many keys become pending; ``files``: the
    exact output files and their quarantine keys; ``refused_paths``: files the store's records name
    outside the store root and the output roots (never touched; the action refuses while any).
    """

    action: str
    store_uri: str
    epoch: int | None
    new_epoch: int | None
    selection: Selection | None
    to_commit: int | None
    mode: str
    checkpoints: tuple[str, ...]
    committed_checkpoints: int
    keys: int
    files: tuple[PlannedFile, ...]
    previous: PreviousState
    new_base: tuple[str, ...]
    snapshot_drop: tuple[str, ...]
    snapshot_from: int | None
    snapshot_keys: int | None
    output_roots: tuple[str, ...]
    refused_paths: tuple[str, ...] = ()
    target: int | None = None  # undo / purge: the reprocess they act on
    warnings: tuple[str, ...] = ()
    requested_by: str | None = None
    created_at: str | None = None

    @property
    def bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def rows(self) -> int:
        return sum(f.num_rows for f in self.files)

    @property
    def missing_files(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files if not f.present)

    @property
    def nothing_to_do(self) -> bool:
        return not (self.checkpoints or self.files or self.snapshot_drop)

    def _action_fields(self) -> dict[str, Any]:
        """Which action on what: the fields of the fingerprint that :meth:`to_json` shows as they are."""
        return {
            "action": self.action,
            "epoch": self.epoch,
            "new_epoch": self.new_epoch,
            "selection": None if self.selection is None else self.selection.to_json(),
            "to_commit": self.to_commit,
            "target": self.target,
            "mode": self.mode,
        }

    @property
    def fingerprint(self) -> str:
        """What the person confirmed: equal fingerprints, equal actions (hex sha256)."""
        essence = {
            **self._action_fields(),
            "new_base": list(self.new_base),
            "snapshot_drop": list(self.snapshot_drop),
            "files": [[f.path, f.size_bytes] for f in self.files],
        }
        return hashlib.sha256(json.dumps(essence, sort_keys=True, default=str).encode()).hexdigest()

    def describe(self, *, max_files: int = 20) -> str:
        """What a person reads before confirming: counts, then the exact files."""
        if self.nothing_to_do and not self.refused_paths:
            what = {REWIND: f"rewind to commit {self.to_commit}", UNDO: "undo", PURGE: "purge"}.get(
                self.action, "reprocess"
            )
            return f"Nothing to {what} in {self.store_uri}."
        lines = [self._headline()]
        if self.files:
            lines.append("Files:")
            lines.extend(f"  {f.path}{'' if f.present else '  (already missing)'}" for f in self.files[:max_files])
            if len(self.files) > max_files:
                lines.append(f"  … and {len(self.files) - max_files} more")
        if self.refused_paths:
            lines.append(
                "Refused: the store's records name files outside its root and the output roots, or reached "
                "through a symbolic link; they are never touched, and the action is refused while any is selected:"
            )
            lines.extend(f"  {p}" for p in self.refused_paths)
        lines.extend(f"Warning: {w}" for w in self.warnings)
        return "\n".join(lines)

    def _headline(self) -> str:
        size = _human_bytes(self.bytes)
        where = (
            f"move them to {self.store_uri}/quarantine/{self.new_epoch:08d}/ (undo possible until the next run; "
            "purge deletes them)"
            if self.mode == QUARANTINE and self.new_epoch is not None
            else "DELETE them (no undo)"
        )
        if self.action == UNDO:
            return (
                f"Undo reprocess {self.target} of {self.store_uri}: {len(self.checkpoints)} checkpoint(s) "
                f"({self.keys} key(s)) become done again and {len(self.files)} file(s), {size}, are copied "
                "back to the output."
            )
        if self.action == PURGE:
            return (
                f"Purge the quarantine of reprocess {self.target} of {self.store_uri}: delete "
                f"{len(self.files)} file(s), {size}, for good."
            )
        head = (
            f"Rewind {self.store_uri} to commit {self.to_commit}"
            if self.action == REWIND
            else f"Reprocess {self.selection.describe() if self.selection else ''} in {self.store_uri}"
        )
        return (
            f"{head}: {len(self.checkpoints)} checkpoint(s) ({self.committed_checkpoints} committed) become "
            f"pending, {self.keys} key(s) will be processed by the next run; their {len(self.files)} "
            f"file(s), {size}, leave the output: {where}."
            + (f" Output roots touched: {', '.join(self.output_roots)}." if self.output_roots else "")
        )

    def to_json(self, *, max_files: int | None = None) -> dict[str, Any]:
        files = self.files if max_files is None else self.files[:max_files]
        return {
            **self._action_fields(),
            "store_uri": self.store_uri,
            "checkpoints": list(self.checkpoints),
            "committed_checkpoints": self.committed_checkpoints,
            "keys": self.keys,
            "files": [f.to_json() for f in files],
            "file_count": len(self.files),
            "bytes": self.bytes,
            "rows": self.rows,
            "missing_files": list(self.missing_files),
            "refused_paths": list(self.refused_paths),
            "output_roots": list(self.output_roots),
            "warnings": list(self.warnings),
            "previous": self.previous.to_json(),
            "new_base": list(self.new_base),
            "snapshot_drop": list(self.snapshot_drop),
            "snapshot_from": self.snapshot_from,
            "snapshot_keys": self.snapshot_keys,
            "requested_by": self.requested_by,
            "created_at": self.created_at,
            "fingerprint": self.fingerprint,
            "nothing_to_do": self.nothing_to_do,
            "description": self.describe(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReprocessPlan:
        return cls(
            action=str(data["action"]),
            store_uri=str(data.get("store_uri", "")),
            epoch=None if data.get("epoch") is None else int(data["epoch"]),
            new_epoch=None if data.get("new_epoch") is None else int(data["new_epoch"]),
            selection=None if data.get("selection") is None else Selection.from_json(data["selection"]),
            to_commit=None if data.get("to_commit") is None else int(data["to_commit"]),
            mode=str(data.get("mode", QUARANTINE)),
            checkpoints=tuple(str(i) for i in data.get("checkpoints") or ()),
            committed_checkpoints=int(data.get("committed_checkpoints", 0)),
            keys=int(data.get("keys", 0)),
            files=tuple(PlannedFile.from_json(f) for f in data.get("files") or ()),
            previous=PreviousState.from_json(data.get("previous") or {}),
            new_base=tuple(str(i) for i in data.get("new_base") or ()),
            snapshot_drop=tuple(str(i) for i in data.get("snapshot_drop") or ()),
            snapshot_from=None if data.get("snapshot_from") is None else int(data["snapshot_from"]),
            snapshot_keys=None if data.get("snapshot_keys") is None else int(data["snapshot_keys"]),
            output_roots=tuple(str(r) for r in data.get("output_roots") or ()),
            refused_paths=tuple(str(p) for p in data.get("refused_paths") or ()),
            target=None if data.get("target") is None else int(data["target"]),
            warnings=tuple(str(w) for w in data.get("warnings") or ()),
            requested_by=data.get("requested_by"),
            created_at=data.get("created_at"),
        )


@dataclass(frozen=True)
class ReprocessResult:
    """What an action did. ``epoch``: the maintenance epoch it opened (None: nothing to do, or a
    purge that needed no fence); ``resumed``: it finished an interrupted run of the same action."""

    action: str
    epoch: int | None
    plan: ReprocessPlan
    moved: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    restored: tuple[str, ...] = ()
    purged: tuple[str, ...] = ()
    resumed: bool = False

    def summary(self) -> dict[str, Any]:
        """Counts only: safe for XCom, logs and audit entries."""
        return {
            "action": self.action,
            "epoch": self.epoch,
            "previous_epoch": self.plan.epoch,
            "target": self.plan.target,
            "to_commit": self.plan.to_commit,
            "mode": self.plan.mode,
            "checkpoints": len(self.plan.checkpoints),
            "keys": self.plan.keys,
            "files": len(self.plan.files),
            "bytes": self.plan.bytes,
            "moved": len(self.moved),
            "deleted": len(self.deleted),
            "missing": len(self.missing),
            "restored": len(self.restored),
            "purged": len(self.purged),
            "resumed": self.resumed,
        }

    def to_json(self) -> dict[str, Any]:
        return self.summary() | {
            "plan": self.plan.to_json(),
            "moved_files": list(self.moved),
            "deleted_files": list(self.deleted),
            "missing_files": list(self.missing),
            "restored_files": list(self.restored),
            "purged_files": list(self.purged),
        }


def _human_bytes(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
