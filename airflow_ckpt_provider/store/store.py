"""The checkpoint store: :class:`CheckpointStore`, a facade over one module per concern.

The facade holds what one run does: its tasks write and seal checkpoints, its next run reads the
done keys, the commit makes the output authoritative. The rest is a role object per audience:

| attribute | what | module |
|---|---|---|
| (the facade) | writers: intents, staged parts, sealing | ``store/writers.py`` |
| (the facade) | reading the done keys and files | ``store/state.py``, ``catalog.py`` |
| (the facade) | commit: authoritative record, orphans; deletion guard | ``store/commit.py`` |
| ``epochs`` | open and end epochs (fencing), a run's records | ``store/epoch_records.py``, ``epochs.py`` |
| ``inspection`` | progress, contents, check, checkpoints, rerun plan | ``store/inspection.py`` |
| ``housekeeping`` | compaction, retention, discard and clear | ``store/housekeeping.py`` |
| ``reprocessing`` | reprocess, rewind, undo, purge | ``store/reprocess/service.py`` |

Below them: every deletion (``store/deletion.py``); shared blob access, layout, records and keys
(``store/context.py``, ``layout.py``, ``records.py``, ``keys.py``). The invariants each of them keeps
are numbered in docs/design.md (section 4.2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from airflow_ckpt_provider.store.blobs.base import BlobStore
from airflow_ckpt_provider.store.breaker import CircuitBreaker
from airflow_ckpt_provider.store.commit import Committer
from airflow_ckpt_provider.store.compaction import Compactor
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.deletion import StoreDeleter
from airflow_ckpt_provider.store.deletion_guard import DeletionGuard
from airflow_ckpt_provider.store.epoch_records import EpochRecords
from airflow_ckpt_provider.store.epochs import EpochLog
from airflow_ckpt_provider.store.housekeeping import Housekeeping
from airflow_ckpt_provider.store.inspection import Inspection
from airflow_ckpt_provider.store.key_reader import key_sources
from airflow_ckpt_provider.store.keys import INLINE_MAX_FILES, INLINE_MAX_KEYS, KEY_COLUMN
from airflow_ckpt_provider.store.layout import new_checkpoint_id, validate_checkpoint_id
from airflow_ckpt_provider.store.model import (
    Checkpoint,
    CheckpointStatus,
    CommitResult,
    FileMetadata,
    KeySource,
    UnknownFiles,
)
from airflow_ckpt_provider.store.output_roots import OutputRoots
from airflow_ckpt_provider.store.parts import StoreParts
from airflow_ckpt_provider.store.reprocess.service import Reprocessing
from airflow_ckpt_provider.store.state import StateReader
from airflow_ckpt_provider.store.tail import DEFAULT_MAX_LOOSE, LooseTail
from airflow_ckpt_provider.store.writers import CheckpointWriters

__all__ = [
    "INLINE_MAX_FILES",
    "INLINE_MAX_KEYS",
    "KEY_COLUMN",
    "CheckpointStore",
    "new_checkpoint_id",
    "validate_checkpoint_id",
]


class CheckpointStore:
    """A checkpoint store rooted at ``blobs.uri``. Thread-safe; one instance per process is enough.

    Build one with :func:`airflow_ckpt_provider.store.open_store`.
    """

    def __init__(
        self,
        blobs: BlobStore,
        *,
        options: Mapping[str, Any] | None = None,
        breaker_max_failures: int = 3,
        max_workers: int = 16,
        blob_opener: Callable[[str, str | None], BlobStore] | None = None,
        max_loose_manifests: int = DEFAULT_MAX_LOOSE,
        trusted_output_roots: Sequence[str] | None = None,
        output_roots_declared_by: str | None = None,
        configured_output_roots: Sequence[str] | None = None,
    ) -> None:
        self.blobs = blobs
        self.options: dict[str, Any] = dict(options or {})
        self.breaker = CircuitBreaker(breaker_max_failures)
        self.max_workers = max_workers
        self.context = StoreContext(
            blobs,
            max_workers=max_workers,
            blob_opener=blob_opener,
            trusted_roots=trusted_output_roots,
            trusted_by=output_roots_declared_by,
            configured_roots=configured_output_roots,
        )
        epoch_log = EpochLog(self.context)
        reader = StateReader(self.context, epoch_log)
        roots = OutputRoots(self.context, epoch_log, reader)
        deleter = StoreDeleter(self.context, roots, reader)
        compactor = Compactor(self.context, reader, deleter)
        #: The loose manifests' bound and counters (folds, races lost: what the store benchmarks report).
        self.loose_tail = LooseTail(self.context, compactor, max_loose=max_loose_manifests)
        self._writers = CheckpointWriters(self.context, self.breaker, epoch_log, reader, self.loose_tail)
        #: What the role objects below are built from (store/parts.py); the one way to the store's internals.
        self.parts = StoreParts(self.context, epoch_log, reader, roots, deleter, compactor)
        self._committer = Committer(self.parts)
        #: Open and end epochs, and what a run records in its epoch (store/epoch_records.py).
        self.epochs = EpochRecords(self.parts, self.loose_tail)
        #: Compaction, retention after a commit, discard and clear (store/housekeeping.py).
        self.housekeeping = Housekeeping(self.parts)
        #: Progress, the consistency check, the checkpoints and epochs held; reads only (store/inspection.py).
        self.inspection = Inspection(self.parts)
        #: Reprocess, rewind, undo and purge: retract part of the output (store/reprocess/, docs/reprocess.md).
        self.reprocessing = Reprocessing(self.parts)

    # ------------------------------------------------------------------ basics

    @property
    def uri(self) -> str:
        return self.blobs.uri

    @property
    def trusted_output_roots(self) -> tuple[str, ...] | None:
        """The output roots this store was opened with (the DAG's), or None (docs/security.md)."""
        return self.context.trusted_roots

    @property
    def degraded(self) -> bool:
        """True once a store failure made this process skip checkpointing (breaker or a failed stage)."""
        return self.breaker.tripped or self._writers.poisoned or self.parts.epoch_log.marked_degraded

    def __repr__(self) -> str:
        return f"CheckpointStore({self.uri!r})"

    def close(self) -> None:
        self.context.close()

    # ------------------------------------------------------------------ writers (store/writers.py)

    def record_intent(self, checkpoint_id: str, paths: Sequence[str], *, epoch: int | None = None) -> bool:
        """Record that checkpoint ``checkpoint_id`` is about to create the output files ``paths``.

        Call it *before* creating each file. The record lets :meth:`commit` delete
        the file if the checkpoint never becomes valid; a file with no record is
        never deleted automatically. Visible to ``commit`` and ``inspection.check`` at once.
        Not idempotent (each call appends a record; duplicates are harmless).
        Returns False when the breaker skipped it (the file is then unrecorded).
        Raises :class:`InvalidArgumentError` (``checkpoint_id``), :class:`EpochConflictError` (``already_sealed``).
        """
        return self._writers.record_intent(checkpoint_id, paths, epoch=epoch)

    def record_name_intent(self, write_id: str, root: str, marker: str, *, epoch: int | None = None) -> None:
        """Record that a write is about to create files under ``root`` whose names contain ``marker``.

        For writers that cannot record each file before creating it (Spark's own
        Parquet writer, whose tasks have no store client): the driver records one
        pattern before the job, and the commit treats every matching file that no
        valid checkpoint owns as an orphan. ``marker`` must be unique to this write
        (at least 12 characters; a random token) so that no other writer's file
        matches. ``write_id`` is a fresh :func:`new_checkpoint_id` that is never
        sealed; the commit deletes its record with the other unsealed directories.
        The breaker is the caller's: this call raises on a store failure instead of returning False
        (the native writer counts it on the breaker and runs the write degraded, its files unrecorded:
        docs/design.md, invariants 6 and 8).
        Raises :class:`InvalidArgumentError` (``checkpoint_id``), :class:`StoreUnavailableError`.
        """
        self._writers.record_name_intent(write_id, root, marker, epoch=epoch)

    def stage_keys(self, checkpoint_id: str, keys: pa.Array | pa.ChunkedArray | Sequence[Any]) -> bool:
        """Append a batch of input keys to checkpoint ``checkpoint_id``.

        Invisible to every reader until :meth:`checkpoint` seals it. Not idempotent:
        each call appends a part (staging a key twice is harmless). Returns False when
        the breaker skipped it. Raises :class:`InvalidArgumentError` (``invalid_keys``) (nulls, nested
        arrays), :class:`InvalidArgumentError` (``key_type_mismatch``) (a type other than this checkpoint's
        earlier keys), :class:`EpochConflictError` (``already_sealed``).
        """
        return self._writers.stage_keys(checkpoint_id, keys)

    def stage_files(self, checkpoint_id: str, files: Sequence[FileMetadata | Mapping[str, Any]]) -> bool:
        """Append output-file metadata to checkpoint ``checkpoint_id``.

        Invisible until sealed. Not idempotent (a second call appends the same files
        again; don't). Returns False when the breaker skipped it. Raises
        :class:`EpochConflictError` (``already_sealed``), :class:`InvalidArgumentError` (``checkpoint_id``).
        """
        return self._writers.stage_files(checkpoint_id, files)

    def checkpoint(
        self,
        checkpoint_id: str,
        *,
        epoch: int,
        partition: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Checkpoint | None:
        """Seal checkpoint ``checkpoint_id``: write its manifest, naming every staged part.

        After it returns, every reader sees the checkpoint (and it is valid if
        ``epoch`` is still the latest epoch and no other attempt of ``partition``
        sealed first). Idempotent: sealing again with the same parts returns the
        existing manifest. Returns None when the breaker skipped it (nothing
        sealed; the run is degraded). Raises :class:`EpochConflictError` (``epoch_fenced``) if a newer
        epoch began (this attempt is a zombie: give up),
        :class:`EpochConflictError` (``already_sealed``) if it was sealed with other parts.
        """
        return self._writers.checkpoint(checkpoint_id, epoch=epoch, partition=partition, metadata=metadata)

    # ------------------------------------------------------------------ reading the done keys (store/state.py)

    def key_sources(self) -> list[KeySource]:
        """Parts holding every done key (snapshot and valid checkpoints); picklable, for parallel reads."""
        return key_sources(
            self.parts.reader.read(with_status=False, with_commits=False, with_attempts=False, keep_files=False)
        )

    def read_key_source(self, source: KeySource) -> pa.Table:
        """Read one part (on any machine that can open this store). Raises :class:`CorruptCheckpointError`."""
        return self.parts.reader.keys.read_key_source(source)

    def get_checkpointed_keys(self) -> pa.Table:
        """Every done key: a table with one column ``key``.

        Done means held by the snapshot or by a valid checkpoint (checkpointed or
        committed). Reads are parallel. Raises :class:`InvalidArgumentError` (``key_type_mismatch``),
        :class:`CorruptCheckpointError`.
        """
        return self.parts.reader.done_keys()

    def key_type(self) -> str | None:
        """The Arrow type (as a string) of the store's done keys, or None if there are none."""
        return self.parts.reader.keys.key_type(
            self.parts.reader.read(with_status=False, with_commits=False, with_attempts=False, keep_files=False)
        )

    def get_checkpointed_files(self) -> list[FileMetadata]:
        """Output files of valid checkpoints that are sealed but not yet committed."""
        state = self.parts.reader.read(with_status=False, with_attempts=False)
        return self.parts.reader.files.files_of([c for c in state.valid if c.status is CheckpointStatus.CHECKPOINTED])

    # ------------------------------------------------------------------ commit and deletions (store/commit.py)

    def commit(
        self,
        output_roots: Sequence[str] | None = None,
        *,
        degraded: bool = False,
        unknown_files: UnknownFiles | str = UnknownFiles.FAIL,
    ) -> CommitResult:
        """Make the latest epoch's output authoritative, then delete its orphans.

        Phase 1 writes ``commits/{n}.json`` (every file of every valid checkpoint),
        after verifying that the valid checkpoints' keys are pairwise disjoint, and
        marks those checkpoints committed. Phase 2 deletes orphans under
        ``output_roots`` (default: the roots writers recorded): files some writer of
        this store recorded an intent for that no valid checkpoint owns; aborts
        their incomplete uploads; deletes unsealed and invalid checkpoint
        directories. A file under the output roots with no intent record of this store
        (another job's, or a run whose store was elsewhere) is never deleted: by default
        it refuses the commit with :class:`RefusedError` (``unknown_output_files``) before phase 1
        (nothing committed, nothing deleted: a reader would see it beside the committed
        files); ``unknown_files="keep"`` commits and reports it in ``unknown_files``.
        In a degraded epoch (``degraded=True`` or a recorded trip), files of that
        epoch's unsealed checkpoints are kept (``kept_unprovable``), and unknown files
        are kept and reported (its writers could not record every file).

        A re-run of a committed job (store/rerun.py): the live files of the same job's earlier commits
        whose keys no longer count, where this run writes, are retracted (``replaced_files``, through
        the deletion guard); live files of earlier commits it cannot attribute (a job named on one side
        only, a record that names none) refuse the commit with :class:`RefusedError` (``earlier_output_live``,
        ``exc.paths``) before phase 1, unless ``unknown_files="keep"`` (then kept for good, reported in
        ``kept_earlier_files``).

        Idempotent and resumable: rerun after a crash in either phase finishes the
        job. Raises :class:`InvalidArgumentError` (``no_epoch``), :class:`RefusedError` (``epoch_failed``,
        ``overlapping_keys``, ``unknown_output_files``, ``earlier_output_live``, ...) — nothing deleted in that case.
        """
        return self._committer.commit(output_roots, degraded=degraded, unknown_files=UnknownFiles(unknown_files))

    def deletion_guard(self, explicit_roots: Sequence[str] | None = None) -> DeletionGuard:
        """The guard every deletion of this store passes, as the store stands now: its root and the
        declared output roots (docs/design.md, invariant 10). Code that deletes or moves output
        (reprocess, retraction) calls ``guard.check(uri)`` on every source and destination. Reads
        the epoch and commit records; changes nothing. ``explicit_roots`` count only for a store
        whose epochs declare none, as a commit's ``output_roots`` do.
        """
        return self.parts.roots.guard(explicit_roots)
