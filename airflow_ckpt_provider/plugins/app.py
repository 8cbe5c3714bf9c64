"""The Checkpoints FastAPI app, mounted on Airflow's API server at ``/checkpoints``.

Pages (shown as tabs of the task-instance and DAG pages, in an iframe):

* ``GET /ui/task?dag_id&run_id&task_id[&map_index]`` and ``GET /ui/dag?dag_id``

JSON (what the pages show, and the actions):

* ``GET /api/task?dag_id&run_id&task_id[&map_index]`` — read access to the DAG's task instances
* ``GET /api/dag?dag_id[&limit]`` — the same; one row per store, so one per map index of a
  mapped task with the default location
* ``POST /api/task/clear`` and ``POST /api/task/discard`` — edit access; a JSON body
  ``{"dag_id", "task_id", "run_id", "map_index", "expected_epoch"}`` with the ``X-Requested-With``
  header; each writes an audit-log entry, refused attempts included.
* ``POST /api/task/clear/preview`` and ``POST /api/task/discard/preview`` — what the dialog
  shows when it opens: the counts, the output roots, the records the deletion guard refuses
  (plugins/confirmation.py); the same rights and body; changes nothing.

Each mapped task instance has its own store (docs/airflow.md, "Mapped tasks"): ``map_index``
selects it. The tab's page without one takes the map index from the UI page that framed it
(``.../mapped/{i}/...`` in the ``Referer``); else a mapped task shows its lowest map index.

How a request runs (docs/security.md): the metadata DB is read in short sessions (who may see
what, which store the task's operator names); the store is read on the view's own bounded
threads under a deadline, with no DB session held (plugins/store_calls.py); the audit entry
is written in a short session afterwards. A store owned by another DAG's tasks is refused
with 409 unless the user has rights on that DAG (plugins/ownership.py). Store failures answer
503 (unreachable, too slow) or 422 (corrupt, misconfigured) with ``{"error", "detail"}`` and
never a stack trace; nothing is deleted then. Every response forbids framing by other sites.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar
from urllib.parse import quote

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from airflow_ckpt_provider.display.deletion_preview import DeletionPreview, preview
from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.locator import ACTIVE_STATES, TaskStoreRef
from airflow_ckpt_provider.plugins import pages
from airflow_ckpt_provider.plugins.access import can_access_dag, require_dag_access, require_same_origin_json
from airflow_ckpt_provider.plugins.audit import EVENTS, write_audit_entry
from airflow_ckpt_provider.plugins.confirmation import confirmation_payload
from airflow_ckpt_provider.plugins.dag_stores import dag_store_rows
from airflow_ckpt_provider.plugins.flow import (
    action_calls,
    audit_ref,
    context_json,
    framing_map_index,
    located,
    parse_map_index,
    ref_json,
    store_calls,
    user_name,
    with_db,
)
from airflow_ckpt_provider.plugins.ownership import OwnerMismatch, check_owners, owner_dag_id
from airflow_ckpt_provider.plugins.problems import StoreProblem, display_uri, problem_from, scrub
from airflow_ckpt_provider.plugins.reprocess import router as reprocess_router
from airflow_ckpt_provider.plugins.store_access import open_for_view
from airflow_ckpt_provider.plugins.store_calls import Deadline
from airflow_ckpt_provider.plugins.task_view import TaskStoreView, build_task_store_view, summary_of
from airflow_ckpt_provider.store import ClearResult

log = logging.getLogger(__name__)

T = TypeVar("T")

STATIC_DIR = Path(__file__).parent / "static"
#: Runs the DAG view looks at by default, and at most.
DEFAULT_DAG_RUNS = 10
MAX_DAG_RUNS = 50
#: Airflow's ids are at most 250 characters (its ``StringID`` columns).
MAX_ID_LENGTH = 250
ACTIONS = ("clear", "discard")
#: What every response says about framing: only Airflow's own pages may show these in an iframe.
FRAME_HEADERS = {"X-Frame-Options": "SAMEORIGIN", "Content-Security-Policy": "frame-ancestors 'self'"}
#: Bytes of a refused action's body read to say, in the audit log, which task it was aimed at (a reprocess
#: body lists up to 10,000 keys; a refused one with a huge key must still name its task).
_AUDIT_BODY_LIMIT = 1 << 20


class ActionBody(BaseModel):
    dag_id: str = Field(min_length=1, max_length=MAX_ID_LENGTH)
    task_id: str = Field(min_length=1, max_length=MAX_ID_LENGTH)
    run_id: str = Field(min_length=1, max_length=MAX_ID_LENGTH)
    #: The mapped task instance (-1: not mapped, or the task's lowest map index).
    map_index: int = Field(default=-1, ge=-1)
    #: The epoch the confirmation was computed at: refuse if the store moved on since.
    expected_epoch: int | None = None


# ---------------------------------------------------------------------- the task view


@dataclass(frozen=True)
class _TaskRead:
    view: TaskStoreView | None
    mismatch: OwnerMismatch | None


async def task_payload(
    user: Any, dag_id: str, task_id: str, run_id: str, map_index: int = -1
) -> tuple[int, dict[str, Any]]:
    """What the task view shows: (HTTP status, body). Store failures become a message."""
    config = CheckpointConfig.load()
    found = await located(user, dag_id, task_id, run_id, edit=False, map_index=map_index)
    if isinstance(found, StoreProblem):
        return found.status_code, context_json(dag_id, task_id, run_id, map_index) | found.to_json()
    ref = found
    can_edit = await run_in_threadpool(can_access_dag, user, dag_id, edit=True)
    body = ref_json(ref) | {"can_edit": can_edit}
    deadline = Deadline.after(config.ui_store_deadline_seconds)
    secrets: list[str] = []

    def read() -> _TaskRead:
        store, found = open_for_view(ref, deadline, config)
        secrets.extend(found)
        try:
            view = build_task_store_view(store)
            mismatch = check_owners(
                view.epoch_records, dag_id, lambda d: can_access_dag(user, d, edit=False), edit=False
            )
            return _TaskRead(None if mismatch else view, mismatch)
        finally:
            store.close()

    try:
        outcome = await store_calls().run(read, deadline)
    except Exception as exc:
        problem = problem_from(exc, ref.uri, secrets)
        return problem.status_code, body | problem.to_json()
    if outcome.mismatch is not None:
        mismatch = outcome.mismatch
        await run_in_threadpool(
            audit_ref, user, "view", ref, {"http_status": 409, **mismatch.to_json()}, True, mismatch.foreign_dag_ids
        )
        return 409, body | mismatch.to_json()
    assert outcome.view is not None
    return 200, body | {"store_uri": outcome.view.store_uri, "report": outcome.view.to_json()}


# ---------------------------------------------------------------------- the DAG view


async def dag_payload(user: Any, dag_id: str, limit: int) -> dict[str, Any]:
    config = CheckpointConfig.load()

    def locate(session: Session) -> Any:
        require_dag_access(user, dag_id, edit=False)
        return dag_store_rows(session, dag_id, limit_runs=limit)

    rows, unknown = await with_db(locate)
    deadline = Deadline.after(config.ui_store_deadline_seconds)

    async def summarize(ref: TaskStoreRef) -> dict[str, Any]:
        secrets: list[str] = []

        def read() -> dict[str, Any]:
            store, found = open_for_view(ref, deadline, config)
            secrets.extend(found)
            try:
                summary = summary_of(store)
                owner = summary.pop("owner_dag_id", None)
                if owner and owner != dag_id and not can_access_dag(user, owner, edit=False):
                    return OwnerMismatch(dag_id, (owner,), edit=False).to_json()
                return {"store_uri": display_uri(store.uri), "summary": summary}
            finally:
                store.close()

        try:
            return await store_calls().run(read, deadline)
        except Exception as exc:
            return problem_from(exc, ref.uri, secrets).to_json()

    summaries = await asyncio.gather(*(summarize(row.ref) for row in rows))
    stores = [
        ref_json(row.ref) | {"task_ids": row.task_ids, "view_path": _task_view_path(row.ref)} | summary
        for row, summary in zip(rows, summaries, strict=True)
    ]
    return {
        "dag_id": dag_id,
        "runs_examined": limit,
        "stores": stores,
        "unknown_stores": [scrub(line) for line in unknown],
    }


def _task_view_path(ref: TaskStoreRef) -> str:
    """The Airflow UI route of the task instance's Checkpoints tab (relative to the UI root)."""
    parts = (quote(ref.dag_id, safe=""), quote(ref.run_id, safe=""), quote(ref.task_id, safe=""))
    mapped = f"/mapped/{ref.map_index}" if ref.map_index >= 0 else ""
    return "dags/{}/runs/{}/tasks/{}".format(*parts) + mapped + "/plugin/checkpoints"


