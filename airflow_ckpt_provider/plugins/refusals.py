"""Refused requests of the Checkpoints view: audited, and answered without echoing their input.

A refused action (clear, discard, reprocess and its preview: not logged in, no rights, bad input, a
request another site could have forged) writes an audit entry naming the task its body aimed at, as
far as it can be read (docs/security.md); the API answers JSON, the pages a short page (a login link
on 401). Clear and discard previews that are refused stay unaudited reads.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from airflow_ckpt_provider.plugins import pages
from airflow_ckpt_provider.plugins.audit import EVENTS, write_audit_entry
from airflow_ckpt_provider.plugins.confirmation import ACTIONS
from airflow_ckpt_provider.plugins.flow import MAX_ID_LENGTH, user_name

log = logging.getLogger(__name__)

#: Bytes of a refused action's body read to say, in the audit log, which task it was aimed at (a reprocess
#: body lists up to 10,000 keys; a refused one with a huge key must still name its task).
_AUDIT_BODY_LIMIT = 1 << 20


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


async def http_error(request: Request, exc: Exception) -> Response:
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


async def invalid_request(request: Request, exc: Exception) -> Response:
    """422 for ids that cannot be Airflow's (too long, empty), without echoing the input back."""
    assert isinstance(exc, RequestValidationError)
    fields = sorted({".".join(str(p) for p in error.get("loc", ())[1:]) for error in exc.errors()})
    message = f"Invalid request: {', '.join(f for f in fields if f) or 'body'} (ids are 1-{MAX_ID_LENGTH} characters)"
    await _audit_refusal(request, 422, message)
    if "/ui/" in request.url.path:
        return HTMLResponse(pages.render_error(422, message, None), status_code=422)
    return JSONResponse({"detail": message}, status_code=422)
