"""The entry points behind ``CheckpointStore.reprocess`` and friends: plan, check, fence, run.

Order of every action: read the store once; if the latest epoch is an unfinished maintenance
epoch, finish it when the request is the same action (a retry), else refuse; build the plan
(bad input raises here, before any write); compare it with what the caller confirmed; check
the fence; create the maintenance epoch; run the steps (docs/reprocess.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.store.errors import EpochConflictError, RefusedError
from airflow_ckpt_provider.store.model import EpochStatus
from airflow_ckpt_provider.store.reprocess.guard import OutputGuard, output_guard
from airflow_ckpt_provider.store.reprocess.model import (
    PURGE,
    REPROCESS,
    REWIND,
    UNDO,
    ReprocessRecord,
    Selection,
    canonical,
)
from airflow_ckpt_provider.store.reprocess.plan import ReprocessPlan, ReprocessResult
from airflow_ckpt_provider.store.reprocess.planner import purge_plan, retraction_plan, undo_plan
from airflow_ckpt_provider.store.reprocess.records import record_from_json
from airflow_ckpt_provider.store.reprocess.selection import resolve, resolve_rewind
from airflow_ckpt_provider.store.reprocess.steps import Steps
from airflow_ckpt_provider.store.reprocess.view import StoreView, Unit

if TYPE_CHECKING:
    from airflow_ckpt_provider.store.parts import StoreParts

Expected = ReprocessPlan | str | None


class Reprocessor:
    """Reprocess, rewind, undo and purge on one store (see ``CheckpointStore`` for the contract)."""

    def __init__(self, parts: StoreParts) -> None:
        self.parts = parts

    # ------------------------------------------------------------------ previews

    def preview(self, selection: Selection, *, delete: bool = False) -> ReprocessPlan:
        view = StoreView.read(self.parts)
        unfinished = self._same_unfinished(view, REPROCESS, selection, None, delete)
        if unfinished is not None:
            return unfinished
        return self._plan(view, REPROCESS, resolve(view, selection), selection, None, delete, None)

    def preview_rewind(self, to_commit: int, *, delete: bool = False) -> ReprocessPlan:
        view = StoreView.read(self.parts)
        unfinished = self._same_unfinished(view, REWIND, None, to_commit, delete)
        if unfinished is not None:
            return unfinished
        return self._plan(view, REWIND, resolve_rewind(view, to_commit), None, to_commit, delete, None)

    def preview_undo(self, epoch: int | None = None) -> ReprocessPlan:
        return undo_plan(StoreView.read(self.parts), epoch, requested_by=None)

    def preview_purge(self, epoch: int) -> ReprocessPlan:
        return purge_plan(StoreView.read(self.parts), epoch, requested_by=None)

    # ------------------------------------------------------------------ actions

    def reprocess(
        self,
        selection: Selection,
        *,
        delete: bool,
        expected: Expected,
        takeover: bool,
        requested_by: str | None,
    ) -> ReprocessResult:
        return self._retract(
            REPROCESS, lambda view: resolve(view, selection), selection, None, delete, expected, takeover, requested_by
        )

    def rewind(
        self, to_commit: int, *, delete: bool, expected: Expected, takeover: bool, requested_by: str | None
    ) -> ReprocessResult:
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

    def undo(self, epoch: int | None, *, expected: Expected, requested_by: str | None) -> ReprocessResult:
        view = StoreView.read(self.parts)
        unfinished = self._unfinished(view)
        if unfinished is not None:
            if unfinished.action == UNDO and epoch in (None, unfinished.target):
                return self._finish(view, unfinished)
            raise self._in_progress(view, unfinished)
        plan = undo_plan(view, epoch, requested_by=requested_by)
        self._check_expected(plan, expected)
        steps = self._steps(view)
        assert plan.target is not None
        steps.checked(plan.files, plan.target)  # a path outside the roots: refused before the fence, not after
        steps.open_epoch(plan)
        failpoint("store.undo.after_epoch")
        return steps.undo(plan)

    def purge(self, epoch: int | None, *, requested_by: str | None) -> ReprocessResult:
        view = StoreView.read(self.parts)
        unfinished = self._unfinished(view)
        if unfinished is not None:
            if unfinished.action == PURGE and epoch in (None, unfinished.target):
                return self._finish(view, unfinished)
            raise self._in_progress(view, unfinished)
        targets = [epoch] if epoch is not None else sorted(set(view.retractions.records) - view.retractions.purged)
        results: list[ReprocessResult] = []
        for target in targets:
            plan = purge_plan(view, target, requested_by=requested_by)
            steps = self._steps(view)
            if plan.new_epoch is not None:
                steps.open_epoch(plan)
                failpoint("store.purge.after_epoch")
            results.append(steps.purge(plan))
            view = StoreView.read(self.parts)
        if len(results) == 1:
            return results[0]
        plan = purge_plan(view, targets[-1], requested_by=requested_by) if targets else self._empty_purge(view)
        return ReprocessResult(
            action=PURGE,
            epoch=next((r.epoch for r in reversed(results) if r.epoch is not None), None),
            plan=plan,
            purged=tuple(sorted(p for r in results for p in r.purged)),
        )

    def preview_resume(self) -> ReprocessPlan | None:
        """The unfinished maintenance plan as the store records it, with ``refused_paths``: its files
        outside the output roots (a resume refuses while any). None when nothing is unfinished."""
        view = StoreView.read(self.parts)
        unfinished = self._unfinished(view)
        if unfinished is None:
            return None
        return self._with_refusals(view, unfinished)

    def resume(self, *, expected: Expected = None) -> ReprocessResult | None:
        view = StoreView.read(self.parts)
        unfinished = self._unfinished(view)
        if unfinished is None:
            return None
        plan = self._with_refusals(view, unfinished)
        self._check_expected(plan, expected)
        if plan.refused_paths and plan.action != PURGE:
            raise RefusedError(
                f"the unfinished {plan.action} of {self.parts.uri} (epoch {plan.new_epoch}) names "
                f"{len(plan.refused_paths)} file(s) outside the output roots (e.g. {list(plan.refused_paths[:3])}): "
                "it was not made by this store's DAG and is not resumed. Nothing was changed; abandon it "
                "(`airflow-ckpt abandon`, or Abandon in the Checkpoints tab) and run `airflow-ckpt check`",
                reason="unsafe_path",
            )
        return self._finish(view, unfinished)

    def abandon(self, *, expected: Expected, requested_by: str | None) -> ReprocessPlan:
        """End the unfinished maintenance epoch as failed without running its plan (a forged or
        unwanted intent). ``expected``: the fingerprint of :meth:`preview_resume` the person saw."""
        view = StoreView.read(self.parts)
        unfinished = self._unfinished(view)
        if unfinished is None or unfinished.new_epoch is None:
            raise EpochConflictError(
                f"{self.parts.uri} has no unfinished reprocess, rewind, undo or purge any more", reason="store_changed"
            )
        plan = self._with_refusals(view, unfinished)
        self._check_expected(plan, expected)
        self.parts.epochs.write_end(
            unfinished.new_epoch,
            EpochStatus.FAILED,
            {"reason": "abandoned: its plan was not run", "abandoned_by": requested_by, "files": len(plan.files)},
        )
        return plan

    def _with_refusals(self, view: StoreView, plan: ReprocessPlan) -> ReprocessPlan:
        if plan.action == PURGE:  # a purge deletes only the store's own quarantine records
            return plan
        allowed = output_guard(view).allows
        refused = tuple(sorted(f.path for f in plan.files if not allowed(f.path)))
        return dataclasses.replace(plan, refused_paths=refused)

    def records(self) -> list[ReprocessRecord]:
        view = StoreView.read(self.parts)
        records = view.retractions.as_records()
        unfinished = self._unfinished(view)
        if unfinished is not None and unfinished.action in (REPROCESS, REWIND) and unfinished.new_epoch is not None:
            data = unfinished.to_json() | {"files": [f.to_json() for f in unfinished.files]}
            records.append(record_from_json(unfinished.new_epoch, data, undone=False, purged=False))
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
        unfinished = self._same_unfinished(view, action, selection, to_commit, delete)
        if unfinished is not None:
            return self._finish(view, unfinished)
        units = resolver(view)
        plan = self._plan(view, action, units, selection, to_commit, delete, requested_by)
        self._check_expected(plan, expected)
        if plan.nothing_to_do and not plan.refused_paths:
            return ReprocessResult(action=action, epoch=None, plan=plan)
        if plan.refused_paths:
            raise RefusedError(
                f"the records of {self.parts.uri} name {len(plan.refused_paths)} file(s) outside its root and the "
                f"output roots (e.g. {list(plan.refused_paths[:3])}); they are never touched, so this {action} "
                "cannot make the output exactly-once. Nothing was changed; run `airflow-ckpt check`, and declare "
                "the job's real output roots if those files are yours",
                reason="unsafe_path",
            )
        self._check_fence(view, takeover)
        failpoint("store.reprocess.before_epoch")
        steps = Steps(self.parts, self._guard(view, units).allows)
        steps.open_epoch(plan, supersede=view.state.latest if takeover else None)
        failpoint("store.reprocess.after_epoch")
        return steps.retract(plan)

    def _plan(
        self,
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
            allowed=self._guard(view, units).allows,
            requested_by=requested_by,
        )

    def _guard(self, view: StoreView, units: list[Unit]) -> OutputGuard:
        return output_guard(view, {u.commit for u in units if u.commit is not None})

    def _steps(self, view: StoreView) -> Steps:
        """Steps for undo, purge and resume: the guard of every commit (their plans name no commits)."""
        return Steps(self.parts, output_guard(view).allows)

    def _unfinished(self, view: StoreView) -> ReprocessPlan | None:
        latest = view.state.latest
        if latest is None or latest.status is not EpochStatus.OPEN:
            return None
        plan = view.maintenance_plan()
        return None if plan is None else ReprocessPlan.from_json(plan)

    def _same_unfinished(
        self, view: StoreView, action: str, selection: Selection | None, to_commit: int | None, delete: bool
    ) -> ReprocessPlan | None:
        """The unfinished plan if it is this very request (a retry finishes it); raise if another is."""
        unfinished = self._unfinished(view)
        if unfinished is None:
            return None
        same = (
            unfinished.action,
            canonical(_request(unfinished.selection)),
            unfinished.to_commit,
            unfinished.mode,
        ) == (
            action,
            canonical(_request(selection)),
            to_commit,
            "delete" if delete else "quarantine",
        )
        if same:
            return unfinished
        raise self._in_progress(view, unfinished)

    def _finish(self, view: StoreView, plan: ReprocessPlan) -> ReprocessResult:
        steps = self._steps(view)
        if plan.action == UNDO:
            return steps.undo(plan, resumed=True)
        if plan.action == PURGE:
            return steps.purge(plan, resumed=True)
        return steps.retract(plan, resumed=True)

    def _in_progress(self, view: StoreView, plan: ReprocessPlan) -> EpochConflictError:
        what = {UNDO: f"an undo of reprocess {plan.target}", PURGE: f"a purge of reprocess {plan.target}"}.get(
            plan.action, f"a {plan.action}"
        )
        return EpochConflictError(
            f"{what} of {self.parts.uri} (epoch {plan.new_epoch}) is unfinished: resume it first "
            "(`airflow-ckpt resume`, or the same call again). Nothing was changed",
            reason="reprocess_in_progress",
        )

    def _check_expected(self, plan: ReprocessPlan, expected: Expected) -> None:
        if expected is None:
            return
        wanted = expected.fingerprint if isinstance(expected, ReprocessPlan) else str(expected)
        if wanted != plan.fingerprint:
            raise EpochConflictError(
                f"{self.parts.uri} changed since the preview was made (it is at epoch {plan.epoch} now): what "
                "would be done differs from what was confirmed. Nothing was changed; look at the new preview",
                reason="store_changed",
            )

    def _check_fence(self, view: StoreView, takeover: bool) -> None:
        latest = view.state.latest
        if latest is None:
            return
        if latest.status is EpochStatus.OPEN and not takeover:
            raise EpochConflictError(
                f"epoch {latest.number} of {self.parts.uri} is still open (owner {latest.owner!r}, opened "
                f"{latest.created_at}): a submit may be running. Wait until it ends (or mark it failed), then "
                "reprocess; if it is dead, pass takeover=True (CLI --takeover). Nothing was changed",
                reason="epoch_open",
            )
        if latest.number in view.commits and latest.number not in view.done_commits:
            raise EpochConflictError(
                f"the commit of epoch {latest.number} of {self.parts.uri} is unfinished: run the commit again "
                "(it resumes), then reprocess. Nothing was changed",
                reason="epoch_open",
            )

    def _empty_purge(self, view: StoreView) -> ReprocessPlan:
        from airflow_ckpt_provider.store.reprocess.planner import previous_state

        previous = previous_state(view)
        return ReprocessPlan(
            action=PURGE,
            store_uri=self.parts.uri,
            epoch=previous.epoch,
            new_epoch=None,
            selection=None,
            to_commit=None,
            mode="delete",
            checkpoints=(),
            committed_checkpoints=0,
            keys=0,
            files=(),
            previous=previous,
            new_base=previous.valid,
            snapshot_drop=(),
            snapshot_from=previous.snapshot,
            snapshot_keys=None,
            output_roots=(),
        )


def _request(selection: Selection | None) -> object:
    return None if selection is None else selection.to_json()
