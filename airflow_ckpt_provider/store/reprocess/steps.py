"""The steps of reprocess, rewind, undo and purge after their maintenance epoch exists.

Every step is idempotent and reads only the plan (the epoch record) and the objects it moves, so
the same code runs the first time and when a re-run finishes what a crash left
(docs/reprocess.md, "Steps and crash points"). Paths from the plan are input too: each one is
checked against the deletion guard again here, and quarantine keys are recomputed, never read.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.store.blobs.base import BlobNotFoundError, BlobStore
from airflow_ckpt_provider.store.deletion_guard import DeletionGuard, canonical_uri
from airflow_ckpt_provider.store.epochs import EpochBase
from airflow_ckpt_provider.store.errors import (
    CorruptCheckpointError,
    EpochConflictError,
    PreconditionFailedError,
    RefusedError,
)
from airflow_ckpt_provider.store.model import Epoch, EpochStatus
from airflow_ckpt_provider.store.records import now
from airflow_ckpt_provider.store.reprocess.lineage import derive_snapshot
from airflow_ckpt_provider.store.reprocess.model import DELETE, PURGE, UNDO, dumps
from airflow_ckpt_provider.store.reprocess.plan import PlannedFile, ReprocessPlan, ReprocessResult
from airflow_ckpt_provider.store.reprocess.planner import quarantine_key
from airflow_ckpt_provider.store.reprocess.records import PLAN_FIELD, marker_key, quarantine_prefix, record_key

if TYPE_CHECKING:
    from airflow_ckpt_provider.store.parts import StoreParts

MOVED, DELETED, MISSING = "moved", "deleted", "missing"


class Steps:
    """Runs a plan against the store of ``parts``. ``guard``: the store's deletion guard (which paths may be
    touched, and the root below which no link is followed on the way to each)."""

    def __init__(self, parts: StoreParts, guard: DeletionGuard) -> None:
        self.parts = parts
        self.blobs = parts.blobs
        self.guard = guard

    # ------------------------------------------------------------------ the fence

    def open_epoch(self, plan: ReprocessPlan, *, supersede: Epoch | None = None) -> None:
        """Create the maintenance epoch (create-if-absent): the atomic intent and the fence."""
        assert plan.new_epoch is not None
        plan_record = plan.to_json()
        plan_record.pop("description", None)
        epochs = self.parts.epoch_log
        epochs.open_fencing(
            plan.new_epoch,
            owner=f"{plan.action}:{plan.requested_by or 'api'}",
            base=EpochBase(tuple(plan.new_base), plan.snapshot_from),
            metadata={"action": plan.action, PLAN_FIELD: True},
            extra={PLAN_FIELD: plan_record},
            conflict=(
                f"another submit or reprocess opened epoch {plan.new_epoch} of {self.parts.uri} at the same time; "
                "nothing was changed. Look at the store again (`airflow-ckpt progress`) and retry"
            ),
        )
        epochs.end_superseded(supersede, f"superseded by {plan.action} epoch {plan.new_epoch}")

    def _end(self, plan: ReprocessPlan, status: EpochStatus, summary: dict[str, Any]) -> None:
        assert plan.new_epoch is not None
        self.parts.epoch_log.write_end(plan.new_epoch, status, summary)

    # ------------------------------------------------------------------ reprocess / rewind

    def retract(self, plan: ReprocessPlan, *, resumed: bool = False) -> ReprocessResult:
        number = plan.new_epoch
        assert number is not None
        if plan.snapshot_drop:
            derive_snapshot(self.parts.context, plan.new_epoch, plan.snapshot_from, plan.snapshot_drop)
        failpoint("store.reprocess.after_snapshot")
        outcomes = self._move(plan) if plan.mode != DELETE else self._delete(plan)
        record = {
            "format_version": 1,
            "epoch": number,
            "action": plan.action,
            "mode": plan.mode,
            "selection": None if plan.selection is None else plan.selection.to_json(),
            "to_commit": plan.to_commit,
            "requested_by": plan.requested_by,
            "created_at": plan.created_at,
            "finished_at": now(),
            "previous": plan.previous.to_json(),
            "checkpoints": list(plan.checkpoints),
            "committed_checkpoints": plan.committed_checkpoints,
            "keys": plan.keys,
            "snapshot_drop": list(plan.snapshot_drop),
            "files": [f.to_json() | {"outcome": outcomes[f.path]} for f in plan.files],
        }
        self.blobs.put(record_key(number), dumps(record))
        failpoint("store.reprocess.before_end")
        result = ReprocessResult(
            action=plan.action,
            epoch=number,
            plan=plan,
            moved=tuple(p for p, o in sorted(outcomes.items()) if o == MOVED),
            deleted=tuple(p for p, o in sorted(outcomes.items()) if o == DELETED),
            missing=tuple(p for p, o in sorted(outcomes.items()) if o == MISSING),
            resumed=resumed,
        )
        self._end(plan, EpochStatus.RETRACTED, result.summary())
        return result

    def checked(self, files: Sequence[PlannedFile], number: int) -> list[tuple[PlannedFile, str]]:
        """Each file with its recomputed quarantine key; refuse the lot if any path is not allowed."""
        refused = [f.path for f in files if not self.guard.allows(f.path)]
        if refused:
            raise RefusedError(
                f"the plan of epoch {number} of {self.parts.uri} names files outside the store root and the "
                f"output roots, or reached through a symbolic link (e.g. {refused[:3]}; the first: "
                f"{self.guard.refusal(refused[0])}): nothing more is touched. Run `airflow-ckpt check`",
                reason="unsafe_path",
            )
        return [(f, quarantine_key(number, f.path)) for f in files]

    def _present(self, files: Sequence[PlannedFile]) -> dict[str, int]:
        """Canonical output path -> size of the planned files that exist (one listing per directory).
        Canonical: a record may spell a path another way (``file://localhost/...``), and the file is the same."""
        by_dir: dict[str, set[str]] = defaultdict(set)
        for f in files:
            path = canonical_uri(f.path)
            by_dir[path.rsplit("/", 1)[0]].add(path)

        def listed(directory: str) -> dict[str, int]:
            blobs = self._output_dir(directory)
            wanted = by_dir[directory]
            sizes = {canonical_uri(blobs.child_uri(i.key)): i.size for i in blobs.list("") if "/" not in i.key}
            return {p: size for p, size in sizes.items() if p in wanted}

        found: dict[str, int] = {}
        for sizes in self.parts.context.map(listed, sorted(by_dir)):
            found.update(sizes)
        return found

    def _output_dir(self, directory: str) -> BlobStore:
        return self.parts.context.output_store(directory, anchor=self.guard.anchor_of(directory))

    def _output(self, path: str) -> tuple[BlobStore, str]:
        directory, _, name = canonical_uri(path).rpartition("/")
        return self._output_dir(directory), name

    def _move(self, plan: ReprocessPlan) -> dict[str, str]:
        number = plan.new_epoch
        assert number is not None
        files = self.checked(plan.files, number)
        present = self._present(plan.files)
        stored = {i.key: i.size for i in self.blobs.list(quarantine_prefix(number))}

        def copy(item: tuple[PlannedFile, str]) -> None:
            planned, key = item
            size = present.get(canonical_uri(planned.path))
            if size is not None and stored.get(key) != size:
                blobs, name = self._output(planned.path)
                self.blobs.copy_from(blobs, name, key)
                failpoint("store.reprocess.after_copy")

        self.parts.context.map(copy, files)
        self.blobs.discard_interrupted_writes([key for _, key in files])  # a killed earlier run's copies
        copied = {i.key: i.size for i in self.blobs.list(quarantine_prefix(number))}
        short = [f.path for f, key in files if _size(present, f) is not None and copied.get(key) != _size(present, f)]
        if short:
            raise CorruptCheckpointError(
                f"the quarantine copies of {short[:3]} do not match the originals; nothing was deleted. "
                f"Run the reprocess again (it resumes)",
                reason="corrupt",
            )
        if not self.parts.epoch_log.is_current(number):
            raise EpochConflictError(
                f"epoch {number} of {self.parts.uri} was superseded while its files were being moved; the "
                "originals still in the output are kept. Run `airflow-ckpt check`",
                reason="epoch_fenced",
            )
        self._delete_originals(
            [f.path for f, _ in files if _size(present, f) is not None], "store.reprocess.after_move"
        )
        return {f.path: MOVED if key in copied else MISSING for f, key in files}

    def _delete(self, plan: ReprocessPlan) -> dict[str, str]:
        number = plan.new_epoch
        assert number is not None
        files = self.checked(plan.files, number)
        present = self._present(plan.files)
        self._delete_originals(
            [f.path for f, _ in files if _size(present, f) is not None], "store.reprocess.after_move"
        )
        return {f.path: DELETED if _size(present, f) is not None else MISSING for f, _ in files}

    def _delete_originals(self, paths: Sequence[str], point: str) -> None:
        self.parts.deleter.delete_output_files(paths, after_batch=lambda: failpoint(point))

    # ------------------------------------------------------------------ undo

    def undo(self, plan: ReprocessPlan, *, resumed: bool = False) -> ReprocessResult:
        target = plan.target
        assert target is not None
        files = self.checked(plan.files, target)
        present = self._present(plan.files)
        restored: list[str] = []
        missing: list[str] = []

        def restore(item: tuple[PlannedFile, str]) -> str | None:
            planned, key = item
            size = _size(present, planned)
            if size is not None:
                # Never overwrite: the same size is this undo's own earlier copy (a resumed run); another
                # file there is someone else's, and stays (docs/security.md, "The trust model").
                return planned.path if size == planned.size_bytes else None
            blobs, name = self._output(planned.path)
            try:
                # Create-if-absent: a file that appeared since the listing (or one two entries of a forged
                # record name twice) is never overwritten.
                blobs.copy_from(self.blobs, key, name, if_absent=True)
            except (BlobNotFoundError, PreconditionFailedError):
                return None
            failpoint("store.undo.after_restore")
            return planned.path

        for (planned, _), done in zip(files, self.parts.context.map(restore, files), strict=True):
            (restored if done else missing).append(planned.path)
        self._discard_interrupted_restores([f.path for f, _ in files])
        # The reprocess's snapshot is obsolete now (the undo epoch names the previous one).
        self.parts.deleter.delete_snapshot(target)
        self.blobs.put(marker_key(target, "undone"), dumps({"epoch": target, "by": plan.new_epoch, "at": now()}))
        failpoint("store.undo.before_end")
        result = ReprocessResult(
            action=UNDO,
            epoch=plan.new_epoch,
            plan=plan,
            restored=tuple(sorted(restored)),
            missing=tuple(sorted(missing)),
            resumed=resumed,
        )
        before = plan.previous.status
        status = EpochStatus(before) if before in ("succeeded", "failed") else EpochStatus.RESTORED
        self._end(plan, status, result.summary())
        return result

    def _discard_interrupted_restores(self, paths: Sequence[str]) -> None:
        """A run of this undo killed mid-restore left a temporary copy beside its destination: a
        hidden file that commit never lists, and a second copy of the rows for readers that list
        hidden files. The undo epoch fences every other writer of these names until it ends
        (docs/reprocess.md, "Steps and crash points")."""
        by_dir: dict[str, list[str]] = defaultdict(list)
        for path in paths:
            directory, _, name = canonical_uri(path).rpartition("/")
            by_dir[directory].append(name)
        for directory, names in sorted(by_dir.items()):
            self._output_dir(directory).discard_interrupted_writes(names)

    # ------------------------------------------------------------------ purge

    def purge(self, plan: ReprocessPlan, *, resumed: bool = False) -> ReprocessResult:
        target = plan.target
        assert target is not None
        prefix = quarantine_prefix(target)
        keys = [i.key for i in self.blobs.list(prefix)]
        self.parts.deleter.delete_records(keys, after_batch=lambda: failpoint("store.purge.during_delete"))
        self.blobs.put(marker_key(target, "purged"), dumps({"epoch": target, "at": now(), "files": len(keys)}))
        failpoint("store.purge.before_end")
        result = ReprocessResult(
            action=PURGE,
            epoch=plan.new_epoch,
            plan=plan,
            purged=tuple(sorted(f.path for f in plan.files)),
            resumed=resumed,
        )
        if plan.new_epoch is not None:
            self._end(plan, EpochStatus.RETRACTED, result.summary())
        return result


def _size(present: dict[str, int], planned: PlannedFile) -> int | None:
    """The size of ``planned``'s file in the output now (None: absent), whatever spelling its record uses."""
    return present.get(canonical_uri(planned.path))
