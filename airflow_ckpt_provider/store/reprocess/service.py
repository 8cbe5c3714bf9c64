"""``store.reprocessing``: reprocess, rewind, undo and purge on one store (docs/reprocess.md).

Order of every action: read the store once; if the latest epoch is an unfinished maintenance
epoch, finish it when the request is the same action (a retry), else refuse; build the plan
(bad input raises here, before any write); compare it with what the caller confirmed; check
the fence; create the maintenance epoch; run the steps. The checks live in ``checks.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.store.errors import EpochConflictError
from airflow_ckpt_provider.store.model import EpochStatus
from airflow_ckpt_provider.store.reprocess.checks import (
    Expected,
    check_expected,
    check_fence,
    check_paths,
    empty_purge,
    in_progress,
    same_unfinished,
    unfinished,
    with_refusals,
)
from airflow_ckpt_provider.store.reprocess.guard import output_guard
from airflow_ckpt_provider.store.reprocess.model import PURGE, REPROCESS, REWIND, UNDO, ReprocessRecord, Selection
from airflow_ckpt_provider.store.reprocess.plan import ReprocessPlan, ReprocessResult
from airflow_ckpt_provider.store.reprocess.planner import purge_plan, retraction_plan, undo_plan
from airflow_ckpt_provider.store.reprocess.records import record_from_json
from airflow_ckpt_provider.store.reprocess.selection import resolve, resolve_rewind
from airflow_ckpt_provider.store.reprocess.steps import Steps
from airflow_ckpt_provider.store.reprocess.view import StoreView, Unit

if TYPE_CHECKING:
    from airflow_ckpt_provider.store.parts import StoreParts


class Reprocessing:
    """Retract part of a store's output, committed or not, and make its checkpoints pending again:
    ``store.reprocessing`` of a :class:`~airflow_ckpt_provider.store.store.CheckpointStore`.

    Each action has a preview that reads only; each action records its whole plan in one maintenance
    epoch that fences writers, submits and commits until it finishes (a retry, or :meth:`resume`).
    """

    def __init__(self, parts: StoreParts) -> None:
        self.parts = parts

    # ------------------------------------------------------------------ reprocess and rewind

    def preview(self, selection: Selection, *, delete: bool = False) -> ReprocessPlan:
        """What :meth:`run` would do: the checkpoints, keys, exact files and bytes. Reads only.

        Raises the selection's typed errors (:class:`InvalidArgumentError` (``empty_selection``),
        :class:`NotFoundError` (``keys``), :class:`NotFoundError` (``input_files``), :class:`NotFoundError`
        (``epoch``), :class:`NotFoundError` (``commit``), :class:`UnsupportedError` (``selection_unavailable``)).
        """
        view = StoreView.read(self.parts)
        pending = same_unfinished(view, REPROCESS, selection, None, delete)
        if pending is not None:
            return pending
        return _plan(view, REPROCESS, resolve(view, selection), selection, None, delete, None)

    def run(
        self,
        selection: Selection,
        *,
        delete: bool = False,
        expected: Expected = None,
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
        (``reprocess_in_progress``), :class:`RefusedError` (``unsafe_path``) — nothing changed in each case.
        """
        return self._retract(
            REPROCESS, lambda view: resolve(view, selection), selection, None, delete, expected, takeover, requested_by
        )

    def preview_rewind(self, to_commit: int, *, delete: bool = False) -> ReprocessPlan:
        """What :meth:`rewind` would do. Reads only. Raises :class:`NotFoundError` (``commit``),
        :class:`UnsupportedError` (``selection_unavailable``)."""
        view = StoreView.read(self.parts)
        pending = same_unfinished(view, REWIND, None, to_commit, delete)
        if pending is not None:
            return pending
        return _plan(view, REWIND, resolve_rewind(view, to_commit), None, to_commit, delete, None)

    def rewind(
        self,
        to_commit: int,
        *,
        delete: bool = False,
        expected: Expected = None,
        takeover: bool = False,
        requested_by: str | None = None,
    ) -> ReprocessResult:
        """Return the store to its state after commit ``to_commit`` (0: before the first commit).

        Every checkpoint sealed after that commit becomes pending and its output (committed or
        not) leaves the output, as :meth:`run` does, with the same fencing, atomicity,
        resumption and errors. A rewind to the latest commit does nothing (result epoch None).
        """
        return self._retract(
            REWIND,
            lambda view: resolve_rewind(view, to_commit),
            None,
            to_commit,
            delete,
            expected,
            takeover,
            requested_by,
        )

    # ------------------------------------------------------------------ undo and purge

    def preview_undo(self, epoch: int | None = None) -> ReprocessPlan:
        """What :meth:`undo` would restore. Reads only; raises as :meth:`undo`."""
        return undo_plan(StoreView.read(self.parts), epoch, requested_by=None)

    def undo(
        self, epoch: int | None = None, *, expected: Expected = None, requested_by: str | None = None
    ) -> ReprocessResult:
        """Undo reprocess ``epoch`` (default: the latest): its checkpoints are done again, exactly as
        before, and its files are copied back to the output (the quarantine keeps its copies until
        :meth:`purge`). Only before the next run: once a run began, its keys may have been
        reprocessed. Fenced by its own epoch; a retry finishes an interrupted undo.
        Raises :class:`NotFoundError` (``reprocess``), :class:`RefusedError` (``undo_unavailable``) (a later run,
        deleted files), :class:`RefusedError` (``quarantine_missing``), :class:`EpochConflictError`
        (``reprocess_in_progress``) — nothing changed.
        """
        view = StoreView.read(self.parts)
        pending = unfinished(view)
        if pending is not None:
            if pending.action == UNDO and epoch in (None, pending.target):
                return _finish(view, pending)
            raise in_progress(view, pending)
        plan = undo_plan(view, epoch, requested_by=requested_by)
        check_expected(view, plan, expected)
        steps = _steps(view)
        assert plan.target is not None
        steps.checked(plan.files, plan.target)  # a path outside the roots: refused before the fence, not after
        steps.open_epoch(plan)
        failpoint("store.undo.after_epoch")
        return steps.undo(plan)

    def preview_purge(self, epoch: int) -> ReprocessPlan:
        """What :meth:`purge` would delete for reprocess ``epoch``. Reads only."""
        return purge_plan(StoreView.read(self.parts), epoch, requested_by=None)

    def purge(self, epoch: int | None = None, *, requested_by: str | None = None) -> ReprocessResult:
        """Delete the quarantined files of reprocess ``epoch`` (default: every finished reprocess) for
        good; undo is impossible afterwards. Deletes only under ``quarantine/`` in the store root.
        Idempotent. Raises :class:`NotFoundError` (``reprocess``), :class:`EpochConflictError`
        (``reprocess_in_progress``).
        """
        view = StoreView.read(self.parts)
        pending = unfinished(view)
        if pending is not None:
            if pending.action == PURGE and epoch in (None, pending.target):
                return _finish(view, pending)
            raise in_progress(view, pending)
        targets = [epoch] if epoch is not None else sorted(set(view.retractions.records) - view.retractions.purged)
        results: list[ReprocessResult] = []
        for target in targets:
            plan = purge_plan(view, target, requested_by=requested_by)
            steps = _steps(view)
            if plan.new_epoch is not None:
                steps.open_epoch(plan)
                failpoint("store.purge.after_epoch")
            results.append(steps.purge(plan))
            view = StoreView.read(self.parts)
        if len(results) == 1:
            return results[0]
        plan = purge_plan(view, targets[-1], requested_by=requested_by) if targets else empty_purge(view)
        return ReprocessResult(
            action=PURGE,
            epoch=next((r.epoch for r in reversed(results) if r.epoch is not None), None),
            plan=plan,
            purged=tuple(sorted(p for r in results for p in r.purged)),
        )

    # ------------------------------------------------------------------ an unfinished action, the history

    def preview_resume(self) -> ReprocessPlan | None:
        """The unfinished reprocess, rewind, undo or purge as its maintenance epoch records it (every
        file), with ``refused_paths`` outside the output roots; None when nothing is unfinished. Reads only."""
        view = StoreView.read(self.parts)
        pending = unfinished(view)
        return None if pending is None else with_refusals(view, pending)

    def resume(self, *, expected: Expected = None) -> ReprocessResult | None:
        """Finish an interrupted reprocess, rewind, undo or purge; None when nothing is unfinished.
        Idempotent. ``expected``: the :meth:`preview_resume` (or its fingerprint) a person confirmed;
        anything else is refused (:class:`EpochConflictError` (``store_changed``)). A plan naming files outside
        the output roots is never run (:class:`RefusedError` (``unsafe_path``), nothing changed): abandon it
        instead."""
        view = StoreView.read(self.parts)
        pending = unfinished(view)
        if pending is None:
            return None
        plan = with_refusals(view, pending)
        check_expected(view, plan, expected)
        check_paths(view, plan, resuming=True)
        return _finish(view, pending)

    def abandon(self, *, expected: ReprocessPlan | str, requested_by: str | None = None) -> ReprocessPlan:
        """End the unfinished reprocess, rewind, undo or purge as failed without running its plan (a
        forged or unwanted intent), so submits and commits are no longer refused. Files it already
        moved stay in ``quarantine/{epoch}/``. ``expected``: the confirmed :meth:`preview_resume`.
        Returns the abandoned plan. Raises :class:`EpochConflictError` (``store_changed``)."""
        view = StoreView.read(self.parts)
        pending = unfinished(view)
        if pending is None or pending.new_epoch is None:
            raise EpochConflictError(
                f"{self.parts.uri} has no unfinished reprocess, rewind, undo or purge any more", reason="store_changed"
            )
        plan = with_refusals(view, pending)
        check_expected(view, plan, expected)
        self.parts.epoch_log.write_end(
            pending.new_epoch,
            EpochStatus.FAILED,
            {"reason": "abandoned: its plan was not run", "abandoned_by": requested_by, "files": len(plan.files)},
        )
        return plan

    def records(self) -> list[ReprocessRecord]:
        """Every reprocess and rewind of the store (finished ones, and an unfinished one), oldest first."""
        view = StoreView.read(self.parts)
        records = view.retractions.as_records()
        pending = unfinished(view)
        if pending is not None and pending.action in (REPROCESS, REWIND) and pending.new_epoch is not None:
            data = pending.to_json() | {"files": [f.to_json() for f in pending.files]}
            records.append(record_from_json(pending.new_epoch, data, undone=False, purged=False))
        return records

    # ------------------------------------------------------------------ internals

    def _retract(
        self,
        action: str,
        resolver: Callable[[StoreView], list[Unit]],
        selection: Selection | None,
        to_commit: int | None,
        delete: bool,
        expected: Expected,
        takeover: bool,
        requested_by: str | None,
    ) -> ReprocessResult:
        view = StoreView.read(self.parts)
        pending = same_unfinished(view, action, selection, to_commit, delete)
        if pending is not None:
            return _finish(view, pending)
        units = resolver(view)
        plan = _plan(view, action, units, selection, to_commit, delete, requested_by)
        check_expected(view, plan, expected)
        if plan.nothing_to_do and not plan.refused_paths:
            return ReprocessResult(action=action, epoch=None, plan=plan)
        check_paths(view, plan)
        check_fence(view, takeover)
        failpoint("store.reprocess.before_epoch")
        steps = _steps(view)
        steps.open_epoch(plan, supersede=view.state.latest if takeover else None)
        failpoint("store.reprocess.after_epoch")
        return steps.retract(plan)


def _plan(
    view: StoreView,
    action: str,
    units: list[Unit],
    selection: Selection | None,
    to_commit: int | None,
    delete: bool,
    requested_by: str | None,
) -> ReprocessPlan:
    return retraction_plan(
        view,
        units,
        action=action,
        selection=selection,
        to_commit=to_commit,
        delete=delete,
        allowed=output_guard(view).allows,
        requested_by=requested_by,
    )


def _steps(view: StoreView) -> Steps:
    """Steps checking every source and destination against the store's deletion guard."""
    return Steps(view.parts, output_guard(view).guard)


def _finish(view: StoreView, plan: ReprocessPlan) -> ReprocessResult:
    steps = _steps(view)
    if plan.action == UNDO:
        return steps.undo(plan, resumed=True)
    if plan.action == PURGE:
        return steps.purge(plan, resumed=True)
    return steps.retract(plan, resumed=True)
