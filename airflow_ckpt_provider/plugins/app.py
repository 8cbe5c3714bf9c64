"""The Checkpoints FastAPI app, mounted on Airflow's API server at ``/checkpoints``.

Pages (shown as tabs of the task-instance and DAG pages, in an iframe):

* ``GET /ui/task?dag_id&run_id&task_id`` and ``GET /ui/dag?dag_id``

JSON (what the pages show, and the actions):

* ``GET /api/task?dag_id&run_id&task_id`` — read access to the DAG's task instances
* ``GET /api/dag?dag_id[&limit]`` — the same
* ``POST /api/task/clear`` and ``POST /api/task/discard`` — edit access; a JSON body
  ``{"dag_id", "task_id", "run_id", "expected_epoch"}`` with the ``X-Requested-With``
  header; each writes an audit-log entry.

Store failures answer 503 (unreachable) or 422 (corrupt, misconfigured) with
``{"error", "detail"}`` and never a stack trace; nothing is deleted then.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from airflow_ckpt_provider.display.deletion_preview import preview
from airflow_ckpt_provider.plugins import pages
from airflow_ckpt_provider.plugins.access import can_access_dag, require_dag_access, require_same_origin_json
from airflow_ckpt_provider.plugins.audit import write_audit_entry
from airflow_ckpt_provider.plugins.locator import (
    ACTIVE_STATES,
    TaskInstanceNotFound,
    TaskStoreRef,
    dag_store_rows,
    locate_task_store,
    open_ref,
)
from airflow_ckpt_provider.plugins.problems import StoreProblem, display_uri, problem_from, scrub
from airflow_ckpt_provider.plugins.reprocess import router as reprocess_router
from airflow_ckpt_provider.plugins.task_view import build_task_store_view, summary_of

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
#: Runs the DAG view looks at by default, and at most.
DEFAULT_DAG_RUNS = 10
MAX_DAG_RUNS = 50


class ActionBody(BaseModel):
    dag_id: str = Field(min_length=1, max_length=250)
    task_id: str = Field(min_length=1, max_length=250)
    run_id: str = Field(min_length=1, max_length=250)
    #: The epoch the confirmation was computed at: refuse if the store moved on since.
    expected_epoch: int | None = None


def _locate(session: Any, dag_id: str, task_id: str, run_id: str) -> TaskStoreRef:
    try:
        return locate_task_store(session, dag_id, task_id, run_id)
    except TaskInstanceNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None


def _ref_json(ref: TaskStoreRef) -> dict[str, Any]:
    return {
        "dag_id": ref.dag_id,
        "task_id": ref.task_id,
        "run_id": ref.run_id,
        "task_state": ref.state,
        "store_uri": display_uri(ref.uri),
        "store_source": ref.source,
    }


def task_payload(session: Any, user: Any, dag_id: str, task_id: str, run_id: str) -> tuple[int, dict[str, Any]]:
    """What the task view shows: (HTTP status, body). Store failures become a message."""
    require_dag_access(user, dag_id, edit=False)
    ref = _locate(session, dag_id, task_id, run_id)
    body = _ref_json(ref) | {"can_edit": can_access_dag(user, dag_id, edit=True)}
    secrets: list[str] = []
    try:
        store, secrets = open_ref(ref)
        try:
            report = build_task_store_view(store)
            return 200, body | {"store_uri": report.store_uri, "report": report.to_json()}
        finally:
            store.close()
    except Exception as exc:
        problem = problem_from(exc, ref.uri, secrets)
        return problem.status_code, body | problem.to_json()


def dag_payload(session: Any, user: Any, dag_id: str, limit: int) -> dict[str, Any]:
    require_dag_access(user, dag_id, edit=False)
    rows, discovery_problem = dag_store_rows(session, dag_id, limit_runs=limit)

    def summarize(ref: TaskStoreRef) -> dict[str, Any]:
        secrets: list[str] = []
        try:
            store, secrets = open_ref(ref)
            try:
                return {"store_uri": display_uri(store.uri), "summary": summary_of(store)}
            finally:
                store.close()
        except Exception as exc:
            return problem_from(exc, ref.uri, secrets).to_json()

    with ThreadPoolExecutor(max_workers=4) as pool:
        summaries = list(pool.map(summarize, [row.ref for row in rows]))
    stores = [
        _ref_json(row.ref) | {"task_ids": row.task_ids, "view_path": _task_view_path(row.ref)} | summary
        for row, summary in zip(rows, summaries, strict=True)
    ]
    return {
        "dag_id": dag_id,
        "runs_examined": limit,
        "stores": stores,
        "discovery_problem": None if discovery_problem is None else scrub(discovery_problem),
    }


def _task_view_path(ref: TaskStoreRef) -> str:
    """The Airflow UI route of the task instance's Checkpoints tab (relative to the UI root)."""
    parts = (quote(ref.dag_id, safe=""), quote(ref.run_id, safe=""), quote(ref.task_id, safe=""))
    return "dags/{}/runs/{}/tasks/{}/plugin/checkpoints".format(*parts)


