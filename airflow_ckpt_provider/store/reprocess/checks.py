"""The checks every reprocess, rewind, undo and purge makes before it writes (docs/reprocess.md).

An unfinished maintenance epoch (finish it when the request is the same one, else refuse), the
plan the caller confirmed, the fence against an open epoch or an unfinished commit, and the files
of a recorded plan that lie outside the output roots. Each raises a typed error and changes nothing.
"""

from __future__ import annotations

import dataclasses

from airflow_ckpt_provider.store.deletion_guard import DeletionGuard
from airflow_ckpt_provider.store.errors import EpochConflictError, RefusedError
from airflow_ckpt_provider.store.model import EpochStatus
from airflow_ckpt_provider.store.reprocess.guard import output_guard
from airflow_ckpt_provider.store.reprocess.model import PURGE, UNDO, Selection, canonical
from airflow_ckpt_provider.store.reprocess.plan import ReprocessPlan
from airflow_ckpt_provider.store.reprocess.planner import previous_state
from airflow_ckpt_provider.store.reprocess.view import StoreView

Expected = ReprocessPlan | str | None


def unfinished(view: StoreView) -> ReprocessPlan | None:
    """The plan of the latest epoch when it is an open maintenance epoch, else None."""
    latest = view.state.latest
    if latest is None or latest.status is not EpochStatus.OPEN:
        return None
    plan = view.maintenance_plan()
    return None if plan is None else ReprocessPlan.from_json(plan)


def same_unfinished(
    view: StoreView, action: str, selection: Selection | None, to_commit: int | None, delete: bool
) -> ReprocessPlan | None:
    """The unfinished plan if it is this very request (a retry finishes it); raise if another is."""
    plan = unfinished(view)
    if plan is None:
        return None
    same = (
        plan.action,
        canonical(_request(plan.selection)),
        plan.to_commit,
        plan.mode,
    ) == (
        action,
        canonical(_request(selection)),
        to_commit,
        "delete" if delete else "quarantine",
    )
    if same:
        return plan
    raise in_progress(view, plan)


def in_progress(view: StoreView, plan: ReprocessPlan) -> EpochConflictError:
    what = {UNDO: f"an undo of reprocess {plan.target}", PURGE: f"a purge of reprocess {plan.target}"}.get(
        plan.action, f"a {plan.action}"
    )
    return EpochConflictError(
        f"{what} of {view.parts.uri} (epoch {plan.new_epoch}) is unfinished: resume it first "
        "(`airflow-ckpt resume`, or the same call again). Nothing was changed",
        reason="reprocess_in_progress",
    )


def check_expected(view: StoreView, plan: ReprocessPlan, expected: Expected) -> None:
    """Refuse unless ``plan`` is the one the caller confirmed (``expected``: a plan or its fingerprint)."""
    if expected is None:
        return
    wanted = expected.fingerprint if isinstance(expected, ReprocessPlan) else str(expected)
    if wanted != plan.fingerprint:
        raise EpochConflictError(
            f"{view.parts.uri} changed since the preview was made (it is at epoch {plan.epoch} now): what "
            "would be done differs from what was confirmed. Nothing was changed; look at the new preview",
            reason="store_changed",
        )


def check_fence(view: StoreView, takeover: bool) -> None:
    """Refuse while a submit may be running (an open epoch, unless ``takeover``) or a commit is unfinished."""
    latest = view.state.latest
    if latest is None:
        return
    if latest.status is EpochStatus.OPEN and not takeover:
        raise EpochConflictError(
            f"epoch {latest.number} of {view.parts.uri} is still open (owner {latest.owner!r}, opened "
            f"{latest.created_at}): a submit may be running. Wait until it ends (or mark it failed), then "
            "reprocess; if it is dead, pass takeover=True (CLI --takeover). Nothing was changed",
            reason="epoch_open",
        )
    if latest.number in view.commits and latest.number not in view.done_commits:
        raise EpochConflictError(
            f"the commit of epoch {latest.number} of {view.parts.uri} is unfinished: run the commit again "
            "(it resumes), then reprocess. Nothing was changed",
            reason="epoch_open",
        )


