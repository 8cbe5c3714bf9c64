"""Retention and clearing: what happens to checkpoints after a commit, and how a store is reset.

``delete_after_success`` deletes every checkpoint once the run committed; ``retain``
compacts committed keys into one snapshot (``snapshots/{n}``) so later runs read one
object. ``discard`` and ``clear`` first open a fencing epoch (so running writers
stop), then delete what no longer counts. Output files are only deleted by clearing,
and only uncommitted ones a writer of this store recorded.
"""

from __future__ import annotations

import datetime as dt
import logging

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.store.deletion_guard import canonical_uri
from airflow_ckpt_provider.store.epochs import EpochBase
from airflow_ckpt_provider.store.errors import CheckpointError, CorruptCheckpointError, RefusedError
from airflow_ckpt_provider.store.keys import KEY_COLUMN
from airflow_ckpt_provider.store.layout import checkpoint_prefixes, commit_done_key, snapshot_prefix
from airflow_ckpt_provider.store.model import (
    CheckpointStatus,
    ClearResult,
    EpochStatus,
    RetentionPolicy,
)
from airflow_ckpt_provider.store.parts import PartsUser
from airflow_ckpt_provider.store.records import NamePattern, dumps, now, record_time
from airflow_ckpt_provider.store.reprocess.lineage import attributed_keys, write_snapshot_data
from airflow_ckpt_provider.store.reprocess.maintenance import refuse_unfinished_maintenance
from airflow_ckpt_provider.store.segment_reader import segment_intents
from airflow_ckpt_provider.store.store_state import StoreState
from airflow_ckpt_provider.store.sweep import plan_orphan_sweep

log = logging.getLogger(__name__)


