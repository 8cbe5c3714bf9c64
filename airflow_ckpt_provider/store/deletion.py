"""Deleting what the store and its writers made: output files writers recorded, and store records.

Every deletion of the store goes through this module (commit, retention, clearing; the orphan
sweep they share is ``store/sweep.py``), and every one passes the
:class:`~airflow_ckpt_provider.store.deletion_guard.DeletionGuard` first (docs/design.md,
invariant 10): output files only under the output roots declared when
epochs opened and only when a writer of this store recorded an intent for them (exact paths,
or a native write's name pattern); store records only by key under the store root. Deletes
go in batches of 1,000 keys (one S3 ``DeleteObjects`` each).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.store.blobs.base import BlobNotFoundError, BlobStore, PendingUpload
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.deletion_guard import (
    DeletionGuard,
    canonical_uri,
    name_marker_refusal,
    parse_location,
)
from airflow_ckpt_provider.store.errors import CorruptCheckpointError
from airflow_ckpt_provider.store.layout import checkpoint_prefixes, hidden, manifest_key
from airflow_ckpt_provider.store.listing import checkpoint_records
from airflow_ckpt_provider.store.records import Intents, NamePattern

if TYPE_CHECKING:
    from airflow_ckpt_provider.store.output_roots import OutputRoots
    from airflow_ckpt_provider.store.state import StateReader

log = logging.getLogger(__name__)

#: Keys per delete request (the S3 DeleteObjects limit).
DELETE_BATCH = 1000
#: Delete requests in flight at once: a DeleteObjects of 1,000 keys is heavy work for the server (seconds on a
#: busy one), so a cleanup of 100 batches overlaps a few, not as many as reads do.
DELETE_PARALLEL = 4


@dataclass
class Sweep:
    """What one sweep of output roots did."""

    deleted: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    #: Files under the roots that no writer of this store recorded: reported, never deleted.
    unknown: list[str] = field(default_factory=list)
    #: Files a record marked for deletion that the guard refused (kept).
    refused: list[str] = field(default_factory=list)
    bytes_freed: int = 0


@dataclass
class SweepPlan:
    """A listed, sorted sweep not run yet: per root, its blob store, the keys to delete and the
    uploads to abort; ``sweep`` holds what was reported while listing (unknown, refused, bytes)."""

    sweep: Sweep = field(default_factory=Sweep)
    roots: list[tuple[BlobStore, list[str], list[PendingUpload]]] = field(default_factory=list)

    @property
    def unknown(self) -> list[str]:
        return self.sweep.unknown


class StoreDeleter:
    """Reads the writers' intent records and deletes output files and store records."""

    def __init__(self, context: StoreContext, roots: OutputRoots, reader: StateReader) -> None:
        self._context = context
        self._blobs = context.blobs
        self._roots = roots
        self._reader = reader

    def intents(self, skip: Iterable[str] = (), extra: Iterable[Mapping[str, Any]] = ()) -> Intents:
        """Recorded output path → (checkpoint id, epoch) that intended to write it, and name patterns.

        ``skip``: checkpoints whose records are not needed (valid ones: their files are
        authoritative anyway), so a healthy commit reads almost no intent records.
        ``extra``: records read elsewhere (segments carry those of the checkpoints they hold).
        """
        skipped = set(skip)
        keys = [
            key
            for checkpoint_id, records in checkpoint_records(self._blobs).items()
            if checkpoint_id not in skipped
            for key in records
            if "/intents/" in key
        ]

        def load(key: str) -> dict[str, Any]:
            try:
                return self._context.read_json(key)
            except (BlobNotFoundError, CorruptCheckpointError) as exc:
                # A torn intent record names nothing we could act on; keep going (check() reports it).
                log.warning("ignoring unreadable intent record %s: %s", key, exc)
                return {}

        out: dict[str, tuple[str, int | None]] = {}
        patterns: list[NamePattern] = []
        rejected: list[tuple[str, str]] = []
        # Records a segment carries (its checkpoints' directories are gone) come first, then loose ones.
        loaded: list[tuple[str | None, Mapping[str, Any]]] = [(None, dict(r)) for r in extra]
        loaded.extend(zip(keys, self._context.map(load, keys), strict=True))
        for key, record in loaded:
            if not record:
                continue
            checkpoint_id = str(record.get("checkpoint_id") or (key.split("/")[1] if key else ""))
            epoch = record.get("epoch") if isinstance(record.get("epoch"), int) else None
            paths = record.get("paths", [])
            for path in paths if isinstance(paths, list) else []:
                if parse_location(str(path)) is None:
                    rejected.append((checkpoint_id, f"intent path {path!r} is not a plain file:// or s3:// location"))
                    continue
                out[canonical_uri(str(path))] = (checkpoint_id, epoch)
            if record.get("name_marker") is not None or record.get("root") is not None:
                root = str(record.get("root") or "")
                reason = name_marker_refusal(record.get("name_marker"))
                if reason is None and parse_location(root) is None:
                    reason = f"name intent root {root!r} is not a plain file:// or s3:// location"
                if reason is not None:
                    rejected.append((checkpoint_id, reason))
                    continue
                patterns.append(
                    NamePattern(
                        root=canonical_uri(root).rstrip("/"),
                        marker=str(record["name_marker"]),
                        checkpoint_id=checkpoint_id,
                        epoch=epoch,
                    )
                )
        return Intents(out, tuple(patterns), tuple(rejected))

    # ------------------------------------------------------------------ output files

    def plan_sweep(
        self,
        guard: DeletionGuard,
        roots: Sequence[str],
        doomed: Mapping[str, str],
        known: set[str],
        doomed_by_name: Callable[[str], bool] = lambda path: False,
    ) -> SweepPlan:
        """List each output root once and sort what it holds: files in ``doomed`` (or that
        ``doomed_by_name`` picks) that ``guard`` allows are to be deleted; the refused ones and the
        unrecorded ones (not in ``known``) are reported. Deletes nothing: a caller can still refuse
        (the commit does, over unknown files) before :meth:`run_sweep`.

        ``roots``, ``doomed`` and ``known`` are canonical URIs (``deletion_guard.canonical_uri``);
        ``known``: paths that are authoritative or recorded, so not reported as unknown. A root the
        guard does not cover is not even listed.
        """
        plan = SweepPlan()
        covered = [r for r in dict.fromkeys(roots) if any(_covers(g, r) for g in guard.root_uris)]
        # Listing is recursive: a root under another root would list (and delete) twice.
        covered = [r for r in covered if not any(r != o and _covers(o, r) for o in covered)]
        for root in covered:
            blobs = self._context.output_store(root, anchor=guard.anchor_of(root))
            to_delete: list[str] = []
            for info in blobs.list(""):
                path = canonical_uri(blobs.child_uri(info.key))
                if path in doomed or (path not in known and doomed_by_name(path)):
                    reason = guard.refusal(path)
                    if reason is not None:
                        plan.sweep.refused.append(path)
                        log.warning("not deleting %s", reason)
                        continue
                    to_delete.append(info.key)
                    plan.sweep.bytes_freed += info.size
                elif path not in known and not hidden(info.key):
                    plan.sweep.unknown.append(path)
            uploads: list[PendingUpload] = []
            for upload in blobs.list_pending_uploads(""):
                upload_path = canonical_uri(blobs.child_uri(upload.key))
                marked = upload_path in doomed or (upload_path not in known and doomed_by_name(upload_path))
                if marked and guard.allows(upload_path):
                    uploads.append(upload)
            plan.roots.append((blobs, to_delete, uploads))
        return plan

    def run_sweep(self, plan: SweepPlan) -> Sweep:
        """Delete what :meth:`plan_sweep` picked (batches of 1,000 per root) and abort its uploads."""
        sweep = plan.sweep
        for blobs, to_delete, uploads in plan.roots:
            failpoint("store.commit.before_delete_orphans")
            for start in range(0, len(to_delete), DELETE_BATCH):
                chunk = to_delete[start : start + DELETE_BATCH]
                blobs.delete_many(chunk)
                sweep.deleted.extend(canonical_uri(blobs.child_uri(k)) for k in chunk)
                failpoint("store.commit.during_delete_orphans")
            for upload in uploads:
                blobs.abort_upload(upload)
                sweep.aborted.append(canonical_uri(blobs.child_uri(upload.key)))
        return sweep

    def delete_output_files(
        self,
        paths: Sequence[str],
        *,
        after_batch: Callable[[], None] = lambda: None,
        guard: DeletionGuard | None = None,
    ) -> list[str]:
        """Delete output files named exactly (what a reprocess retracts), per directory in batches;
        ``after_batch`` runs after each batch (failpoints). Every path must pass the deletion guard
        (:class:`InvalidArgumentError` (``path_outside_root``), nothing deleted, if one does not). Returns the paths
        deleted or already absent (canonical URIs)."""
        guard = guard or self._roots.guard()
        canonical = [canonical_uri(p) for p in paths]
        for path in canonical:
            guard.check(path)
        by_dir: dict[str, list[str]] = defaultdict(list)
        for path in canonical:
            by_dir[path.rpartition("/")[0]].append(path)
        deleted: list[str] = []
        for directory, uris in sorted(by_dir.items()):
            blobs = self._context.output_store(directory, anchor=guard.anchor_of(directory))
            keys = [blobs.relative_key(u) for u in uris]
            for start in range(0, len(keys), DELETE_BATCH):
                chunk = keys[start : start + DELETE_BATCH]
                blobs.delete_many(chunk)
                deleted.extend(canonical_uri(blobs.child_uri(k)) for k in chunk)
                after_batch()
        return deleted

    # ------------------------------------------------------------------ store records

    def delete_checkpoint_dirs(self, checkpoint_ids: Iterable[str]) -> None:
        """Delete checkpoints' records (``checkpoints/{id}/`` and ``attempts/{id}/``): every manifest
        first (so a half-deleted checkpoint is never visible), then the rest, in batches of 1000
        whatever the number of checkpoints."""
        ids = sorted(set(checkpoint_ids))
        if not ids:
            return
        for start in range(0, len(ids), DELETE_BATCH):
            self.delete_records([manifest_key(i) for i in ids[start : start + DELETE_BATCH]])
        if len(ids) > 20:  # one listing of everything beats a listing per checkpoint
            records = checkpoint_records(self._blobs)
            keys = [key for i in ids for key in records.get(i, ())]
        else:
            keys = [info.key for i in ids for prefix in checkpoint_prefixes(i) for info in self._blobs.list(prefix)]
        self.delete_records(keys)

    def delete_snapshot(self, number: int) -> None:
        """Delete snapshot ``number``, its manifest first (a half-deleted snapshot is never read)."""
        prefix = f"snapshots/{number:08d}/"
        self.delete_records([prefix + "manifest.json"])
        self.delete_records([i.key for i in self._blobs.list(prefix)])

    def delete_snapshots(self, keep: int | None) -> None:
        """Delete every snapshot but ``keep``, each manifest first."""
        for name in self._blobs.list_dirs("snapshots/"):
            if keep is not None and name == f"{keep:08d}":
                continue
            prefix = f"snapshots/{name}/"
            self.delete_records([prefix + "manifest.json"])
            self.delete_records([i.key for i in self._blobs.list(prefix)])

    def prune_epochs(self, keep_from: int) -> None:
        """Drop epoch records older than ``keep_from`` - 10 so listings stay short (commit records stay)."""
        cutoff = keep_from - 10
        self.delete_records([i.key for i in self._blobs.list("epochs/") if int(i.key[7:15]) < cutoff])

    def delete_records(self, keys: Sequence[str], *, after_batch: Callable[[], None] | None = None) -> list[str]:
        """Delete store records (keys under the store root) in batches of 1,000, several batches at a time.

        Returns the keys deleted. ``after_batch`` runs after each batch (failpoints).
        """
        checked = [DeletionGuard.check_store_key(k) for k in keys]
        chunks = [checked[start : start + DELETE_BATCH] for start in range(0, len(checked), DELETE_BATCH)]

        def one(chunk: list[str]) -> list[str]:
            deleted = self._blobs.delete_many(chunk)
            if after_batch is not None:
                after_batch()
            return deleted

        deleted: list[str] = []
        for start in range(0, len(chunks), DELETE_PARALLEL):
            for keys_deleted in self._context.map(one, chunks[start : start + DELETE_PARALLEL]):
                deleted.extend(keys_deleted)
        return deleted

    def delete_loose_checkpoints(self, keys: Sequence[str], *, after_batch: Callable[[], None] | None = None) -> None:
        """Delete the objects of checkpoint directories a segment holds: every manifest first (so no reader
        sees a checkpoint whose parts are half gone), then the rest."""
        manifests = [k for k in keys if k.endswith("/manifest.json")]
        self.delete_records(manifests, after_batch=after_batch)
        self.delete_records([k for k in keys if not k.endswith("/manifest.json")], after_batch=after_batch)

    def delete_segments(self, names: Sequence[str]) -> None:
        """Delete segments no state object names (replaced, or written by a compaction that lost a race)."""
        self.delete_records([f"segments/{n}/{part}" for n in names for part in ("manifests.parquet", "keys.parquet")])

    def delete_all_segments(self) -> list[str]:
        """Delete the state object, then every segment (delete_after_success, clear). Returns the segment names."""
        names = self._blobs.list_dirs("segments/")
        self.delete_records(["state.json"])
        self.delete_records([i.key for i in self._blobs.list("segments/")])
        return names


def _covers(root: str, uri: str) -> bool:
    """Whether canonical location ``uri`` is ``root`` or inside it."""
    inner, outer = parse_location(uri), parse_location(root)
    return inner is not None and outer is not None and inner.is_under(outer)
