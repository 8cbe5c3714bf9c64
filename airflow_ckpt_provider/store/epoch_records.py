"""``store.epochs``: open and end epochs, and the records a run keeps in its epoch (fencing).

An epoch is one submit of a job; opening the next one fences every writer of the older ones
(docs/design.md, section 4.2). Each call delegates to ``store/epochs.py`` (``EpochLog``); opening
one first folds part of the loose tail and reads the state for the new epoch's base.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_ckpt_provider.store.compaction import SUBMIT_FOLD_LIMIT
from airflow_ckpt_provider.store.input_audit import SkipAudit, write_skip_audit
from airflow_ckpt_provider.store.layout import epoch_key
from airflow_ckpt_provider.store.model import JOB_METADATA_KEY, Epoch, EpochStatus
from airflow_ckpt_provider.store.parts import StoreParts
from airflow_ckpt_provider.store.rerun import job_name
from airflow_ckpt_provider.store.tail import LooseTail


class EpochRecords:
    """The epochs of a store: ``store.epochs`` of a :class:`~airflow_ckpt_provider.store.store.CheckpointStore`."""

    def __init__(self, parts: StoreParts, loose_tail: LooseTail) -> None:
        self._parts = parts
        self._log = parts.epoch_log
        self._loose_tail = loose_tail
        #: Loose checkpoints :meth:`begin` folds at most (its work stays bounded; the driver folds the rest).
        self.submit_fold_limit = SUBMIT_FOLD_LIMIT

    # ------------------------------------------------------------------ a submit: begin and end

    def begin(
        self,
        *,
        job: str | None = None,
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
        ``submit_fold_limit`` (500) of them (see ``store.housekeeping.compact``): the rest stay loose for the
        job's driver to fold, so the submit's work is bounded however far compaction fell behind
        (a driver killed while compacting), and a bounded tail is only read, never folded, on the
        submit's critical path (folding costs about as many requests again as reading).

        ``job``: what the run writes, recorded in the epoch (metadata ``job``) and copied by the commit into
        its record: the store's history says from it what a new run does (``inspection.rerun_plan``) and
        which earlier output its commit replaces (store/rerun.py). None: the store's one output
        (``DEFAULT_JOB``): one store, one output, when nobody says otherwise. Name it when runs of several
        outputs share the store (a store for every date of a daily job: the date). Raises
        :class:`InvalidArgumentError` (``job``) for an empty name, or for ``metadata`` naming a job itself.

        ``output_roots``: the directories the epoch's job writes output under, recorded in the
        epoch record. Deletions (commit, discard, clear, retention) never reach output outside
        the declared roots (docs/design.md, section 7), and the job's driver may declare only
        roots under them. None: the driver declares each write's root itself
        (:meth:`declare_output_root`). Raises :class:`InvalidArgumentError` (``output_root``) for a root that is
        not an absolute ``file://``/``s3://`` directory, that overlaps the store root, or that is
        not in the store's scheme and bucket unless the store was opened with it among its
        ``trusted_output_roots`` (docs/security.md, "The trust model").
        """
        # A root that cannot be declared, or a job not a name, refuses the submit before the store is touched.
        declared = None if output_roots is None else tuple(self._parts.roots.declarable(r) for r in output_roots)
        recorded = {**(metadata or {}), JOB_METADATA_KEY: job_name(job, metadata)}
        self._parts.compactor.compact(min_loose=self._loose_tail.max_loose, limit=self.submit_fold_limit)
        state = self._parts.reader.read(with_attempts=False, keep_files=False)
        return self._log.begin(
            state.latest,
            state.epoch_base(),
            owner=owner,
            expected_partitions=expected_partitions,
            metadata=recorded,
            takeover=takeover,
            output_roots=declared,
            takeover_epoch=takeover_epoch,
        )

    def end(self, epoch: int, *, status: EpochStatus, summary: Mapping[str, Any] | None = None) -> None:
        """Record how the submit of ``epoch`` ended (succeeded or failed). Idempotent (last write wins).

        A failed epoch cannot be committed; an ended epoch no longer blocks other owners.
        """
        self._log.write_end(epoch, EpochStatus(status), summary)

    # ------------------------------------------------------------------ what a run records in its epoch

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
        return self._parts.roots.declare(epoch, root)

    def set_expected_partitions(self, epoch: int, count: int) -> None:
        """Record how many partitions the job of ``epoch`` will seal (for progress). Idempotent."""
        self._log.set_expected_partitions(epoch, count)

    def mark_degraded(self, epoch: int, reason: str) -> None:
        """Record, best effort, that ``epoch`` ran with checkpointing off somewhere.

        The commit of a degraded epoch keeps every file it cannot prove orphaned.
        Never raises: when the store is down the caller must report the degraded
        state through the job's result instead.
        """
        self._log.mark_degraded(epoch, reason)

    def record_skip_audit(self, audit: SkipAudit) -> None:
        """Record what a row-key run found when it checked the input its shortcut skipped
        (store/input_audit.py): visible at once to ``store.commit``, which refuses the commit while the
        audit is unresolved, and to ``store.inspection.check``, which reports it. Idempotent (one record
        per epoch and source, last write wins). Raises :class:`StoreUnavailableError`."""
        write_skip_audit(self._parts.blobs, audit)

    # ------------------------------------------------------------------ reading epoch records

    def current(self) -> Epoch | None:
        """The latest epoch (with its status and degraded flag), or None before the first submit. Reads only."""
        return self._log.current()

    def is_current(self, epoch: int) -> bool:
        """True while no newer epoch exists (one HEAD request). Writers check it before writing."""
        return self._log.is_current(epoch)

    def record_uri(self, number: int) -> str:
        """The URI of epoch ``number``'s record. Once it exists, every writer of an older epoch is
        fenced: a writer with no store client (the tasks of Spark's own writer) checks for it before
        writing. Reads nothing; the record may not exist yet."""
        return f"{self._parts.uri.rstrip('/')}/{epoch_key(number)}"

    def all(self, since: int | None = None) -> list[Epoch]:
        """Every epoch record still in the store (from epoch ``since`` on, if given), oldest first. Reads only."""
        return self._log.all(since)

    def is_degraded(self, epoch: int) -> bool:
        """Whether ``epoch`` recorded that checkpointing was off somewhere (one listing of its degraded markers)."""
        return self._log.is_degraded(epoch)

    def skip_audit_epochs(self, since: int) -> list[int]:
        """The epochs from ``since`` on whose runs recorded a skip audit (one listing of ``epochs/``). Reads only."""
        return sorted(n for n in self._log.list_files().skip_audits if n >= since)
