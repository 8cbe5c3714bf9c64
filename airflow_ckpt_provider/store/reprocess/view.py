"""One read of everything a reprocess plans from, and the units it can select.

A *unit* is one checkpoint that counts for the store's output (docs/reprocess.md,
"Vocabulary"): valid (manifest present), folded into the retain snapshot, or known only from
a commit's lineage (its data deleted by ``delete_after_success`` or an earlier ``clear``; its
keys are pending already, its committed files are not). A checkpoint known only from the lineage
whose files a later commit of the same job retracted (a re-run replaced them: ``replaced_files``,
store/rerun.py) no longer counts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_ckpt_provider.store.deletion_guard import canonical_uri
from airflow_ckpt_provider.store.errors import UnsupportedError
from airflow_ckpt_provider.store.model import Checkpoint, CheckpointStatus, FileMetadata
from airflow_ckpt_provider.store.reprocess.lineage import (
    LineageEntry,
    attributed_keys,
    read_lineage,
    read_snapshot_index,
)
from airflow_ckpt_provider.store.reprocess.records import PLAN_FIELD, Retractions
from airflow_ckpt_provider.store.rerun import REPLACED_FIELD, committed_output

if TYPE_CHECKING:
    from airflow_ckpt_provider.store.parts import StoreParts
    from airflow_ckpt_provider.store.store_state import StoreState

_COMMIT_RE = re.compile(r"^commits/(\d{8})\.json$")
_DONE_RE = re.compile(r"^commits/(\d{8})\.done\.json$")

VALID, FOLDED, COMMITTED_ONLY = "valid", "folded", "committed"


@dataclass(frozen=True)
class Unit:
    checkpoint_id: str
    epoch: int
    sealed_at: str
    source: str
    num_keys: int
    committed: bool
    files: tuple[FileMetadata, ...]
    commit: int | None = None  # the commit that first committed it (None: not committed)


@dataclass
class StoreView:
    """The store as a reprocess sees it when it plans (a consistent enough read: a maintenance
    action is fenced by its epoch, and the plan's fingerprint catches a store that moved)."""

    parts: StoreParts
    state: StoreState
    commits: tuple[int, ...]  # numbers of commit records, sorted
    done_commits: frozenset[int]
    retractions: Retractions
    _lineage: dict[int, dict[str, LineageEntry]] = field(default_factory=dict)

    @classmethod
    def read(cls, parts: StoreParts) -> StoreView:
        state = parts.reader.read(keep_inline=True)
        commits: list[int] = []
        done: set[int] = set()
        for info in parts.blobs.list("commits/"):
            if not info.size:  # an upload cut short: never written (CommitRecordReader._commit_record_keys)
                continue
            if match := _COMMIT_RE.match(info.key):
                commits.append(int(match.group(1)))
            elif match := _DONE_RE.match(info.key):
                done.add(int(match.group(1)))
        return cls(
            parts, state, tuple(sorted(commits)), frozenset(done), Retractions.read(parts.blobs, parts.context.map)
        )

    # ------------------------------------------------------------------ basics

    @property
    def latest_number(self) -> int:
        return self.state.latest.number if self.state.latest else 0

    @cached_property
    def valid(self) -> dict[str, Checkpoint]:
        return {c.checkpoint_id: c for c in self.state.valid}

    @cached_property
    def snapshot_index(self) -> dict[str, tuple[int, int]]:
        """Checkpoint id -> (epoch, keys) of every checkpoint whose keys the retain snapshot holds."""
        number = self.snapshot_number
        return {} if number is None else read_snapshot_index(self.parts.blobs, number)

    @property
    def snapshot_number(self) -> int | None:
        return None if self.state.snapshot is None else int(self.state.snapshot["snapshot"])

    @property
    def retracted(self) -> set[str]:
        return self.retractions.retracted_ids()

    @cached_property
    def replaced_paths(self) -> set[str]:
        """Output paths (canonical) a later commit of the same job retracted and no commit named again."""
        records = self.parts.reader.commits.commit_records()
        replaced = {canonical_uri(str(p)) for r in records for p in r.get(REPLACED_FIELD) or []}
        return replaced - committed_output(records, canonical_uri) if replaced else set()

    def maintenance_plan(self) -> dict[str, Any] | None:
        """The plan of the latest epoch if it is a maintenance epoch (one GET), else None."""
        latest = self.state.latest
        if latest is None or not latest.metadata.get(PLAN_FIELD):
            return None
        record = self.parts.context.read_json(f"epochs/{latest.number:08d}.json")
        plan = record.get(PLAN_FIELD)
        return plan if isinstance(plan, dict) else None

    def commit_before(self, number: int) -> int:
        """The newest commit older than ``number`` (0 if none)."""
        older = [c for c in self.commits if c < number]
        return older[-1] if older else 0

    # ------------------------------------------------------------------ lineage

    def lineage(self, commit: int) -> dict[str, LineageEntry]:
        if commit not in self._lineage:
            self._lineage[commit] = read_lineage(self.parts.blobs, commit)
        return self._lineage[commit]

    def lineages(self, commits: Iterable[int]) -> dict[str, LineageEntry]:
        """Lineage entries of ``commits``, the first commit of each checkpoint winning."""
        wanted = sorted(set(commits))
        missing = [c for c in wanted if c not in self._lineage]
        for commit, found in zip(
            missing, self.parts.context.map(lambda c: read_lineage(self.parts.blobs, c), missing), strict=True
        ):
            self._lineage[commit] = found
        merged: dict[str, LineageEntry] = {}
        for commit in wanted:
            for checkpoint_id, entry in self.lineage(commit).items():
                merged.setdefault(checkpoint_id, entry)
        return merged

    def committed_in(self, epoch: int) -> int | None:
        """The commit that first committed a checkpoint sealed in ``epoch`` and valid since."""
        newer = [c for c in self.commits if c >= epoch]
        return newer[0] if newer else None

    # ------------------------------------------------------------------ units

    def unit_of_valid(self, checkpoint: Checkpoint, files: tuple[FileMetadata, ...]) -> Unit:
        return Unit(
            checkpoint_id=checkpoint.checkpoint_id,
            epoch=checkpoint.epoch,
            sealed_at=checkpoint.sealed_at,
            source=VALID,
            num_keys=checkpoint.num_keys,
            committed=checkpoint.status is CheckpointStatus.COMMITTED,
            files=files,
            commit=self.committed_in(checkpoint.epoch) if checkpoint.status is CheckpointStatus.COMMITTED else None,
        )

    def unit_of_entry(self, entry: LineageEntry) -> Unit | None:
        """The unit a lineage entry stands for now, or None if it no longer counts."""
        if entry.checkpoint_id in self.valid or entry.checkpoint_id in self.retracted:
            return None
        folded = self.snapshot_index.get(entry.checkpoint_id)
        files = entry.files
        if not folded and files and self.replaced_paths:
            files = tuple(f for f in files if canonical_uri(f.path) not in self.replaced_paths)
            if not files:
                return None  # a re-run of its job replaced its output: nothing of it is committed any more
        return Unit(
            checkpoint_id=entry.checkpoint_id,
            epoch=entry.epoch,
            sealed_at=entry.sealed_at,
            source=FOLDED if folded else COMMITTED_ONLY,
            num_keys=folded[1] if folded else 0,
            committed=True,
            files=files,
            commit=entry.commit,
        )

    def materialize(self, checkpoint_ids: Iterable[str], epochs: dict[str, int]) -> list[Unit]:
        """Units for the ids a selection picked. ``epochs``: sealing epochs known for ids not valid."""
        ids = sorted(set(checkpoint_ids))
        valid = [self.valid[i] for i in ids if i in self.valid]
        files_by_id = self.parts.reader.files.files_by_checkpoint(valid)
        units = [self.unit_of_valid(c, tuple(files_by_id[c.checkpoint_id])) for c in valid]
        others = [i for i in ids if i not in self.valid]
        commits = {self.committed_in(epochs[i]) for i in others if i in epochs}
        entries = self.lineages(c for c in commits if c is not None)
        for checkpoint_id in others:
            entry = entries.get(checkpoint_id)
            unit = None if entry is None else self.unit_of_entry(entry)
            if unit is None:
                raise UnsupportedError(
                    f"checkpoint {checkpoint_id} of {self.parts.uri} was compacted without a record of its "
                    "files (an earlier version, or a damaged lineage): it cannot be reprocessed alone. "
                    "Nothing was changed; `airflow-ckpt check` tells more",
                    reason="selection_unavailable",
                )
            units.append(unit)
        return sorted(units, key=lambda u: (u.epoch, u.checkpoint_id))

    # ------------------------------------------------------------------ keys

    def key_type(self) -> str | None:
        types = {c.key_type for c in self.state.valid if c.key_type}
        if self.state.snapshot and self.state.snapshot.get("key_type"):
            types.add(str(self.state.snapshot["key_type"]))
        return types.pop() if len(types) == 1 else (None if not types else ",".join(sorted(types)))

    def attributed_keys(self) -> pa.Table:
        """Every done key with the checkpoint and epoch it belongs to (snapshot + valid checkpoints)."""
        return attributed_keys(self.parts.context, self.parts.reader, self.state, self.state.valid)