def run_action(session: Any, user: Any, action: str, body: ActionBody) -> tuple[int, dict[str, Any]]:
    """Clear or discard one task instance's store, audited. Returns (HTTP status, body)."""
    require_dag_access(user, body.dag_id, edit=True)
    ref = _locate(session, body.dag_id, body.task_id, body.run_id)
    context = _ref_json(ref) | {"action": action}

    def audit(extra: dict[str, Any], *, failed: bool) -> int:
        return write_audit_entry(
            session,
            user=user,
            action=action,
            dag_id=ref.dag_id,
            task_id=ref.task_id,
            run_id=ref.run_id,
            extra={"store_uri": display_uri(ref.uri), **extra},
            failed=failed,
        )

    if ref.state in ACTIVE_STATES:
        message = (
            f"The task instance is {ref.state}: it may be writing checkpoints right now. "
            "Wait until it finishes (or mark it failed), then try again. Nothing was deleted."
        )
        audit_id = audit({"refused": message}, failed=True)
        return 409, context | {"error": "task_active", "detail": message, "audit_log_id": audit_id}

    secrets: list[str] = []
    try:
        store, secrets = open_ref(ref)
        try:
            what = preview(store, action)
            if body.expected_epoch is not None and what.epoch != body.expected_epoch:
                message = (
                    f"The store changed since the page was loaded (epoch {what.epoch}, the page showed "
                    f"{body.expected_epoch}). Nothing was deleted; reload and review again."
                )
                audit_id = audit({"refused": message}, failed=True)
                return 409, context | {"error": "store_changed", "detail": message, "audit_log_id": audit_id}
            result = store.clear() if action == "clear" else store.discard_uncommitted()
        finally:
            store.close()
    except Exception as exc:
        problem: StoreProblem = problem_from(exc, ref.uri, secrets)
        audit_id = audit({"error": problem.kind, "detail": problem.message}, failed=True)
        return problem.status_code, context | problem.to_json() | {"audit_log_id": audit_id}

    deleted = {
        "previous_epoch": what.epoch,
        "fencing_epoch": result.epoch,
        "deleted_checkpoints": len(result.deleted_checkpoints),
        "deleted_files": len(result.deleted_files),
        "deleted_snapshots": len(result.deleted_snapshots),
        "bytes_freed": result.bytes_freed,
        "keys_forgotten": what.keys,
    }
    audit_id = audit(deleted, failed=False)
    log.info(
        "checkpoints %s by %s on %s/%s/%s: %s",
        action,
        user.get_name(),
        ref.dag_id,
        ref.task_id,
        ref.run_id,
        deleted,
    )
    return 200, context | {"result": deleted, "audit_log_id": audit_id}


router = APIRouter()


@router.get("/api/task", summary="Checkpoints of a task instance's store")
def get_task(
    user: GetUserDep,
    session: SessionDep,
    dag_id: str = Query(min_length=1),
    run_id: str = Query(min_length=1),
    task_id: str = Query(min_length=1),
) -> JSONResponse:
    code, body = task_payload(session, user, dag_id, task_id, run_id)
    return JSONResponse(body, status_code=code)


@router.get("/api/dag", summary="Checkpoint stores of a DAG's latest runs")
def get_dag(
    user: GetUserDep,
    session: SessionDep,
    dag_id: str = Query(min_length=1),
    limit: int = Query(DEFAULT_DAG_RUNS, ge=1, le=MAX_DAG_RUNS),
) -> JSONResponse:
    return JSONResponse(dag_payload(session, user, dag_id, limit))


@router.post(
    "/api/task/clear",
    summary="Delete every checkpoint of the store: the next run reprocesses everything",
    dependencies=[Depends(require_same_origin_json)],
)
def post_clear(body: ActionBody, user: GetUserDep, session: SessionDep) -> JSONResponse:
    code, payload = run_action(session, user, "clear", body)
    return JSONResponse(payload, status_code=code)


@router.post(
    "/api/task/discard",
    summary="Delete sealed but uncommitted checkpoints and their output files",
    dependencies=[Depends(require_same_origin_json)],
)
def post_discard(body: ActionBody, user: GetUserDep, session: SessionDep) -> JSONResponse:
    code, payload = run_action(session, user, "discard", body)
    return JSONResponse(payload, status_code=code)


@router.get("/ui/task", response_class=HTMLResponse, include_in_schema=False)
def task_page(
    user: GetUserDep,
    session: SessionDep,
    dag_id: str = Query(min_length=1),
    run_id: str = Query(min_length=1),
    task_id: str = Query(min_length=1),
) -> HTMLResponse:
    code, body = task_payload(session, user, dag_id, task_id, run_id)
    return HTMLResponse(pages.render_task(body), status_code=code)


@router.get("/ui/dag", response_class=HTMLResponse, include_in_schema=False)
def dag_page(
    user: GetUserDep,
    session: SessionDep,
    dag_id: str = Query(min_length=1),
    limit: int = Query(DEFAULT_DAG_RUNS, ge=1, le=MAX_DAG_RUNS),
) -> HTMLResponse:
    return HTMLResponse(pages.render_dag(dag_payload(session, user, dag_id, limit)))


async def _http_error(request: Request, exc: Exception) -> Response:
    """JSON for the API; a short page for the views (a login link on 401)."""
    assert isinstance(exc, HTTPException)
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
    return app
