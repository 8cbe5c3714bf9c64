"""The checkpoint store: :class:`CheckpointStore`, a facade over one module per concern.

| concern | module |
|---|---|
| writers: intents, staged parts, sealing manifests | ``store/writers.py`` |
| compaction: loose manifests into segments, the state object | ``store/compaction.py``, ``segments.py`` |
| epochs: fencing between submits | ``store/epochs.py`` |
| reading state: manifests, segments, validity, keys, files | ``store/state.py``, ``catalog.py`` |
| commit: the authoritative record, orphans | ``store/commit.py`` |
| retention, old metadata, discard and clear | ``store/retention.py`` |
| every deletion (output files, store records) | ``store/deletion.py`` |
| inspection: progress and the consistency check | ``store/inspection.py`` |
| shared: blob access, layout, records, keys | ``store/context.py``, ``layout.py``, ``records.py``, ``keys.py`` |

The invariants each of them keeps are numbered in docs/design.md (section 4.2).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_ckpt_provider.store.blobs.base import BlobStore
from airflow_ckpt_provider.store.breaker import CircuitBreaker
from airflow_ckpt_provider.store.commit import Committer
from airflow_ckpt_provider.store.compaction import (
    SUBMIT_FOLD_LIMIT,
    BackgroundCompaction,
    CompactionResult,
    Compactor,
)
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.deletion import StoreDeleter
from airflow_ckpt_provider.store.deletion_guard import DeletionGuard
from airflow_ckpt_provider.store.epochs import EpochLog
from airflow_ckpt_provider.store.input_audit import SkipAudit, write_skip_audit
from airflow_ckpt_provider.store.inspection import Inspector
from airflow_ckpt_provider.store.key_reader import key_sources
from airflow_ckpt_provider.store.keys import INLINE_MAX_FILES, INLINE_MAX_KEYS, KEY_COLUMN
from airflow_ckpt_provider.store.layout import epoch_key, new_checkpoint_id, validate_checkpoint_id
from airflow_ckpt_provider.store.model import (
    Checkpoint,
    CheckpointStatus,
    ClearResult,
    CommitResult,
    ConsistencyReport,
    Epoch,
    EpochStatus,
    FileMetadata,
    KeySource,
    Progress,
    RetentionPolicy,
    StoreContents,
    UnknownFiles,
)
from airflow_ckpt_provider.store.parts import StoreParts
from airflow_ckpt_provider.store.reprocess.service import Reprocessor
from airflow_ckpt_provider.store.rerun import JOB_METADATA_KEY, OnRerun, RerunPlan, plan_rerun
from airflow_ckpt_provider.store.retention import Retention
from airflow_ckpt_provider.store.state import StateReader
from airflow_ckpt_provider.store.tail import DEFAULT_MAX_LOOSE, LooseTail
from airflow_ckpt_provider.store.writers import CheckpointWriters

if TYPE_CHECKING:
    from airflow_ckpt_provider.store.reprocess.model import ReprocessRecord, Selection
    from airflow_ckpt_provider.store.reprocess.plan import ReprocessPlan, ReprocessResult

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
        blob_opener: Callable[[str], BlobStore] | None = None,
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
        self.epoch_log = EpochLog(self.context)
        self.state_reader = StateReader(self.context, self.epoch_log)
        self.deleter = StoreDeleter(self.context, self.epoch_log, self.state_reader)
        self.compactor = Compactor(self.context, self.state_reader, self.deleter)
        #: Loose checkpoints ``begin_epoch`` folds at most (its work stays bounded; the driver folds the rest).
        self.submit_fold_limit = SUBMIT_FOLD_LIMIT
        self.loose_tail = LooseTail(self.context, self.compactor, max_loose=max_loose_manifests)
        self._writers = CheckpointWriters(
            self.context, self.breaker, self.epoch_log, self.state_reader, self.loose_tail
        )
        self._inspector = Inspector(self.context, self.state_reader, self.deleter)
        self.parts = StoreParts(self.context, self.epoch_log, self.state_reader, self.deleter, self.compactor)
        self._committer = Committer(self.parts)
        self._retention = Retention(self.parts)
        self._reprocess = Reprocessor(self.parts)

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
        return self.breaker.tripped or self._writers.poisoned or self.epoch_log.marked_degraded

    def __repr__(self) -> str:
        return f"CheckpointStore({self.uri!r})"

    def close(self) -> None:
        self.context.close()

    # ------------------------------------------------------------------ writers (store/writers.py)

    def record_intent(self, checkpoint_id: str, paths: Sequence[str], *, epoch: int | None = None) -> bool:
        """Record that checkpoint ``checkpoint_id`` is about to create the output files ``paths``.

        Call it *before* creating each file. The record lets :meth:`commit` delete
        the file if the checkpoint never becomes valid; a file with no record is
        never deleted automatically. Visible to ``commit`` and ``check`` at once.
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

    # ------------------------------------------------------------------ epochs (store/epochs.py)

    def current_epoch(self) -> Epoch | None:
        """The latest epoch (with its status and degraded flag), or None before the first submit. Reads only."""
        return self.epoch_log.current()

    def list_epochs(self, since: int | None = None) -> list[Epoch]:
        """Every epoch record still in the store (from epoch ``since`` on, if given), oldest first. Reads only."""
        return self.epoch_log.all(since)

    def record_skip_audit(self, audit: SkipAudit) -> None:
        """Record what a row-key run found when it checked the input its shortcut skipped
        (store/input_audit.py): visible at once to :meth:`commit`, which refuses the commit while the
        audit is unresolved, and to :meth:`check`, which reports it. Idempotent (one record per epoch
        and source, last write wins). Raises :class:`StoreUnavailableError`."""
        write_skip_audit(self.context.blobs, audit)

    def skip_audit_epochs(self, since: int) -> list[int]:
        """The epochs from ``since`` on whose runs recorded a skip audit (one listing of ``epochs/``). Reads only."""
        return sorted(n for n in self.epoch_log.list_files().skip_audits if n >= since)

    def is_degraded(self, epoch: int) -> bool:
        """Whether ``epoch`` recorded that checkpointing was off somewhere (one listing of its degraded markers)."""
        return self.epoch_log.is_degraded(epoch)

    def is_current_epoch(self, epoch: int) -> bool:
        """True while no newer epoch exists (one HEAD request). Writers check it before writing."""
        return self.epoch_log.is_current(epoch)

    def begin_epoch(
        self,
        *,
        owner: str | None = None,
        expected_partitions: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        takeover: bool = False,
        output_roots: Sequence[str] | None = None,
        takeover_epoch: int | None = None,
    ) -> Epoch:
        """Open the next epoch (create-if-absent) with the valid checkpoints as its base.

        From the moment it returns, every checkpoint sealed in an older epoch is a
        zombie (never valid) and writers of older epochs are fenced. If the latest
        epoch is still open and held by another owner (or by no owner), raises
        :class:`EpochConflictError` unless ``takeover``; an owner may always take over
        its own open epoch (a retry of the same task). ``takeover_epoch=N`` takes over
        only epoch N: if another epoch is the latest by then (its owner came back and
        opened one), :class:`EpochConflictError` as without it. Two racing callers:
        exactly one wins, the other gets :class:`EpochConflictError`. Not idempotent.

        Folds loose manifests first only when their number reached ``max_loose_manifests`` (the
        sealers keep the tail under half of it), and then at most
        ``submit_fold_limit`` (500) of them (see :meth:`compact`): the rest stay loose for the
        job's driver to fold, so the submit's work is bounded however far compaction fell behind
        (a driver killed while compacting), and a bounded tail is only read, never folded, on the
        submit's critical path (folding costs about as many requests again as reading).

        ``output_roots``: the directories the epoch's job writes output under, recorded in the
        epoch record. Deletions (commit, discard, clear, retention) never reach output outside
        the declared roots (docs/design.md, section 7), and the job's driver may declare only
        roots under them. None: the driver declares each write's root itself
        (:meth:`declare_output_root`). Raises :class:`InvalidArgumentError` (``output_root``) for a root that is
        not an absolute ``file://``/``s3://`` directory, that overlaps the store root, or that is
        not in the store's scheme and bucket unless the store was opened with it among its
        ``trusted_output_roots`` (docs/security.md, "The trust model").
        """
        self.compactor.compact(min_loose=self.loose_tail.max_loose, limit=self.submit_fold_limit)
        state = self.state_reader.read(with_attempts=False, keep_files=False)
        return self.epoch_log.begin(
            state.latest,
            state.epoch_base(),
            owner=owner,
            expected_partitions=expected_partitions,
            metadata=metadata,
            takeover=takeover,
            output_roots=output_roots,
            takeover_epoch=takeover_epoch,
        )

    def rerun_plan(
        self, job: str | None, on_rerun: OnRerun | str = OnRerun.REPLACE, *, progress: Progress | None = None
    ) -> RerunPlan:
        """What the next submit of ``job`` (``JOB_METADATA_KEY`` of its epochs) does on this store —
        first, resume, replace, skip or incremental — and which commit's output is live (store/rerun.py).
        Reads only. ``progress``: a :meth:`progress` the caller already read (then only the newest commit
        record is read, not the state again)."""
        if progress is not None:
            latest = progress.epoch
            kept = progress.valid_checkpoints > 0 or progress.keys_done > 0  # valid checkpoints or a snapshot
            record = self.state_reader.commits.newest_commit_record()
        else:
            state = self.state_reader.read(with_attempts=False)
            latest = state.latest
            kept = state.snapshot is not None or bool(state.valid_ids)
            record = state.commit_record
        latest_job = None if latest is None else latest.metadata.get(JOB_METADATA_KEY)
        return plan_rerun(
            None if latest is None else latest.status,
            latest_job if isinstance(latest_job, str) else None,
            kept,
            record,
            job,
            OnRerun(on_rerun),
        )

    def declare_output_root(self, epoch: int, root: str) -> str:
        """Declare, before a write, that the job of ``epoch`` writes output under ``root``.

        For the Spark driver (never executors): the declaration is what lets commit, discard
        and clear delete that write's orphans; records naming anything outside every declared
        root are never acted on. Visible to every deletion at once; idempotent (one record per
        epoch and root). Returns the root in canonical form. Raises
        :class:`RefusedError` (``output_root_not_declared``) if the epoch's opener declared ``output_roots`` and
        ``root`` is under none of them (nothing was recorded: do not write),
        :class:`InvalidArgumentError` (``output_root``) (also for a root in another scheme or bucket than the
        store's that neither the opener's ``output_roots`` nor the store's trusted roots cover),
        :class:`StoreUnavailableError`.
        """
        return self.epoch_log.declare_output_root(epoch, root)

    def deletion_guard(self, explicit_roots: Sequence[str] | None = None) -> DeletionGuard:
        """The guard every deletion of this store passes, as the store stands now: its root and the
        declared output roots (docs/design.md, invariant 10). Code that deletes or moves output
        (reprocess, retraction) calls ``guard.check(uri)`` on every source and destination. Reads
        the epoch and commit records; changes nothing. ``explicit_roots`` count only for a store
        whose epochs declare none, as a commit's ``output_roots`` do.
        """
        return self.deleter.guard(explicit_roots)

    def set_expected_partitions(self, epoch: int, count: int) -> None:
        """Record how many partitions the job of ``epoch`` will seal (for progress). Idempotent."""
        self.epoch_log.set_expected_partitions(epoch, count)

    def end_epoch(self, epoch: int, *, status: EpochStatus, summary: Mapping[str, Any] | None = None) -> None:
        """Record how the submit of ``epoch`` ended (succeeded or failed). Idempotent (last write wins).

        A failed epoch cannot be committed; an ended epoch no longer blocks other owners.
        """
        self.epoch_log.write_end(epoch, EpochStatus(status), summary)

    def mark_degraded(self, epoch: int, reason: str) -> None:
        """Record, best effort, that ``epoch`` ran with checkpointing off somewhere.

        The commit of a degraded epoch keeps every file it cannot prove orphaned.
        Never raises: when the store is down the caller must report the degraded
        state through the job's result instead.
        """
        self.epoch_log.mark_degraded(epoch, reason)

    # ------------------------------------------------------------------ reading state (store/state.py)

    def get_checkpoint(self, checkpoint_id: str) -> Checkpoint | None:
        """The manifest of a sealed checkpoint (valid or not), or None. Raises :class:`CorruptCheckpointError`."""
        return self.state_reader.checkpoint(validate_checkpoint_id(checkpoint_id))

    def list_checkpoints(self) -> list[Checkpoint]:
        """Every sealed checkpoint in the store (valid or not), by seal time."""
        manifests = self.state_reader.read(with_status=False, with_attempts=False).manifests.values()
        return sorted(manifests, key=lambda c: (c.sealed_at, c.checkpoint_id))

    def valid_checkpoints(self) -> list[Checkpoint]:
        """The checkpoints whose keys count as done: base of the latest epoch + sealed in it, one per partition."""
        return self.state_reader.read(with_status=False, with_attempts=False).valid

    def key_sources(self) -> list[KeySource]:
        """Parts holding every done key (snapshot and valid checkpoints); picklable, for parallel reads."""
        return key_sources(
            self.state_reader.read(with_status=False, with_commits=False, with_attempts=False, keep_files=False)
        )

    def read_key_source(self, source: KeySource) -> pa.Table:
        """Read one part (on any machine that can open this store). Raises :class:`CorruptCheckpointError`."""
        return self.state_reader.keys.read_key_source(source)

    def get_checkpointed_keys(self) -> pa.Table:
        """Every done key: a table with one column ``key``.

        Done means held by the snapshot or by a valid checkpoint (checkpointed or
        committed). Reads are parallel. Raises :class:`InvalidArgumentError` (``key_type_mismatch``),
        :class:`CorruptCheckpointError`.
        """
        return self.state_reader.done_keys()

    def key_type(self) -> str | None:
        """The Arrow type (as a string) of the store's done keys, or None if there are none."""
        return self.state_reader.keys.key_type(
            self.state_reader.read(with_status=False, with_commits=False, with_attempts=False, keep_files=False)
        )

    def get_checkpointed_files(self) -> list[FileMetadata]:
        """Output files of valid checkpoints that are sealed but not yet committed."""
        state = self.state_reader.read(with_status=False, with_attempts=False)
        return self.state_reader.files.files_of([c for c in state.valid if c.status is CheckpointStatus.CHECKPOINTED])

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
        return self.compactor.compact(min_loose=min_loose, delete_retired=delete_retired)

    def background_compaction(self, *, interval: float = 10.0, min_loose: int = 500) -> BackgroundCompaction:
        """A context manager that compacts every ``interval`` seconds while its block runs, and once when it
        ends, each time only when at least ``min_loose`` manifests are loose. For a job's driver; never raises."""
        return BackgroundCompaction(self.compact, interval=interval, min_loose=min_loose)

    # ------------------------------------------------------------------ commit (store/commit.py)

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

        Idempotent and resumable: rerun after a crash in either phase finishes the
        job. Raises :class:`InvalidArgumentError` (``no_epoch``), :class:`RefusedError` (``epoch_failed``,
        ``overlapping_keys``, ``unknown_output_files``, ...) — nothing deleted in that case.
        """
        return self._committer.commit(output_roots, degraded=degraded, unknown_files=UnknownFiles(unknown_files))

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

    # ------------------------------------------------------------------ reprocess and rewind (store/reprocess/)

    def preview_reprocess(self, selection: Selection, *, delete: bool = False) -> ReprocessPlan:
        """What :meth:`reprocess` would do: the checkpoints, keys, exact files and bytes. Reads only.

        Raises the selection's typed errors (:class:`InvalidArgumentError` (``empty_selection``),
        :class:`NotFoundError` (``keys``),
        :class:`NotFoundError` (``input_files``), :class:`NotFoundError` (``epoch``), :class:`NotFoundError`
        (``commit``),
        :class:`UnsupportedError` (``selection_unavailable``)).
        """
        return self._reprocess.preview(selection, delete=delete)

    def reprocess(
        self,
        selection: Selection,
        *,
        delete: bool = False,
        expected: ReprocessPlan | str | None = None,
        takeover: bool = False,
        requested_by: str | None = None,
    ) -> ReprocessResult:
        """Make the selected checkpoints pending again and take their output files out of the output.

        Once it returns, readers see the selected checkpoints' keys as pending (the next run
        processes them) and their files are no longer in the output nor in the committed output:
        they are in ``quarantine/{epoch}/`` under the store root (``delete=True``: deleted, no undo).
        One maintenance epoch records the whole plan and fences writers, submits and commits.
        ``expected``: the plan (or its fingerprint) the caller confirmed; anything else is refused.
        Idempotent for a retry: the same call after a crash finishes the interrupted one.
        Raises the selection's errors, :class:`EpochConflictError` (``store_changed``), :class:`EpochConflictError`
        (an open epoch; ``takeover=True`` supersedes a dead one), :class:`EpochConflictError`
        (``reprocess_in_progress``),
        :class:`RefusedError` (``unsafe_path``) — nothing changed in each case.
        """
        return self._reprocess.reprocess(
            selection, delete=delete, expected=expected, takeover=takeover, requested_by=requested_by
        )

    def preview_rewind(self, to_commit: int, *, delete: bool = False) -> ReprocessPlan:
        """What :meth:`rewind` would do. Reads only. Raises :class:`NotFoundError` (``commit``),
        :class:`UnsupportedError` (``selection_unavailable``)."""
        return self._reprocess.preview_rewind(to_commit, delete=delete)

    def rewind(
        self,
        to_commit: int,
        *,
        delete: bool = False,
        expected: ReprocessPlan | str | None = None,
        takeover: bool = False,
        requested_by: str | None = None,
    ) -> ReprocessResult:
        """Return the store to its state after commit ``to_commit`` (0: before the first commit).

        Every checkpoint sealed after that commit becomes pending and its output (committed or
        not) leaves the output, as :meth:`reprocess` does, with the same fencing, atomicity,
        resumption and errors. A rewind to the latest commit does nothing (result epoch None).
        """
        return self._reprocess.rewind(
            to_commit, delete=delete, expected=expected, takeover=takeover, requested_by=requested_by
        )

    def preview_undo(self, epoch: int | None = None) -> ReprocessPlan:
        """What :meth:`undo_reprocess` would restore. Reads only; raises as :meth:`undo_reprocess`."""
        return self._reprocess.preview_undo(epoch)

    def undo_reprocess(
        self, epoch: int | None = None, *, expected: ReprocessPlan | str | None = None, requested_by: str | None = None
    ) -> ReprocessResult:
        """Undo reprocess ``epoch`` (default: the latest): its checkpoints are done again, exactly as
        before, and its files are copied back to the output (the quarantine keeps its copies until
        :meth:`purge_quarantine`). Only before the next run: once a run began, its keys may have been
        reprocessed. Fenced by its own epoch; a retry finishes an interrupted undo.
        Raises :class:`NotFoundError` (``reprocess``), :class:`RefusedError` (``undo_unavailable``) (a later run,
        deleted
        files), :class:`RefusedError` (``quarantine_missing``), :class:`EpochConflictError`
        (``reprocess_in_progress``) — nothing changed.
        """
        return self._reprocess.undo(epoch, expected=expected, requested_by=requested_by)

    def preview_purge(self, epoch: int) -> ReprocessPlan:
        """What :meth:`purge_quarantine` would delete for reprocess ``epoch``. Reads only."""
        return self._reprocess.preview_purge(epoch)

    def purge_quarantine(self, epoch: int | None = None, *, requested_by: str | None = None) -> ReprocessResult:
        """Delete the quarantined files of reprocess ``epoch`` (default: every finished reprocess) for
        good; undo is impossible afterwards. Deletes only under ``quarantine/`` in the store root.
        Idempotent. Raises :class:`NotFoundError` (``reprocess``), :class:`EpochConflictError`
        (``reprocess_in_progress``).
        """
        return self._reprocess.purge(epoch, requested_by=requested_by)

    def preview_resume(self) -> ReprocessPlan | None:
        """The unfinished reprocess, rewind, undo or purge as its maintenance epoch records it (every
        file), with ``refused_paths`` outside the output roots; None when nothing is unfinished. Reads only."""
        return self._reprocess.preview_resume()

    def resume_reprocess(self, *, expected: ReprocessPlan | str | None = None) -> ReprocessResult | None:
        """Finish an interrupted reprocess, rewind, undo or purge; None when nothing is unfinished.
        Idempotent. ``expected``: the :meth:`preview_resume` (or its fingerprint) a person confirmed;
        anything else is refused (:class:`EpochConflictError` (``store_changed``)). A plan naming files outside the
        output
        roots is never run (:class:`RefusedError` (``unsafe_path``), nothing changed): abandon it instead."""
        return self._reprocess.resume(expected=expected)

    def abandon_maintenance(self, *, expected: ReprocessPlan | str, requested_by: str | None = None) -> ReprocessPlan:
        """End the unfinished reprocess, rewind, undo or purge as failed without running its plan (a
        forged or unwanted intent), so submits and commits are no longer refused. Files it already
        moved stay in ``quarantine/{epoch}/``. ``expected``: the confirmed :meth:`preview_resume`.
        Returns the abandoned plan. Raises :class:`EpochConflictError` (``store_changed``)."""
        return self._reprocess.abandon(expected=expected, requested_by=requested_by)

    def list_reprocesses(self) -> list[ReprocessRecord]:
        """Every reprocess and rewind of the store (finished ones, and an unfinished one), oldest first."""
        return self._reprocess.records()

    # ------------------------------------------------------------------ inspection (store/inspection.py)

    def progress(self) -> Progress:
        """Where the store stands: epoch, sealed/expected partitions, keys, files, commit. Reads only.

        Raises :class:`CorruptCheckpointError` if a record does not parse (``check`` reports which).
        """
        return self._inspector.progress()

    def contents(self) -> StoreContents:
        """Everything the store holds, from one read of its records: sealed checkpoints and which
        are valid, directories of attempts that never sealed, key snapshots, keys done (what a
        clear or discard preview counts). Reads only; idempotent.

        Raises :class:`CorruptCheckpointError` if a record does not parse (``check`` reports which),
        :class:`StoreUnavailableError` if the store cannot be reached.
        """
        return self._inspector.contents()

    def epoch_record_uri(self, number: int) -> str:
        """The URI of epoch ``number``'s record. Once it exists, every writer of an older epoch is
        fenced: a writer with no store client (the tasks of Spark's own writer) checks for it before
        writing. Reads nothing; the record may not exist yet."""
        return f"{self.uri.rstrip('/')}/{epoch_key(number)}"

    def check(self, *, verify_output: bool = True) -> ConsistencyReport:
        """Audit the store without changing it (the consistency checker).

        Problems (guarantees at risk): manifests, epoch, commit or snapshot records
        that do not parse; parts a manifest names that are missing; base checkpoints
        of an uncommitted epoch with no manifest; overlapping keys among valid
        checkpoints; and (``verify_output``) output files missing from their location,
        both of valid checkpoints and of every commit record. Notes (expected after
        crashes, removed by the next commit): dangling unsealed checkpoint
        directories, duplicate sealed attempts of one partition. Also problems: intent records
        naming what no deletion may touch (outside the declared output roots, not a plain
        location, a name marker shorter than the minimum); they are never acted on.
        """
        return self._inspector.check(verify_output=verify_output)

    def refused_records(self) -> list[str]:
        """The intent records no deletion will act on, each with why (outside the declared output
        roots, not a plain ``file://``/``s3://`` location, a name marker shorter than the minimum):
        what clear, discard and commit would skip, for a confirmation to show beforehand. Reads
        every intent record; changes nothing. Raises :class:`StoreUnavailableError`."""
        return self._inspector.refused_records()
