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
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from airflow_ckpt_provider.display.deletion_preview import DeletionPreview, preview
from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.locator import TaskStoreRef
from airflow_ckpt_provider.plugins import pages
from airflow_ckpt_provider.plugins.access import can_access_dag, require_dag_access, require_same_origin_json
from airflow_ckpt_provider.plugins.confirmation import ACTIONS, ActionBody, confirmation_payload
from airflow_ckpt_provider.plugins.dag_stores import dag_store_rows
from airflow_ckpt_provider.plugins.flow import (
    Answer,
    IdQuery,
    StoreRequest,
    TaskInstanceQuery,
    framing_map_index,
    ref_json,
    respond,
    store_calls,
    user_name,
    with_db,
)
from airflow_ckpt_provider.plugins.ownership import OwnerMismatch
from airflow_ckpt_provider.plugins.problems import display_uri, problem_from, scrub
from airflow_ckpt_provider.plugins.refusals import http_error, invalid_request
from airflow_ckpt_provider.plugins.reprocess import router as reprocess_router
from airflow_ckpt_provider.plugins.store_access import open_for_view, warm_up
from airflow_ckpt_provider.plugins.store_calls import Deadline
from airflow_ckpt_provider.plugins.task_view import build_task_store_view, summary_of
from airflow_ckpt_provider.store import CheckpointStore, ClearResult

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
#: Runs the DAG view looks at by default, and at most.
DEFAULT_DAG_RUNS = 10
MAX_DAG_RUNS = 50
#: What every response says about framing: only Airflow's own pages may show these in an iframe.
FRAME_HEADERS = {"X-Frame-Options": "SAMEORIGIN", "Content-Security-Policy": "frame-ancestors 'self'"}


# ---------------------------------------------------------------------- the task view