class Retention(PartsUser):
    """Applies retention policies after a commit, cleans up old metadata, discards and clears."""

    # ------------------------------------------------------------------ after a commit

    def cleanup(self, policy: RetentionPolicy) -> list[str]:
        state = self._reader.read()
        epoch = state.latest
        if epoch is None:
            return []
        if not self._blobs.exists(commit_done_key(epoch.number)):
            raise RefusedError(
                f"epoch {epoch.number} of {self._context.uri} is not committed: commit first, then clean up",
                reason="not_committed",
            )
        if policy is RetentionPolicy.DELETE_AFTER_SUCCESS:
            # Recorded before anything is deleted: from here on none of the commit's keys counts, so a cleanup
            # cut short anywhere below leaves a store whose next run re-does every key and whose next commit
            # replaces this one's output (store/rerun.py), never one that skips what survived.
            self._epoch_log.record_keys_deleted(epoch.number)
        failpoint("store.cleanup.start")
        if policy is RetentionPolicy.DELETE_AFTER_SUCCESS:
            ids = sorted(state.sealed_ids() | set(state.unsealed))
            self._deleter.delete_checkpoint_dirs(state.listed_dirs)
            failpoint("store.cleanup.after_checkpoints")
            self._deleter.delete_all_segments()
            self._deleter.delete_snapshots(keep=None)
            return ids
        return self._compact(state)

    def _compact(self, state: StoreState) -> list[str]:
        assert state.latest is not None
        committed = [c for c in state.valid if c.status is CheckpointStatus.COMMITTED]
        folded_before = state.folded
        new = [c for c in committed if c.checkpoint_id not in folded_before]
        if not new:
            leftovers = sorted(folded_before & (set(state.listed_dirs) | state.sealed_ids()))
            self._deleter.delete_checkpoint_dirs(sorted(folded_before & set(state.listed_dirs)))
            # Every row of a segment is folded or never valid again once the latest epoch committed.
            self._deleter.delete_all_segments()
            return leftovers
        number = state.latest.number
        keys = attributed_keys(self._context, self._reader, state, new)
        prefix = snapshot_prefix(number)
        write_snapshot_data(self._blobs, prefix, keys)
        failpoint("store.cleanup.after_snapshot_keys")
        manifest = {
            "snapshot": number,
            "checkpoint_ids": sorted(c.checkpoint_id for c in new),
            "num_keys": keys.num_rows,
            "key_type": str(keys.schema.field(KEY_COLUMN).type) if keys.num_rows else None,
            "created_at": now(),
            "format": "parquet",
            # Each key's checkpoint and epoch are in keys.parquet (docs/reprocess.md); readers refuse a
            # snapshot that does not say so.
            "attributed": True,
        }
        self._blobs.put(prefix + "manifest.json", dumps(manifest))
        failpoint("store.cleanup.after_snapshot_manifest")
        ids = sorted(c.checkpoint_id for c in new)
        self._deleter.delete_checkpoint_dirs(sorted(set(ids) & set(state.listed_dirs)))
        self._deleter.delete_all_segments()
        self._deleter.delete_snapshots(keep=number)
        self._deleter.prune_epochs(keep_from=number)
        return ids

    # ------------------------------------------------------------------ old metadata

    def cleanup_older_than(self, age: dt.timedelta) -> list[str]:
        cutoff = dt.datetime.now(dt.UTC) - age
        state = self._reader.read()
        latest = state.latest.number if state.latest else 0
        deleted: list[str] = []
        for info in self._blobs.list("epochs/"):
            if int(info.key[7:15]) >= latest:
                continue
            record = self._blobs.get_if_exists(info.key)
            created = record_time(record[0]) if record else None
            if created is not None and created < cutoff:
                deleted.extend(self._deleter.delete_records([info.key]))
        valid_ids = set(state.valid_ids)
        recorded = self._deleter.intents(skip=valid_ids)
        intents = recorded.paths
        # Directories only: a segment's rows of invalid checkpoints go with its next rewrite or cleanup.
        loose_invalid = (set(state.catalog.loose) | set(state.covered_dirs)) - valid_ids
        for checkpoint_id in sorted(loose_invalid | set(state.unsealed)):
            records = [
                info.key
                for prefix in checkpoint_prefixes(checkpoint_id)
                for info in self._blobs.list(prefix)
                if info.key.endswith(".json")
            ]
            times = [record_time(self._blobs.get(key)[0]) for key in records]
            if any(t is None or t >= cutoff for t in times):
                continue
            paths = [p for p, (cid, _) in intents.items() if cid == checkpoint_id]
            if any(self._output_exists(p) for p in paths):
                continue
            if any(p.checkpoint_id == checkpoint_id and self._pattern_has_files(p) for p in recorded.patterns):
                continue
            self._deleter.delete_checkpoint_dirs([checkpoint_id])
            deleted.append(f"checkpoints/{checkpoint_id}/")
        return deleted

    def _pattern_has_files(self, pattern: NamePattern) -> bool:
        """Whether any file a native write's name pattern covers exists (True when unsure: keep the record)."""
        try:
            blobs = self._context.output_store(pattern.root)
            return any(pattern.matches(blobs.child_uri(i.key)) for i in blobs.list(""))
        except CheckpointError:
            return True

    def _output_exists(self, path: str) -> bool:
        root, _, name = path.rpartition("/")
        try:
            return self._context.output_store(root).exists(name)
        except CheckpointError:
            return True  # cannot tell: keep the record

    # ------------------------------------------------------------------ discard and clear

    def discard(self, *, keep_committed: bool, owner: str) -> ClearResult:
        """Fence writers with a new epoch whose base is what survives, then delete the rest."""
        state = self._reader.read(tolerate_corrupt=True)
        refuse_unfinished_maintenance(self._context.uri, state.latest, owner)
        if keep_committed and state.corrupt_segments:
            raise CorruptCheckpointError(
                f"segments {sorted(state.corrupt_segments)} of {self._context.uri} cannot be read, so which "
                "checkpoints are committed is unknown; nothing was deleted. Restore them from a backup, or clear "
                "the store (`airflow-ckpt clear`) to start over",
                reason="corrupt",
            )
        committed = [c for c in state.valid if c.status is CheckpointStatus.COMMITTED] if keep_committed else []
        keep_ids = {c.checkpoint_id for c in committed}
        latest_number = state.latest.number if state.latest else 0
        number = latest_number + 1
        snapshot = state.snapshot if keep_committed else None
        folded = set(snapshot["checkpoint_ids"]) if snapshot else set()
        self._epoch_log.open_fencing(
            number,
            owner=owner,
            base=EpochBase(tuple(sorted(keep_ids - folded)), None if snapshot is None else int(snapshot["snapshot"])),
            metadata={"action": owner},
            conflict=(
                f"a submit opened epoch {number} of {self._context.uri} while clearing; nothing was deleted. Retry"
            ),
        )
        self._epoch_log.end_superseded(state.latest, f"{owner} (epoch {number})")
        drop_ids = sorted((state.sealed_ids() | set(state.unsealed) | set(state.corrupt)) - keep_ids)
        if keep_committed:
            # Before anything is deleted: a segment that cannot be rewritten stops the discard here.
            self._compactor.rewrite_without(frozenset(drop_ids))
        committed_paths = self._reader.commits.committed_paths() | {
            canonical_uri(f.path) for f in self._reader.files.files_of(committed)
        }
        recorded = self._deleter.intents(skip=keep_ids, extra=segment_intents(state, skip=keep_ids))
        guard = self._roots.guard()
        orphans = plan_orphan_sweep(
            self._deleter,
            guard,
            recorded,
            keep_ids=keep_ids,
            keep_paths=committed_paths,
            undeclared_keeps_output=True,
        )
        sweep = orphans.run(self._deleter)
        refused = [
            *(f"{cid}: {why}" for cid, why in recorded.rejected),
            *orphans.refused,
            *orphans.refused_patterns,
            *(f"{p}: refused by the deletion guard" for p in sweep.refused),
        ]
        undeclared = orphans.undeclared
        self._deleter.delete_checkpoint_dirs(sorted(set(state.listed_dirs) - keep_ids))
        snapshots: list[int] = []
        if not keep_committed:
            self._deleter.delete_all_segments()
            snapshots = [int(n) for n in self._blobs.list_dirs("snapshots/")]
            self._deleter.delete_snapshots(keep=None)
        self._epoch_log.write_end(number, EpochStatus.CLEARED, {"action": owner})
        if undeclared:
            log.warning(
                "%s: %s: %d recorded output file(s) kept, only the store's records were deleted",
                self._context.uri,
                f"no output root is declared ({guard.trusted_by}: none)"
                if guard.anchor_declares_nothing
                else "the store declares no output root (no epoch declares one)",
                len(undeclared),
            )
        return ClearResult(
            epoch=number,
            deleted_checkpoints=tuple(drop_ids),
            deleted_files=tuple(sorted(sweep.deleted)),
            deleted_snapshots=tuple(snapshots),
            bytes_freed=sweep.bytes_freed,
            output_roots=guard.root_uris,
            undeclared_output_files=undeclared,
            refused_records=tuple(refused),
        )