# ---------------------------------------------------------------------- clear and discard


@dataclass(frozen=True)
class _ActionOutcome:
    owner_dag_ids: tuple[str, ...] = ()
    mismatch: OwnerMismatch | None = None
    what: DeletionPreview | None = None
    stale: bool = False
    result: ClearResult | None = None


async def run_action(user: Any, action: str, body: ActionBody) -> tuple[int, dict[str, Any]]:
    """Clear or discard one task instance's store, audited. Returns (HTTP status, body)."""
    config = CheckpointConfig.load()
    found = await located(user, body.dag_id, body.task_id, body.run_id, edit=True, map_index=body.map_index)
    if isinstance(found, StoreProblem):
        context = context_json(body.dag_id, body.task_id, body.run_id, body.map_index) | {"action": action}
        return found.status_code, context | found.to_json()
    ref = found
    context = ref_json(ref) | {"action": action}

    async def refuse(
        code: int, kind: str, message: str, *, also: tuple[str, ...] = (), **extra: Any
    ) -> tuple[int, dict[str, Any]]:
        entry = {"refused": message, "http_status": code, "error": kind, **extra}
        audit_id = await run_in_threadpool(audit_ref, user, action, ref, entry, True, also)
        return code, context | {"error": kind, "detail": message, "audit_log_id": audit_id, **extra}

    if ref.state in ACTIVE_STATES:
        message = (
            f"The task instance is {ref.state}: it may be writing checkpoints right now. "
            "Wait until it finishes (or mark it failed), then try again. Nothing was deleted."
        )
        return await refuse(409, "task_active", message)

    deadline = Deadline.after(config.ui_action_deadline_seconds)
    secrets: list[str] = []

    def act() -> _ActionOutcome:
        store, found = open_for_view(ref, deadline, config, retries=2)
        secrets.extend(found)
        try:
            epochs = store.list_epochs()
            owners = tuple(sorted({d for d in map(owner_dag_id, epochs) if d}))
            mismatch = check_owners(epochs, ref.dag_id, lambda d: can_access_dag(user, d, edit=True), edit=True)
            if mismatch is not None:
                return _ActionOutcome(owners, mismatch=mismatch)
            what = preview(store, action)
            if body.expected_epoch is not None and what.epoch != body.expected_epoch:
                return _ActionOutcome(owners, what=what, stale=True)
            if what.nothing_to_do:
                return _ActionOutcome(owners, what=what)  # no fencing epoch in a store that holds nothing
            result = store.clear() if action == "clear" else store.discard_uncommitted()
            return _ActionOutcome(owners, what=what, result=result)
        finally:
            store.close()

    try:
        outcome = await action_calls().run(act, deadline)
    except Exception as exc:
        problem = problem_from(exc, ref.uri, secrets)
        return await refuse(problem.status_code, problem.kind, problem.message)
    foreign = tuple(d for d in outcome.owner_dag_ids if d != ref.dag_id)
    if outcome.mismatch is not None:
        mismatch = outcome.mismatch
        return await refuse(
            409,
            "store_owner_mismatch",
            mismatch.message(),
            also=foreign,
            store_owner_dag_ids=list(mismatch.foreign_dag_ids),
        )
    what = outcome.what
    assert what is not None
    if outcome.stale:
        message = (
            f"The store changed since the page was loaded (epoch {what.epoch}, the page showed "
            f"{body.expected_epoch}). Nothing was deleted; reload and review again."
        )
        return await refuse(409, "store_changed", message)
    result = outcome.result
    deleted: dict[str, Any] = {
        "previous_epoch": what.epoch,
        "fencing_epoch": None if result is None else result.epoch,
        "deleted_checkpoints": 0 if result is None else len(result.deleted_checkpoints),
        "deleted_files": 0 if result is None else len(result.deleted_files),
        "deleted_snapshots": 0 if result is None else len(result.deleted_snapshots),
        "bytes_freed": 0 if result is None else result.bytes_freed,
        "keys_forgotten": what.keys if result is not None else 0,
        # Where output files could be deleted, and what the deletion guard kept (docs/design.md, section 7).
        "output_roots": list(what.output_roots),
        "refused_records": [] if result is None else list(result.refused_records),
        "undeclared_output_files": 0 if result is None else len(result.undeclared_output_files),
    }
    if foreign:
        deleted["store_owner_dag_ids"] = list(foreign)
    audit_id = await run_in_threadpool(audit_ref, user, action, ref, deleted, False, foreign)
    log.info(
        "checkpoints %s by %s on %s/%s/%s (map index %d): %s",
        action,
        user_name(user),
        ref.dag_id,
        ref.task_id,
        ref.run_id,
        ref.map_index,
        deleted,
    )
    return 200, context | {"result": deleted, "audit_log_id": audit_id}


