"""Reprocess, rewind, undo, purge and resume from the Checkpoints view (docs/reprocess.md).

* ``POST /api/task/reprocess/preview`` — the dry run the confirmation dialog shows (counts, the
  exact files, the plan's fingerprint); changes nothing.
* ``POST /api/task/reprocess`` — runs exactly the confirmed plan: the body carries the preview's
  fingerprint and the store refuses (409) if anything differs.
* ``GET /api/task/reprocesses`` — the store's reprocess history (read access).

Every POST needs edit access to the DAG's task instances (as clear does), a JSON body with the
``X-Requested-With`` header, and is refused (409) while the task instance runs; every action,
done or refused, writes an audit-log entry.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Depends, HTTPException, Query, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from airflow_ckpt_provider.plugins.access import can_access_dag, require_dag_access, require_same_origin_json
from airflow_ckpt_provider.plugins.audit import write_audit_entry
from airflow_ckpt_provider.plugins.locator import (
    ACTIVE_STATES,
    TaskInstanceNotFound,
    TaskStoreRef,
    locate_task_store,
    open_ref,
)
from airflow_ckpt_provider.plugins.problems import display_uri, problem_from
from airflow_ckpt_provider.store import CheckpointStore, ReprocessPlan, ReprocessResult, Selection
from airflow_ckpt_provider.store.errors import StoreChangedError

log = logging.getLogger(__name__)

#: Files a preview lists in the dialog (the counts cover all of them; the CLI lists every one).
PREVIEW_FILES = 500
#: At most this many values per criterion in one request.
MAX_VALUES = 10_000

Action = Literal["reprocess", "rewind", "undo", "purge", "resume"]


class SelectionBody(BaseModel):
    keys: list[Any] = Field(default_factory=list, max_length=MAX_VALUES)
    files: list[str] = Field(default_factory=list, max_length=MAX_VALUES)
    epochs: list[int] = Field(default_factory=list, max_length=MAX_VALUES)
    commits: list[int] = Field(default_factory=list, max_length=MAX_VALUES)
    sealed_after: str | None = Field(default=None, max_length=64)
    sealed_before: str | None = Field(default=None, max_length=64)

    def selection(self) -> Selection:
        return Selection(
            keys=self.keys,
            files=self.files,
            epochs=self.epochs,
            commits=self.commits,
            sealed_after=self.sealed_after or None,
            sealed_before=self.sealed_before or None,
        )


class ReprocessBody(BaseModel):
    dag_id: str = Field(min_length=1, max_length=250)
    task_id: str = Field(min_length=1, max_length=250)
    run_id: str = Field(min_length=1, max_length=250)
    action: Action = "reprocess"
    selection: SelectionBody = Field(default_factory=SelectionBody)
    #: rewind: the commit to return to; undo / purge: the reprocess they act on (default: newest / all).
    to_commit: int | None = Field(default=None, ge=0)
    epoch: int | None = Field(default=None, ge=1)
    delete: bool = False
    #: The fingerprint of the preview the person confirmed (required to act).
    expected: str | None = Field(default=None, max_length=64)


def _locate(session: Any, body: ReprocessBody) -> TaskStoreRef:
    try:
        return locate_task_store(session, body.dag_id, body.task_id, body.run_id)
    except TaskInstanceNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None


def _preview(store: CheckpointStore, body: ReprocessBody) -> ReprocessPlan | None:
    if body.action == "reprocess":
        return store.preview_reprocess(body.selection.selection(), delete=body.delete)
    if body.action == "rewind":
        if body.to_commit is None:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, "a rewind needs to_commit (0: before the first)")
        return store.preview_rewind(body.to_commit, delete=body.delete)
    if body.action == "undo":
        return store.preview_undo(body.epoch)
    if body.action == "purge":
        if body.epoch is None:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, "a purge from the view names its reprocess")
        return store.preview_purge(body.epoch)
    return None  # resume: it finishes what the store's record says; nothing to confirm


def _act(store: CheckpointStore, body: ReprocessBody, who: str) -> ReprocessResult | None:
    if body.action == "resume":
        return store.resume_reprocess()
    if body.expected is None:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_ENTITY, "preview first: the action runs only the plan a person confirmed"
        )
    if body.action == "reprocess":
        return store.reprocess(body.selection.selection(), delete=body.delete, expected=body.expected, requested_by=who)
    if body.action == "rewind":
        assert body.to_commit is not None
        return store.rewind(body.to_commit, delete=body.delete, expected=body.expected, requested_by=who)
    if body.action == "undo":
        return store.undo_reprocess(body.epoch, expected=body.expected, requested_by=who)
    plan = _preview(store, body)
    if plan is None or plan.fingerprint != body.expected:
        raise StoreChangedError("the quarantine changed since the preview: nothing was deleted; look again")
    return store.purge_quarantine(body.epoch, requested_by=who)


def _context(ref: TaskStoreRef) -> dict[str, Any]:
    return {
        "dag_id": ref.dag_id,
        "task_id": ref.task_id,
        "run_id": ref.run_id,
        "task_state": ref.state,
        "store_uri": display_uri(ref.uri),
    }


def preview_payload(session: Any, user: Any, body: ReprocessBody) -> tuple[int, dict[str, Any]]:
    require_dag_access(user, body.dag_id, edit=True)
    ref = _locate(session, body)
    secrets: list[str] = []
    try:
        store, secrets = open_ref(ref)
        try:
            plan = _preview(store, body)
        finally:
            store.close()
    except HTTPException:
        raise
    except Exception as exc:
        problem = problem_from(exc, ref.uri, secrets)
        return problem.status_code, _context(ref) | problem.to_json()
    if plan is None:
        return 200, _context(ref) | {"preview": None}
    return 200, _context(ref) | {"preview": plan.to_json(max_files=PREVIEW_FILES)}


def action_payload(session: Any, user: Any, body: ReprocessBody) -> tuple[int, dict[str, Any]]:
    """Run the confirmed action, audited. Returns (HTTP status, body)."""
    require_dag_access(user, body.dag_id, edit=True)
    ref = _locate(session, body)
    context = _context(ref) | {"action": body.action}

    def audit(extra: dict[str, Any], *, failed: bool) -> int:
        return write_audit_entry(
            session,
            user=user,
            action=body.action,
            dag_id=ref.dag_id,
            task_id=ref.task_id,
            run_id=ref.run_id,
            extra={"store_uri": display_uri(ref.uri), **extra},
            failed=failed,
        )

    if ref.state in ACTIVE_STATES:
        message = (
            f"The task instance is {ref.state}: it may be writing checkpoints right now. Wait until it finishes "
            "(or mark it failed), then try again. Nothing was changed."
        )
        return 409, context | {
            "error": "task_active",
            "detail": message,
            "audit_log_id": audit({"refused": message}, failed=True),
        }

    secrets: list[str] = []
    asked = {
        "selection": body.selection.selection().describe() if body.action == "reprocess" else None,
        "to_commit": body.to_commit,
        "epoch": body.epoch,
        "delete": body.delete,
        "fingerprint": body.expected,
    }
    try:
        store, secrets = open_ref(ref)
        try:
            result = _act(store, body, f"ui:{user.get_name()}")
        finally:
            store.close()
    except HTTPException:
        raise
    except StoreChangedError as exc:
        message = f"{exc} Reload the preview and review it again."
        audit_id = audit(asked | {"refused": message}, failed=True)
        return 409, context | {"error": "store_changed", "detail": message, "audit_log_id": audit_id}
    except Exception as exc:
        problem = problem_from(exc, ref.uri, secrets)
        audit_id = audit(asked | {"error": problem.kind, "detail": problem.message}, failed=True)
        return problem.status_code, context | problem.to_json() | {"audit_log_id": audit_id}
    summary = None if result is None else result.summary()
    audit_id = audit(asked | {"result": summary}, failed=False)
    log.info(
        "checkpoints %s by %s on %s/%s/%s: %s",
        body.action,
        user.get_name(),
        ref.dag_id,
        ref.task_id,
        ref.run_id,
        summary,
    )
    return 200, context | {"result": summary, "audit_log_id": audit_id}


router = APIRouter()


@router.post(
    "/api/task/reprocess/preview",
    summary="What a reprocess, rewind, undo or purge would do (changes nothing)",
    dependencies=[Depends(require_same_origin_json)],
)
def post_preview(body: ReprocessBody, user: GetUserDep, session: SessionDep) -> JSONResponse:
    code, payload = preview_payload(session, user, body)
    return JSONResponse(payload, status_code=code)


@router.post(
    "/api/task/reprocess",
    summary="Run a previewed reprocess, rewind, undo or purge (or resume an interrupted one)",
    dependencies=[Depends(require_same_origin_json)],
)
def post_action(body: ReprocessBody, user: GetUserDep, session: SessionDep) -> JSONResponse:
    code, payload = action_payload(session, user, body)
    return JSONResponse(payload, status_code=code)


@router.get("/api/task/reprocesses", summary="The reprocess history of a task instance's store")
def get_history(
    user: GetUserDep,
    session: SessionDep,
    dag_id: str = Query(min_length=1, max_length=250),
    run_id: str = Query(min_length=1, max_length=250),
    task_id: str = Query(min_length=1, max_length=250),
) -> JSONResponse:
    require_dag_access(user, dag_id, edit=False)
    body = ReprocessBody(dag_id=dag_id, task_id=task_id, run_id=run_id)
    ref = _locate(session, body)
    secrets: list[str] = []
    try:
        store, secrets = open_ref(ref)
        try:
            records = [r.to_json() for r in store.list_reprocesses()]
        finally:
            store.close()
    except Exception as exc:
        problem = problem_from(exc, ref.uri, secrets)
        return JSONResponse(_context(ref) | problem.to_json(), status_code=problem.status_code)
    can_edit = can_access_dag(user, dag_id, edit=True)
    return JSONResponse(_context(ref) | {"reprocesses": records, "can_edit": can_edit})
