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

import logging
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Depends, HTTPException, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, field_validator
from pydantic_core import PydanticCustomError
from starlette.concurrency import run_in_threadpool

from airflow_ckpt_provider.hooks.locator import TaskStoreRef
from airflow_ckpt_provider.plugins.access import can_access_dag, require_same_origin_json
from airflow_ckpt_provider.plugins.flow import (
    Answer,
    StoreRequest,
    TaskInstanceBody,
    TaskInstanceQuery,
    ref_json,
    respond,
)
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
        except InvalidArgumentError as exc:  # pydantic answers its own typed error with the 422
            raise _invalid(exc) from None
        return keys

    @field_validator("sealed_after", "sealed_before")
    @classmethod
    def _time(cls, value: str | None) -> str | None:
        try:
            return Selection(sealed_after=value or None).sealed_after and value
        except InvalidArgumentError as exc:
            raise _invalid(exc) from None

    def selection(self) -> Selection:
        return Selection(
            keys=self.keys,
            files=self.files,
            epochs=self.epochs,
            commits=self.commits,
            sealed_after=self.sealed_after or None,
            sealed_before=self.sealed_before or None,
        )


def _invalid(exc: InvalidArgumentError) -> PydanticCustomError:
    """A selection the store refuses, as pydantic's own validation error (a 422 naming the field)."""
    return PydanticCustomError(exc.reason, "{message}", {"message": str(exc)})


class ReprocessBody(TaskInstanceBody):
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
        return store.reprocessing.preview(body.selection.selection(), delete=body.delete)
    if body.action == "rewind":
        if body.to_commit is None:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, "a rewind needs to_commit (0: before the first)")
        return store.reprocessing.preview_rewind(body.to_commit, delete=body.delete)
    if body.action == "undo":
        return store.reprocessing.preview_undo(body.epoch)
    if body.action == "purge":
        if body.epoch is None:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, "a purge from the view names its reprocess")
        return store.reprocessing.preview_purge(body.epoch)
    # resume / abandon: the unfinished plan as the store records it, every file (a person confirms it).
    return store.reprocessing.preview_resume()


def _act(store: CheckpointStore, body: ReprocessBody, who: str) -> ReprocessResult | None:
    if body.expected is None:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_ENTITY, "preview first: the action runs only the plan a person confirmed"
        )
    if body.action == "resume":
        return store.reprocessing.resume(expected=body.expected)
    if body.action == "abandon":
        abandoned = store.reprocessing.abandon(expected=body.expected, requested_by=who)
        return ReprocessResult(action="abandon", epoch=abandoned.new_epoch, plan=abandoned)
    if body.action == "reprocess":
        return store.reprocessing.run(
            body.selection.selection(), delete=body.delete, expected=body.expected, requested_by=who
        )
    if body.action == "rewind":
        assert body.to_commit is not None
        return store.reprocessing.rewind(body.to_commit, delete=body.delete, expected=body.expected, requested_by=who)
    if body.action == "undo":
        return store.reprocessing.undo(body.epoch, expected=body.expected, requested_by=who)
    plan = _preview(store, body)
    if plan is None or plan.fingerprint != body.expected:
        raise EpochConflictError(
            "the quarantine changed since the preview: nothing was deleted; look again", reason="store_changed"
        )
    return store.reprocessing.purge(body.epoch, requested_by=who)


#: What a reprocess answer says of its task instance (a part of :func:`ref_json`).
_CONTEXT_FIELDS = ("dag_id", "task_id", "run_id", "map_index", "task_state", "store_uri")


def _context(ref: TaskStoreRef) -> dict[str, Any]:
    shown = ref_json(ref)
    return {name: shown[name] for name in _CONTEXT_FIELDS}


async def preview_payload(user: Any, body: ReprocessBody) -> Answer:
    # A dry run reads much: the actions' deadline and slots.
    request = await StoreRequest.start(user, *body.ids(), edit=True, context=_context)
    if not isinstance(request, StoreRequest):
        return request
    try:
        owned = await request.run(lambda store: _preview(store, body), retries=2)
    except HTTPException:
        raise
    except Exception as exc:
        problem = request.problem(exc)
        return problem.status_code, request.context | problem.to_json()
    if owned.mismatch is not None:
        return 409, request.context | owned.mismatch.to_json()
    plan = owned.value
    return 200, request.context | {"preview": None if plan is None else plan.to_json(max_files=PREVIEW_FILES)}


