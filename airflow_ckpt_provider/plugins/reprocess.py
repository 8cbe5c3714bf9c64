"""Reprocess, rewind, undo, purge and resume from the Checkpoints view (docs/reprocess.md).

* ``POST /api/task/reprocess/preview`` — the dry run the confirmation dialog shows (counts, the
  exact files, the plan's fingerprint); changes nothing.
* ``POST /api/task/reprocess`` — runs exactly the confirmed plan: the body carries the preview's
  fingerprint and the store refuses (409) if anything differs.
* ``GET /api/task/reprocesses`` — the store's reprocess history (read access).

Every POST needs edit access to the DAG's task instances (as clear does), a JSON body with the
``X-Requested-With`` header, and is refused (409) while the task instance runs or when the store
belongs to another DAG the user has no rights on; every action, done or refused, writes an
audit-log entry. Requests run as the clear endpoints do (plugins/flow.py): short DB sessions,
store calls on bounded threads under a deadline (docs/security.md).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Depends, HTTPException, Query, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, field_validator
from starlette.concurrency import run_in_threadpool

from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.locator import ACTIVE_STATES, TaskStoreRef
from airflow_ckpt_provider.plugins.access import can_access_dag, require_same_origin_json
from airflow_ckpt_provider.plugins.flow import (
    action_calls,
    audit_ref,
    context_json,
    located,
    parse_map_index,
    store_calls,
)
from airflow_ckpt_provider.plugins.ownership import OwnerMismatch, check_owners, owner_dag_id
from airflow_ckpt_provider.plugins.problems import StoreProblem, display_uri, problem_from
from airflow_ckpt_provider.plugins.store_access import open_for_view
from airflow_ckpt_provider.plugins.store_calls import Deadline
from airflow_ckpt_provider.store import CheckpointStore, ReprocessPlan, ReprocessResult, Selection
from airflow_ckpt_provider.store.errors import EpochConflictError, InvalidArgumentError
from airflow_ckpt_provider.store.reprocess.model import check_key

log = logging.getLogger(__name__)

#: Files a preview lists in the dialog (the counts cover all of them; the CLI lists every one).
PREVIEW_FILES = 500
#: At most this many values per criterion in one request.
MAX_VALUES = 10_000

Action = Literal["reprocess", "rewind", "undo", "purge", "resume", "abandon"]


class SelectionBody(BaseModel):
    keys: list[Any] = Field(default_factory=list, max_length=MAX_VALUES)
    files: list[str] = Field(default_factory=list, max_length=MAX_VALUES)
    epochs: list[int] = Field(default_factory=list, max_length=MAX_VALUES)
    commits: list[int] = Field(default_factory=list, max_length=MAX_VALUES)
    sealed_after: str | None = Field(default=None, max_length=64)
    sealed_before: str | None = Field(default=None, max_length=64)

    # Bad input is a 422 (audited by the app's handler), never a 500 from deep in a store call.
    @field_validator("keys")
    @classmethod
    def _keys(cls, keys: list[Any]) -> list[Any]:
        try:
            for key in keys:
                check_key(key)
        except InvalidArgumentError as exc:  # pydantic answers a validator's ValueError with the 422
            raise ValueError(str(exc)) from None
        return keys

    @field_validator("sealed_after", "sealed_before")
    @classmethod
    def _time(cls, value: str | None) -> str | None:
        try:
            return Selection(sealed_after=value or None).sealed_after and value
        except InvalidArgumentError as exc:
            raise ValueError(str(exc)) from None

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
    #: The mapped task instance (-1: not mapped, or the task's lowest map index).
    map_index: int = Field(default=-1, ge=-1)
    action: Action = "reprocess"
    selection: SelectionBody = Field(default_factory=SelectionBody)
    #: rewind: the commit to return to; undo / purge: the reprocess they act on (default: newest / all).
    to_commit: int | None = Field(default=None, ge=0)
    epoch: int | None = Field(default=None, ge=1)
    delete: bool = False
    #: The fingerprint of the preview the person confirmed (required to act).
    expected: str | None = Field(default=None, max_length=64)


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
    # resume / abandon: the unfinished plan as the store records it, every file (a person confirms it).
    return store.preview_resume()


def _act(store: CheckpointStore, body: ReprocessBody, who: str) -> ReprocessResult | None:
    if body.expected is None:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_ENTITY, "preview first: the action runs only the plan a person confirmed"
        )
    if body.action == "resume":
        return store.resume_reprocess(expected=body.expected)
    if body.action == "abandon":
        abandoned = store.abandon_maintenance(expected=body.expected, requested_by=who)
        return ReprocessResult(action="abandon", epoch=abandoned.new_epoch, plan=abandoned)
    if body.action == "reprocess":
        return store.reprocess(body.selection.selection(), delete=body.delete, expected=body.expected, requested_by=who)
    if body.action == "rewind":
        assert body.to_commit is not None
        return store.rewind(body.to_commit, delete=body.delete, expected=body.expected, requested_by=who)
    if body.action == "undo":
        return store.undo_reprocess(body.epoch, expected=body.expected, requested_by=who)
    plan = _preview(store, body)
    if plan is None or plan.fingerprint != body.expected:
        raise EpochConflictError(
            "the quarantine changed since the preview: nothing was deleted; look again", reason="store_changed"
        )
    return store.purge_quarantine(body.epoch, requested_by=who)


def _context(ref: TaskStoreRef) -> dict[str, Any]:
    return {
        "dag_id": ref.dag_id,
        "task_id": ref.task_id,
        "run_id": ref.run_id,
        "map_index": ref.map_index,
        "task_state": ref.state,
        "store_uri": display_uri(ref.uri),
    }


@dataclass(frozen=True)
class _Outcome:
    mismatch: OwnerMismatch | None = None
    plan: ReprocessPlan | None = None
    result: ReprocessResult | None = None
    records: list[dict[str, Any]] | None = None
    owner_dag_ids: tuple[str, ...] = ()


def _in_store(
    user: Any,
    ref: TaskStoreRef,
    deadline: Deadline,
    secrets: list[str],
    work: Callable[[CheckpointStore], _Outcome],
    *,
    edit: bool,
) -> Callable[[], _Outcome]:
    """A store call: open the task's store under ``deadline``, refuse a store other DAGs own
    (plugins/ownership.py), then ``work``."""
    config = CheckpointConfig.load()

    def call() -> _Outcome:
        store, found = open_for_view(ref, deadline, config, retries=2 if edit else 0)
        secrets.extend(found)
        try:
            epochs = store.list_epochs()
            owners = tuple(sorted({d for d in map(owner_dag_id, epochs) if d and d != ref.dag_id}))
            mismatch = check_owners(epochs, ref.dag_id, lambda d: can_access_dag(user, d, edit=edit), edit=edit)
            if mismatch is not None:
                return _Outcome(mismatch=mismatch, owner_dag_ids=owners)
            return dataclasses.replace(work(store), owner_dag_ids=owners)
        finally:
            store.close()

    return call


async def preview_payload(user: Any, body: ReprocessBody) -> tuple[int, dict[str, Any]]:
    found = await located(user, body.dag_id, body.task_id, body.run_id, edit=True, map_index=body.map_index)
    if isinstance(found, StoreProblem):
        context = context_json(body.dag_id, body.task_id, body.run_id, body.map_index)
        return found.status_code, context | found.to_json()
    ref = found
    secrets: list[str] = []
    deadline = Deadline.after(CheckpointConfig.load().ui_action_deadline_seconds)  # a dry run reads much
    try:
        outcome = await action_calls().run(
            _in_store(user, ref, deadline, secrets, lambda store: _Outcome(plan=_preview(store, body)), edit=True),
            deadline,
        )
    except HTTPException:
        raise
    except Exception as exc:
        problem = problem_from(exc, ref.uri, secrets)
        return problem.status_code, _context(ref) | problem.to_json()
    if outcome.mismatch is not None:
        return 409, _context(ref) | outcome.mismatch.to_json()
    if outcome.plan is None:
        return 200, _context(ref) | {"preview": None}
    return 200, _context(ref) | {"preview": outcome.plan.to_json(max_files=PREVIEW_FILES)}


async def action_payload(user: Any, body: ReprocessBody) -> tuple[int, dict[str, Any]]:
    """Run the confirmed action, audited. Returns (HTTP status, body)."""
    found = await located(user, body.dag_id, body.task_id, body.run_id, edit=True, map_index=body.map_index)
    if isinstance(found, StoreProblem):
        context = context_json(body.dag_id, body.task_id, body.run_id, body.map_index) | {"action": body.action}
        return found.status_code, context | found.to_json()
    ref = found
    context = _context(ref) | {"action": body.action}
    asked = {
        "selection": body.selection.selection().describe() if body.action == "reprocess" else None,
        "to_commit": body.to_commit,
        "epoch": body.epoch,
        "delete": body.delete,
        "fingerprint": body.expected,
    }

    async def refuse(code: int, kind: str, message: str, also: tuple[str, ...] = ()) -> tuple[int, dict[str, Any]]:
        entry = asked | {"refused": message, "http_status": code, "error": kind}
        audit_id = await run_in_threadpool(audit_ref, user, body.action, ref, entry, True, also)
        return code, context | {"error": kind, "detail": message, "audit_log_id": audit_id}

    if ref.state in ACTIVE_STATES:
        message = (
            f"The task instance is {ref.state}: it may be writing checkpoints right now. Wait until it finishes "
            "(or mark it failed), then try again. Nothing was changed."
        )
        return await refuse(409, "task_active", message)

    secrets: list[str] = []
    deadline = Deadline.after(CheckpointConfig.load().ui_action_deadline_seconds)
    who = f"ui:{user.get_name()}"
    try:
        outcome = await action_calls().run(
            _in_store(user, ref, deadline, secrets, lambda store: _Outcome(result=_act(store, body, who)), edit=True),
            deadline,
        )
    except HTTPException:
        raise
    except EpochConflictError as exc:
        if exc.reason != "store_changed":
            problem = problem_from(exc, ref.uri, secrets)
            return await refuse(problem.status_code, problem.kind, problem.message)
        return await refuse(409, "store_changed", f"{exc} Reload the preview and review it again.")
    except Exception as exc:
        problem = problem_from(exc, ref.uri, secrets)
        return await refuse(problem.status_code, problem.kind, problem.message)
    if outcome.mismatch is not None:
        return await refuse(409, "store_owner_mismatch", outcome.mismatch.message(), outcome.owner_dag_ids)
    summary = None if outcome.result is None else outcome.result.summary()
    audit_id = await run_in_threadpool(
        audit_ref, user, body.action, ref, asked | {"result": summary}, False, outcome.owner_dag_ids
    )
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
async def post_preview(body: ReprocessBody, user: GetUserDep) -> JSONResponse:
    code, payload = await preview_payload(user, body)
    return JSONResponse(payload, status_code=code)


@router.post(
    "/api/task/reprocess",
    summary="Run a previewed reprocess, rewind, undo or purge (or resume an interrupted one)",
    dependencies=[Depends(require_same_origin_json)],
)
async def post_action(body: ReprocessBody, user: GetUserDep) -> JSONResponse:
    code, payload = await action_payload(user, body)
    return JSONResponse(payload, status_code=code)


IdQuery = Annotated[str, Query(min_length=1, max_length=250)]


@router.get("/api/task/reprocesses", summary="The reprocess history of a task instance's store")
async def get_history(
    user: GetUserDep,
    dag_id: IdQuery,
    run_id: IdQuery,
    task_id: IdQuery,
    map_index: Annotated[str | None, Query(max_length=250)] = None,
) -> JSONResponse:
    index = parse_map_index(map_index)
    found = await located(user, dag_id, task_id, run_id, edit=False, map_index=index)
    if isinstance(found, StoreProblem):
        context = context_json(dag_id, task_id, run_id, index)
        return JSONResponse(context | found.to_json(), status_code=found.status_code)
    ref = found
    secrets: list[str] = []
    deadline = Deadline.after(CheckpointConfig.load().ui_store_deadline_seconds)

    def history(store: CheckpointStore) -> _Outcome:
        return _Outcome(records=[r.to_json() for r in store.list_reprocesses()])

    try:
        outcome = await store_calls().run(_in_store(user, ref, deadline, secrets, history, edit=False), deadline)
    except Exception as exc:
        problem = problem_from(exc, ref.uri, secrets)
        return JSONResponse(_context(ref) | problem.to_json(), status_code=problem.status_code)
    if outcome.mismatch is not None:
        return JSONResponse(_context(ref) | outcome.mismatch.to_json(), status_code=409)
    can_edit = await run_in_threadpool(can_access_dag, user, dag_id, edit=True)
    return JSONResponse(_context(ref) | {"reprocesses": outcome.records, "can_edit": can_edit})