# ---------------------------------------------------------------------- routes

router = APIRouter()
#: An Airflow id in a query string (a longer one is refused with 422, never looked up).
IdQuery = Annotated[str, Query(min_length=1, max_length=MAX_ID_LENGTH)]
#: A map index in a query string (see :func:`parse_map_index`).
MapIndexQuery = Annotated[str | None, Query(max_length=MAX_ID_LENGTH)]


@router.get("/api/task", summary="Checkpoints of a task instance's store")
async def get_task(
    user: GetUserDep,
    dag_id: IdQuery,
    run_id: IdQuery,
    task_id: IdQuery,
    map_index: MapIndexQuery = None,
) -> JSONResponse:
    code, body = await task_payload(user, dag_id, task_id, run_id, parse_map_index(map_index))
    return JSONResponse(body, status_code=code)


@router.get("/api/dag", summary="Checkpoint stores of a DAG's latest runs")
async def get_dag(
    user: GetUserDep,
    dag_id: IdQuery,
    limit: int = Query(DEFAULT_DAG_RUNS, ge=1, le=MAX_DAG_RUNS),
) -> JSONResponse:
    return JSONResponse(await dag_payload(user, dag_id, limit))


@router.post(
    "/api/task/clear",
    summary="Delete every checkpoint of the store: the next run reprocesses everything",
    dependencies=[Depends(require_same_origin_json)],
)
async def post_clear(body: ActionBody, user: GetUserDep) -> JSONResponse:
    code, payload = await run_action(user, "clear", body)
    return JSONResponse(payload, status_code=code)


