"""``store.housekeeping``: compaction, retention after a commit, and resetting the store.

Each call delegates to the concern that does the work: ``store/compaction.py`` (``Compactor``,
``BackgroundCompaction``) and ``store/retention.py`` (``Retention``). None of them deletes
committed output files.
"""

from __future__ import annotations

import datetime as dt

from airflow_ckpt_provider.store.compaction import BackgroundCompaction, CompactionResult
from airflow_ckpt_provider.store.model import ClearResult, RetentionPolicy
from airflow_ckpt_provider.store.parts import StoreParts
from airflow_ckpt_provider.store.retention import Retention


class Housekeeping:
    """Keep a store small and fast to read, or reset it: ``store.housekeeping`` of a
    :class:`~airflow_ckpt_provider.store.store.CheckpointStore`."""

    def __init__(self, parts: StoreParts) -> None:
        self._compactor = parts.compactor
        self._retention = Retention(parts)

    # ------------------------------------------------------------------ compaction (store/compaction.py)

    def compact(self, *, min_loose: int = 1, delete_retired: bool = True) -> CompactionResult:
        """Fold the loose sealed manifests into one segment (when there are at least ``min_loose``) and
        merge small segments into bigger ones, so readers read a few objects instead of one per checkpoint.

        Visible to every reader at once and changes no reader's answer: the same
        checkpoints are sealed and valid before and after. Safe while tasks seal
        and while other processes compact (the state object is replaced only by a
        conditional write; a compaction that loses the race deletes its own segment
        and returns ``lost_race``). Idempotent. ``delete_retired=False`` keeps the
        segments a merge replaced until a later compaction (a running job's tasks
        may still read them). Raises :class:`CorruptCheckpointError` when a segment
        cannot be read (nothing deleted), :class:`StoreUnavailableError`.
        """
        return self._compactor.compact(min_loose=min_loose, delete_retired=delete_retired)

    def background_compaction(self, *, interval: float = 10.0, min_loose: int = 500) -> BackgroundCompaction:
        """A context manager that compacts every ``interval`` seconds while its block runs, and once when it
        ends, each time only when at least ``min_loose`` manifests are loose. For a job's driver; never raises."""
        return BackgroundCompaction(self.compact, interval=interval, min_loose=min_loose)

    # ------------------------------------------------------------------ retention and clearing (store/retention.py)

    def cleanup(self, policy: RetentionPolicy | str) -> list[str]:
        """Apply a retention policy after a successful commit; returns the checkpoint ids removed.

        ``delete_after_success``: every checkpoint directory and snapshot is deleted
        (the next run of this store starts from nothing). ``retain``: committed keys
        are compacted into one snapshot (``snapshots/{n}``), then the compacted
        checkpoints are deleted, so later reads fetch one object. Never deletes
        output files. Idempotent. Raises :class:`RefusedError` (``not_committed``) if the latest
        epoch is not committed (nothing deleted).
        """
        return self._retention.cleanup(RetentionPolicy(policy))

    def cleanup_older_than(self, age: dt.timedelta) -> list[str]:
        """Delete store metadata older than ``age`` that no reader needs; returns what was deleted.

        Removes epoch and degraded records older than ``age`` (never the latest
        epoch's) and invalid or unsealed checkpoint directories whose records are
        all older than ``age`` *and* whose recorded output files are gone (else the
        next commit still needs the record to delete them). Keeps commit records
        (the history of authoritative output). Never deletes output files. Idempotent.
        """
        return self._retention.cleanup_older_than(age)

    def discard_uncommitted(self) -> ClearResult:
        """Drop every checkpoint that is not committed, and the output files they recorded.

        Opens a new epoch first (so running writers are fenced), whose base is the
        committed checkpoints. Committed checkpoints and committed output stay.
        Idempotent. Raises :class:`EpochConflictError` if a submit races it.
        """
        return self._retention.discard(keep_committed=True, owner="discard_uncommitted")

    def clear(self) -> ClearResult:
        """Reset the store: the next run reprocesses every key.

        Opens a new epoch with an empty base (fencing running writers), deletes
        uncommitted output files the store recorded, every checkpoint and snapshot.
        Committed output files are never deleted. Idempotent.
        """
        return self._retention.discard(keep_committed=False, owner="clear")