async def action_payload(user: Any, body: ReprocessBody) -> Answer:
    """Run the confirmed action, audited. Returns (HTTP status, body)."""
    extra = {"action": body.action}
    request = await StoreRequest.start(user, *body.ids(), edit=True, extra=extra, context=_context)
    if not isinstance(request, StoreRequest):
        return request
    ref = request.ref
    asked = {
        "selection": body.selection.selection().describe() if body.action == "reprocess" else None,
        "to_commit": body.to_commit,
        "epoch": body.epoch,
        "delete": body.delete,
        "fingerprint": body.expected,
    }
    if request.task_active:
        message = (
            f"The task instance is {ref.state}: it may be writing checkpoints right now. Wait until it finishes "
            "(or mark it failed), then try again. Nothing was changed."
        )
        return await request.refuse(body.action, 409, "task_active", message, asked=asked)

    who = f"ui:{user.get_name()}"
    try:
        owned = await request.run(lambda store: _act(store, body, who), retries=2)
    except HTTPException:
        raise
    except EpochConflictError as exc:
        if exc.reason != "store_changed":
            problem = request.problem(exc)
            return await request.refuse(body.action, problem.status_code, problem.kind, problem.message, asked=asked)
        message = f"{exc} Reload the preview and review it again."
        return await request.refuse(body.action, 409, "store_changed", message, asked=asked)
    except Exception as exc:
        problem = request.problem(exc)
        return await request.refuse(body.action, problem.status_code, problem.kind, problem.message, asked=asked)
    if owned.mismatch is not None:
        message = owned.mismatch.message()
        return await request.refuse(body.action, 409, "store_owner_mismatch", message, also=owned.foreign, asked=asked)
    summary = None if owned.value is None else owned.value.summary()
    audit_id = await request.audit(body.action, asked | {"result": summary}, False, owned.foreign)
    ids = (ref.dag_id, ref.task_id, ref.run_id)
    log.info("checkpoints %s by %s on %s/%s/%s: %s", body.action, user.get_name(), *ids, summary)
    return 200, request.context | {"result": summary, "audit_log_id": audit_id}


router = APIRouter()
F = TypeVar("F", bound=Callable[..., Any])


def _post(path: str, summary: str) -> Callable[[F], F]:
    """``POST path``: a same-origin JSON request (plugins/access.py)."""
    return router.post(path, summary=summary, dependencies=[Depends(require_same_origin_json)])


@_post("/api/task/reprocess/preview", "What a reprocess, rewind, undo or purge would do (changes nothing)")
async def post_preview(body: ReprocessBody, user: GetUserDep) -> JSONResponse:
    return respond(await preview_payload(user, body))


@_post("/api/task/reprocess", "Run a previewed reprocess, rewind, undo or purge (or resume an interrupted one)")
async def post_action(body: ReprocessBody, user: GetUserDep) -> JSONResponse:
    return respond(await action_payload(user, body))


@router.get("/api/task/reprocesses", summary="The reprocess history of a task instance's store")
async def get_history(user: GetUserDep, ti: TaskInstanceQuery) -> JSONResponse:
    request = await StoreRequest.start(user, *ti, edit=False, context=_context)
    if not isinstance(request, StoreRequest):
        return respond(request)
    try:
        owned = await request.run(lambda store: [r.to_json() for r in store.reprocessing.records()])
    except Exception as exc:
        problem = request.problem(exc)
        return JSONResponse(request.context | problem.to_json(), status_code=problem.status_code)
    if owned.mismatch is not None:
        return JSONResponse(request.context | owned.mismatch.to_json(), status_code=409)
    can_edit = await run_in_threadpool(can_access_dag, user, ti.dag_id, edit=True)
    return JSONResponse(request.context | {"reprocesses": owned.value, "can_edit": can_edit})