@router.post(
    "/api/task/discard",
    summary="Delete sealed but uncommitted checkpoints and their output files",
    dependencies=[Depends(require_same_origin_json)],
)
async def post_discard(body: ActionBody, user: GetUserDep) -> JSONResponse:
    code, payload = await run_action(user, "discard", body)
    return JSONResponse(payload, status_code=code)


@router.post(
    "/api/task/clear/preview",
    summary="What a clear would delete now, and the records the deletion guard refuses (changes nothing)",
    dependencies=[Depends(require_same_origin_json)],
)
async def post_clear_preview(body: ActionBody, user: GetUserDep) -> JSONResponse:
    code, payload = await confirmation_payload(user, "clear", body.dag_id, body.task_id, body.run_id, body.map_index)
    return JSONResponse(payload, status_code=code)


@router.post(
    "/api/task/discard/preview",
    summary="What a discard would delete now, and the records the deletion guard refuses (changes nothing)",
    dependencies=[Depends(require_same_origin_json)],
)
async def post_discard_preview(body: ActionBody, user: GetUserDep) -> JSONResponse:
    code, payload = await confirmation_payload(user, "discard", body.dag_id, body.task_id, body.run_id, body.map_index)
    return JSONResponse(payload, status_code=code)


@router.get("/ui/task", response_class=HTMLResponse, include_in_schema=False)
async def task_page(
    request: Request,
    user: GetUserDep,
    dag_id: IdQuery,
    run_id: IdQuery,
    task_id: IdQuery,
    map_index: MapIndexQuery = None,
) -> HTMLResponse:
    index = parse_map_index(map_index)
    if index < 0:  # the tab's own href: the map index is in the path of the page that framed it
        index = framing_map_index(request.headers.get("referer"), dag_id, run_id, task_id)
    code, body = await task_payload(user, dag_id, task_id, run_id, index)
    return HTMLResponse(pages.render_task(body), status_code=code)


@router.get("/ui/dag", response_class=HTMLResponse, include_in_schema=False)
async def dag_page(
    user: GetUserDep,
    dag_id: IdQuery,
    limit: int = Query(DEFAULT_DAG_RUNS, ge=1, le=MAX_DAG_RUNS),
) -> HTMLResponse:
    return HTMLResponse(pages.render_dag(await dag_payload(user, dag_id, limit)))


