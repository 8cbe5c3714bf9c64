"""Who may see and change a task's checkpoints, and which requests count as the user's own.

Authentication is Airflow's: the API server's JWT, from the ``Authorization: Bearer``
header or the UI's ``_token`` cookie (the Checkpoints view is an iframe on the same
origin, so the browser sends that cookie). Authorization asks the configured auth
manager about the DAG's task instances: reading needs ``GET``, clearing ``PUT``
(edit), exactly as Airflow's own task-instance endpoints do.

Changes are guarded against cross-site requests: the UI cookie is ``SameSite=Lax``
already, and on top of that a change must be a JSON body with a custom header (which
a cross-site form cannot send without a CORS preflight that this app never allows)
and, when the browser names its origin, that origin must be this server: its ``Host``, or
``[api] base_url``; forwarded headers count only where ``[ckpt] ui_trust_forwarded_headers``
says a proxy sets them.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from fastapi import HTTPException, Request, status

#: The header every change request must carry (any non-empty value).
CSRF_HEADER = "X-Requested-With"


def require_dag_access(user: Any, dag_id: str, *, edit: bool) -> None:
    """403 unless ``user`` may read (``edit=False``) or edit the task instances of ``dag_id``."""
    if not can_access_dag(user, dag_id, edit=edit):
        what = "clear checkpoints of" if edit else "see checkpoints of"
        needed = "edit" if edit else "read"
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"Forbidden: you may not {what} DAG {dag_id!r} (needs {needed} access to its task instances)",
        )


def can_access_dag(user: Any, dag_id: str, *, edit: bool) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.models.dag import DagModel

    return bool(
        get_auth_manager().is_authorized_dag(
            method="PUT" if edit else "GET",
            access_entity=DagAccessEntity.TASK_INSTANCE,
            details=DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id)),
            user=user,
        )
    )


def _origin_of(url: str) -> str | None:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.scheme and parts.netloc else None


def _this_origin(request: Request, *, trust_forwarded: bool) -> set[str]:
    """Origins this server answers as: the Host the browser sent, ``[api] base_url`` (the public
    address behind a proxy), and X-Forwarded-Host/-Proto only when ``[ckpt]
    ui_trust_forwarded_headers`` says a proxy sets them (a client can send them too)."""
    schemes = {request.url.scheme}
    hosts = {request.headers.get("host", "")}
    if trust_forwarded:
        schemes.add(request.headers.get("x-forwarded-proto", request.url.scheme))
        hosts.add(request.headers.get("x-forwarded-host", ""))
    origins = {f"{scheme}://{host}".lower() for host in hosts if host for scheme in schemes}
    try:
        from airflow.sdk.configuration import conf

        base_origin = _origin_of(conf.get("api", "base_url", fallback="") or "")
    except Exception:  # no [api] section: only the Host header counts
        base_origin = None
    if base_origin:
        origins.add(base_origin)
    return origins


def require_same_origin_json(request: Request) -> None:
    """Reject requests a page on another site could forge (before anything is read or changed)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, "Checkpoint actions take a JSON body (application/json)"
        )
    if not request.headers.get(CSRF_HEADER):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"Checkpoint actions must carry the {CSRF_HEADER} header (cross-site requests are refused)",
        )
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site and fetch_site not in ("same-origin", "none"):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Cross-site checkpoint actions are refused")
    origin = request.headers.get("origin")
    if origin and origin != "null":
        parts = urlsplit(origin)
        from airflow_ckpt_provider.hooks.config import CheckpointConfig

        trust = CheckpointConfig.load().ui_trust_forwarded_headers
        if f"{parts.scheme}://{parts.netloc}".lower() not in _this_origin(request, trust_forwarded=trust):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN, f"Cross-site checkpoint actions are refused (origin {origin})"
            )
    elif origin == "null":
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Checkpoint actions from opaque origins are refused")
