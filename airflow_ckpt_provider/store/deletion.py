"""Deleting what the store and its writers made: output files writers recorded, and store records.

Every deletion of the store goes through this module (commit, retention, clearing):
output files only when a writer of this store recorded an intent for them (exact
paths, or a native write's name pattern), store records only under the store root.
Deletes go in batches of 1,000 keys (one S3 ``DeleteObjects`` each).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.store.blobs.base import BlobNotFoundError
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.errors import CorruptCheckpointError
from airflow_ckpt_provider.store.layout import hidden, manifest_key, under_root
from airflow_ckpt_provider.store.records import Intents, NamePattern

log = logging.getLogger(__name__)

#: Keys per delete request (the S3 DeleteObjects limit).
DELETE_BATCH = 1000


class StoreDeleter:
    """Reads the writers' intent records and deletes output files and store records."""

    def __init__(self, context: StoreContext) -> None:
        self._context = context
        self._blobs = context.blobs

    def intents(self, skip: Iterable[str] = ()) -> Intents:
        """Recorded output path → (checkpoint id, epoch) that intended to write it, and name patterns.

        ``skip``: checkpoints whose records are not needed (valid ones: their files are
        authoritative anyway), so a healthy commit reads almost no intent records.
        """
        skipped = set(skip)
        infos = [
            i for i in self._blobs.list("checkpoints/") if "/intents/" in i.key and i.key.split("/")[1] not in skipped
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
        for record in self._context.map(load, [i.key for i in infos]):
            for path in record.get("paths", []):
                out[str(path)] = (str(record["checkpoint_id"]), record.get("epoch"))
            if record.get("name_marker") and record.get("root"):
                patterns.append(
                    NamePattern(
                        root=str(record["root"]).rstrip("/"),
                        marker=str(record["name_marker"]),
                        checkpoint_id=str(record["checkpoint_id"]),
                        epoch=record.get("epoch"),
                    )
                )
        return Intents(out, tuple(patterns))

    # ------------------------------------------------------------------ output files

    def delete_recorded(
        self,
        roots: Sequence[str],
        doomed: Mapping[str, str],
        known: set[str],
        doomed_by_name: Callable[[str], bool] = lambda path: False,
    ) -> tuple[list[str], list[str], list[str], int]:
        """List each output root once; delete files in ``doomed`` (or that ``doomed_by_name`` picks);
        report the unrecorded ones.

        Returns (deleted, aborted uploads, unknown files, bytes freed). ``known``: paths
        that are authoritative or recorded, so not reported as unknown.
        """
        deleted: list[str] = []
        unknown: list[str] = []
        aborted: list[str] = []
        bytes_freed = 0
        # Listing is recursive: a root under another root would list (and delete) twice.
        roots = [r for r in roots if not under_root(r, [o for o in roots if o != r])]
        for root in roots:
            blobs = self._context.output_store(root)
            to_delete: list[str] = []
            for info in blobs.list(""):
                path = blobs.child_uri(info.key)
                if path in doomed or (path not in known and doomed_by_name(path)):
                    to_delete.append(info.key)
                    bytes_freed += info.size
                elif path not in known and not hidden(info.key):
                    unknown.append(path)
            failpoint("store.commit.before_delete_orphans")
            for start in range(0, len(to_delete), DELETE_BATCH):
                chunk = to_delete[start : start + DELETE_BATCH]
                blobs.delete_many(chunk)
                deleted.extend(blobs.child_uri(k) for k in chunk)
                failpoint("store.commit.during_delete_orphans")
            for upload in blobs.list_pending_uploads(""):
                upload_path = blobs.child_uri(upload.key)
                if upload_path in doomed or (upload_path not in known and doomed_by_name(upload_path)):
                    blobs.abort_upload(upload)
                    aborted.append(blobs.child_uri(upload.key))
        return deleted, aborted, unknown, bytes_freed

    def delete_output_files(self, paths: Sequence[str], *, after_batch: Callable[[], None] = lambda: None) -> list[str]:
        """Delete output files named exactly (what a reprocess retracts), per directory in batches;
        ``after_batch`` runs after each batch (failpoints). Returns the paths deleted or already absent."""
        by_dir: dict[str, list[str]] = defaultdict(list)
        for path in paths:
            directory, _, name = path.rpartition("/")
            by_dir[directory].append(name)
        deleted: list[str] = []
        for directory, names in sorted(by_dir.items()):
            blobs = self._context.output_store(directory)
            for start in range(0, len(names), DELETE_BATCH):
                chunk = names[start : start + DELETE_BATCH]
                blobs.delete_many(chunk)
                deleted.extend(blobs.child_uri(n) for n in chunk)
                after_batch()
        return deleted

    # ------------------------------------------------------------------ store records

    def delete_checkpoint_dirs(self, checkpoint_ids: Iterable[str]) -> None:
        """Delete checkpoint directories: every manifest first (so a half-deleted checkpoint is
        never visible), then the rest, in batches of 1000 whatever the number of checkpoints."""
        ids = sorted(set(checkpoint_ids))
        if not ids:
            return
        for start in range(0, len(ids), DELETE_BATCH):
            self._blobs.delete_many([manifest_key(i) for i in ids[start : start + DELETE_BATCH]])
        if len(ids) > 20:  # one listing of everything beats a listing per checkpoint
            wanted = set(ids)
            keys = [i.key for i in self._blobs.list("checkpoints/") if i.key.split("/")[1] in wanted]
        else:
            keys = [info.key for i in ids for info in self._blobs.list(f"checkpoints/{i}/")]
        self.delete_records(keys)

    def delete_snapshot(self, number: int) -> None:
        """Delete snapshot ``number``, its manifest first (a half-deleted snapshot is never read)."""
        prefix = f"snapshots/{number:08d}/"
        self._blobs.delete_many([prefix + "manifest.json"])
        self.delete_records([i.key for i in self._blobs.list(prefix)])

    def delete_snapshots(self, keep: int | None) -> None:
        """Delete every snapshot but ``keep``, each manifest first."""
        for name in self._blobs.list_dirs("snapshots/"):
            if keep is not None and name == f"{keep:08d}":
                continue
            prefix = f"snapshots/{name}/"
            self._blobs.delete_many([prefix + "manifest.json"])
            self._blobs.delete_many([i.key for i in self._blobs.list(prefix)])

    def prune_epochs(self, keep_from: int) -> None:
        """Drop epoch records older than ``keep_from`` - 10 so listings stay short (commit records stay)."""
        cutoff = keep_from - 10
        self.delete_records([i.key for i in self._blobs.list("epochs/") if int(i.key[7:15]) < cutoff])

    def delete_records(self, keys: Sequence[str], *, after_batch: Callable[[], None] = lambda: None) -> list[str]:
        """Delete store records (keys under the store root), in batches; returns the keys deleted."""
        deleted: list[str] = []
        for start in range(0, len(keys), DELETE_BATCH):
            deleted.extend(self._blobs.delete_many(keys[start : start + DELETE_BATCH]))
            after_batch()
        return deleted