# ---------------------------------------------------------------------- refusals


def _refused_endpoint(request: Request) -> str | None:
    """The action a refused POST asked for: clear, discard, or (reprocess, and its preview) what its
    body names. A reprocess preview is a read, never audited when it answers; a refused one is, like
    the action (its body is the action's, bad input included). Clear and discard previews stay reads."""
    if request.method != "POST" or "/api/task/" not in request.url.path:
        return None
    *_, parent, last = request.url.path.rstrip("/").rsplit("/", 2)
    if last == "preview" and parent == "reprocess":
        return "reprocess"
    return last if last in (*ACTIONS, "reprocess") else None


async def _requested_task(request: Request) -> dict[str, str | None]:
    """Which task a refused action was aimed at, as far as its body says (best effort, bounded)."""
    fields: dict[str, str | None] = {"dag_id": None, "task_id": None, "run_id": None, "action": None}
    try:
        raw = await request.body()
        data = json.loads(raw[:_AUDIT_BODY_LIMIT]) if len(raw) <= _AUDIT_BODY_LIMIT else None
    except Exception:  # not JSON, or the body is gone: the entry names no task
        return fields
    if isinstance(data, dict):
        for name in fields:
            value = data.get(name)
            if isinstance(value, str) and 0 < len(value) <= MAX_ID_LENGTH:
                fields[name] = value
    return fields


async def _requesting_user(request: Request) -> Any:
    """The user of a refused request, if its credentials are valid (None: anonymous)."""
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    try:
        credentials = await bearer_scheme(request)
        return await get_user(request, None, credentials)
    except Exception:  # not logged in, or an invalid token: the entry says "anonymous"
        return None


async def _audit_refusal(request: Request, status_code: int, detail: str) -> None:
    action = _refused_endpoint(request)
    if action is None:
        return
    task = await _requested_task(request)
    if action == "reprocess" and task["action"] in EVENTS:
        action = str(task["action"])
    user = await _requesting_user(request)
    entry: dict[str, object] = {"refused": detail, "http_status": status_code}
    if request.url.path.rstrip("/").endswith("/preview"):
        entry["preview"] = True
    try:
        await run_in_threadpool(
            lambda: write_audit_entry(
                user_name=user_name(user),
                action=action,
                dag_id=task["dag_id"],
                task_id=task["task_id"],
                run_id=task["run_id"],
                extra=entry,
                failed=True,
            )
        )
    except Exception:  # the refusal stands even if the audit log cannot be written
        log.exception("could not write the audit entry of a refused checkpoint %s", action)


async def _http_error(request: Request, exc: Exception) -> Response:
    """JSON for the API; a short page for the views (a login link on 401). Refused actions are audited."""
    assert isinstance(exc, HTTPException)
    await _audit_refusal(request, exc.status_code, str(exc.detail))
    if "/ui/" not in request.url.path:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
    login_url = None
    if exc.status_code == status.HTTP_401_UNAUTHORIZED:
        try:
            from airflow.api_fastapi.app import get_auth_manager

            login_url = get_auth_manager().get_url_login(next_url=str(request.url))
        except Exception:  # no auth manager: nothing to link to
            login_url = None
    return HTMLResponse(pages.render_error(exc.status_code, str(exc.detail), login_url), status_code=exc.status_code)


async def _invalid_request(request: Request, exc: Exception) -> Response:
    """422 for ids that cannot be Airflow's (too long, empty), without echoing the input back."""
    assert isinstance(exc, RequestValidationError)
    fields = sorted({".".join(str(p) for p in error.get("loc", ())[1:]) for error in exc.errors()})
    message = f"Invalid request: {', '.join(f for f in fields if f) or 'body'} (ids are 1-{MAX_ID_LENGTH} characters)"
    await _audit_refusal(request, 422, message)
    if "/ui/" in request.url.path:
        return HTMLResponse(pages.render_error(422, message, None), status_code=422)
    return JSONResponse({"detail": message}, status_code=422)


async def _frame_headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    response = await call_next(request)
    for name, value in FRAME_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def create_app() -> FastAPI:
    app = FastAPI(
        title="Checkpoints",
        description="Checkpoint stores of checkpointed Spark tasks: progress, clear, discard.",
        docs_url=None,
        redoc_url=None,
    )
    app.include_router(router)
    app.include_router(reprocess_router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="checkpoints_static")
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.middleware("http")(_frame_headers)
    return app