def check_paths(view: StoreView, plan: ReprocessPlan, *, resuming: bool = False) -> None:
    """Refuse a plan naming files outside the store root and the output roots (``refused_paths``):
    they are never touched, so the action could not make the output exactly-once. A purge names
    only the store's own quarantine. Raises :class:`RefusedError` (``unsafe_path``), nothing changed."""
    if not plan.refused_paths or plan.action == PURGE:
        return
    if resuming:
        refusal = resume_refusal(view.parts.uri, plan, output_guard(view).guard)
        if refusal is not None:
            raise refusal
        return
    count, some = len(plan.refused_paths), list(plan.refused_paths[:3])
    why = output_guard(view).guard.refusal(plan.refused_paths[0]) or "outside the output roots"
    message = (
        f"the records of {view.parts.uri} name {count} file(s) outside its root and the output roots, or "
        f"reached through a symbolic link (e.g. {some}; the first: {why}); they are never touched, so this "
        f"{plan.action} cannot make the output exactly-once. Nothing was changed; run `airflow-ckpt check`, "
        "and declare the job's real output roots if those files are yours"
    )
    raise RefusedError(message, reason="unsafe_path")


def resume_refusal(uri: str, plan: ReprocessPlan, guard: DeletionGuard) -> RefusedError | None:
    """Why the unfinished ``plan`` is not resumed with this ``guard`` (:class:`RefusedError` (``unsafe_path``)), or
    None. When the store was opened with no output root at all (the command line without ``--output-root``), no
    file can be checked against the DAG's roots: the way out is to give them, never to abandon a legitimate
    action. Otherwise the plan names files outside the roots its DAG declares: it was not made by this store's
    DAG, and abandoning it is the way out."""
    if not plan.refused_paths or plan.action == PURGE:
        return None
    count, some = len(plan.refused_paths), list(plan.refused_paths[:3])
    why = guard.refusal(plan.refused_paths[0]) or "outside the output roots"
    what = f"the unfinished {plan.action} of {uri} (epoch {plan.new_epoch})"
    if guard.anchor_declares_nothing:
        message = (
            f"{what} moves {count} output file(s) (e.g. {some}), and no output root was given to check them "
            f"against ({guard.trusted_by}: none), so it is not resumed. Nothing was changed. Give the job's output "
            "roots and resume again: `airflow-ckpt resume URI --output-root DIR` (repeat for each root the DAG "
            "declares), or name the task instance whose DAG declares them (`--dag-id/--task-id/--run-id`); a DAG that "
            "declares none declares them on its operators (output_roots)"
        )
    else:
        message = (
            f"{what} names {count} file(s) outside the output roots (e.g. {some}; the first: {why}; "
            f"roots: {', '.join(guard.root_uris) or 'none'}): it was not made by this store's DAG and is not resumed. "
            "Nothing was changed; abandon it (`airflow-ckpt abandon`, or Abandon in the Checkpoints tab) and run "
            "`airflow-ckpt check`"
        )
    return RefusedError(message, reason="unsafe_path")


def with_refusals(view: StoreView, plan: ReprocessPlan) -> ReprocessPlan:
    """``plan`` with ``refused_paths``: its files outside the output roots (none for a purge)."""
    if plan.action == PURGE:  # a purge deletes only the store's own quarantine records
        return plan
    allowed = output_guard(view).allows
    refused = tuple(sorted(f.path for f in plan.files if not allowed(f.path)))
    return dataclasses.replace(plan, refused_paths=refused)


def empty_purge(view: StoreView) -> ReprocessPlan:
    """The plan of a purge that finds nothing to purge."""
    previous = previous_state(view)
    return ReprocessPlan(
        action=PURGE,
        store_uri=view.parts.uri,
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