async def task_payload(user: Any, dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> Answer:
    """What the task view shows: (HTTP status, body). Store failures become a message."""
    request = await StoreRequest.start(user, dag_id, task_id, run_id, map_index, edit=False)
    if not isinstance(request, StoreRequest):
        return request
    request.context["can_edit"] = await run_in_threadpool(can_access_dag, user, dag_id, edit=True)
    try:  # the owners are read from the epoch records the view reads anyway
        owned = await request.run(build_task_store_view, epochs_read=lambda view: view.epoch_records)
    except Exception as exc:
        problem = request.problem(exc)
        return problem.status_code, request.context | problem.to_json()
    if owned.mismatch is not None:
        mismatch = owned.mismatch
        await request.audit("view", {"http_status": 409, **mismatch.to_json()}, True, mismatch.foreign_dag_ids)
        return 409, request.context | mismatch.to_json()
    view = owned.value
    assert view is not None
    return 200, request.context | {"store_uri": view.store_uri, "report": view.to_json()}


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
    what: DeletionPreview
    stale: bool = False
    result: ClearResult | None = None


async def run_action(user: Any, action: str, body: ActionBody) -> Answer:
    """Clear or discard one task instance's store, audited. Returns (HTTP status, body)."""
    request = await StoreRequest.start(user, *body.ids(), edit=True, extra={"action": action})
    if not isinstance(request, StoreRequest):
        return request
    ref = request.ref
    if request.task_active:
        message = (
            f"The task instance is {ref.state}: it may be writing checkpoints right now. "
            "Wait until it finishes (or mark it failed), then try again. Nothing was deleted."
        )
        return await request.refuse(action, 409, "task_active", message)

    def act(store: CheckpointStore) -> _ActionOutcome:
        what = preview(store, action)
        if body.expected_epoch is not None and what.epoch != body.expected_epoch:
            return _ActionOutcome(what, stale=True)
        if what.nothing_to_do:
            return _ActionOutcome(what)  # no fencing epoch in a store that holds nothing
        return _ActionOutcome(
            what, result=store.housekeeping.clear() if action == "clear" else store.housekeeping.discard_uncommitted()
        )

    try:
        owned = await request.run(act, retries=2)
    except Exception as exc:
        problem = request.problem(exc)
        return await request.refuse(action, problem.status_code, problem.kind, problem.message)
    foreign = owned.foreign
    if owned.mismatch is not None:
        mismatch = owned.mismatch
        owners = list(mismatch.foreign_dag_ids)
        return await request.refuse(
            action, 409, "store_owner_mismatch", mismatch.message(), also=foreign, store_owner_dag_ids=owners
        )
    assert owned.value is not None
    what, result = owned.value.what, owned.value.result
    if owned.value.stale:
        message = (
            f"The store changed since the page was loaded (epoch {what.epoch}, the page showed "
            f"{body.expected_epoch}). Nothing was deleted; reload and review again."
        )
        return await request.refuse(action, 409, "store_changed", message)
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
    audit_id = await request.audit(action, deleted, False, foreign)
    who = (action, user_name(user), ref.dag_id, ref.task_id, ref.run_id, ref.map_index, deleted)
    log.info("checkpoints %s by %s on %s/%s/%s (map index %d): %s", *who)
    return 200, request.context | {"result": deleted, "audit_log_id": audit_id}


# ---------------------------------------------------------------------- routes

router = APIRouter()


@router.get("/api/task", summary="Checkpoints of a task instance's store")
async def get_task(user: GetUserDep, ti: TaskInstanceQuery) -> JSONResponse:
    return respond(await task_payload(user, *ti))


@router.get("/api/dag", summary="Checkpoint stores of a DAG's latest runs")
async def get_dag(
    user: GetUserDep,
    dag_id: IdQuery,
    limit: int = Query(DEFAULT_DAG_RUNS, ge=1, le=MAX_DAG_RUNS),
) -> JSONResponse:
    return JSONResponse(await dag_payload(user, dag_id, limit))


def _post_action(path: str, summary: str, answer: Callable[[Any, str, ActionBody], Awaitable[Answer]]) -> None:
    """``POST /api/task/{path}`` (``clear``, ``clear/preview``, ...): a same-origin JSON request
    (plugins/access.py) for the action the path names, answered by ``answer(user, action, body)``."""
    action = path.split("/")[0]

    async def endpoint(body: ActionBody, user: GetUserDep) -> JSONResponse:
        return respond(await answer(user, action, body))

    name = "post_" + path.replace("/", "_")  # the route's name and operation id: post_clear, post_clear_preview...
    dependencies = [Depends(require_same_origin_json)]
    router.add_api_route(
        f"/api/task/{path}", endpoint, methods=["POST"], name=name, summary=summary, dependencies=dependencies
    )


for _action, _summary in ACTIONS.items():
    _post_action(_action, _summary, run_action)
    _what = f"What a {_action} would delete now, and the records the deletion guard refuses (changes nothing)"
    _post_action(f"{_action}/preview", _what, confirmation_payload)


@router.get("/ui/task", response_class=HTMLResponse, include_in_schema=False)
async def task_page(request: Request, user: GetUserDep, ti: TaskInstanceQuery) -> HTMLResponse:
    if ti.map_index < 0:  # the tab's own href: the map index is in the path of the page that framed it
        ti = ti._replace(map_index=framing_map_index(request.headers.get("referer"), ti.dag_id, ti.run_id, ti.task_id))
    code, body = await task_payload(user, *ti)
    return HTMLResponse(pages.render_task(body), status_code=code)


@router.get("/ui/dag", response_class=HTMLResponse, include_in_schema=False)
async def dag_page(
    user: GetUserDep,
    dag_id: IdQuery,
    limit: int = Query(DEFAULT_DAG_RUNS, ge=1, le=MAX_DAG_RUNS),
) -> HTMLResponse:
    return HTMLResponse(pages.render_dag(await dag_payload(user, dag_id, limit)))


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
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.middleware("http")(_frame_headers)
    warm_up()
    return app
