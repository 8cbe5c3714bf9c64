"""How every request of the Checkpoints view runs (docs/security.md, "The API server stays up").

The metadata DB is read in short sessions on worker threads (:func:`with_db`), never held while
a store is read; store calls run on the view's own bounded threads under a deadline
(:func:`store_calls`, plugins/store_calls.py); the task instance's store is the one its operator
names (:func:`locate`, hooks/locator.py). Shared by the clear/discard and reprocess endpoints.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from fastapi import HTTPException, status
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.locator import TaskStoreRef, locate_task_store
from airflow_ckpt_provider.plugins.access import require_dag_access
from airflow_ckpt_provider.plugins.audit import write_audit_entry
from airflow_ckpt_provider.plugins.problems import StoreProblem, display_uri, problem_from
from airflow_ckpt_provider.plugins.store_calls import StoreCalls
from airflow_ckpt_provider.store.errors import NotFoundError

T = TypeVar("T")


@cache
def store_calls() -> StoreCalls:
    """This process's pool for the store reads of pages (``[ckpt] ui_max_concurrent_store_calls`` at once)."""
    return StoreCalls(CheckpointConfig.load().ui_max_concurrent_store_calls)


@cache
def action_calls() -> StoreCalls:
    """This process's pool for previews and actions (``[ckpt] ui_max_concurrent_actions`` at once): an
    editor's slow previews never hold the slots pages need (docs/security.md, "The API server stays up")."""
    return StoreCalls(CheckpointConfig.load().ui_max_concurrent_actions, kind="previews and actions")


async def with_db(fn: Callable[[Session], T]) -> T:
    """``fn(session)`` on a worker thread, in a session that is closed before it returns."""
    from airflow.utils.session import create_session

    def call() -> T:
        with create_session(scoped=False) as session:
            return fn(session)

    return await run_in_threadpool(call)


def user_name(user: Any) -> str | None:
    return None if user is None else str(user.get_name())


def parse_map_index(value: str | None) -> int:
    """A ``map_index`` query value: a number >= 0, else -1 (absent, or not a number)."""
    text = (value or "").strip()
    return int(text) if text.isdigit() and len(text) <= 9 else -1


def framing_map_index(referer: str | None, dag_id: str, run_id: str, task_id: str) -> int:
    """The map index of the Airflow page that framed the task view, else -1.

    The tab's ``href`` cannot carry the map index (the UI fills ``{MAP_INDEX}`` on a mapped
    instance's page only, and leaves it unfilled elsewhere), but the iframe's request names
    the page it was loaded from: ``.../dags/{dag}/runs/{run}/tasks/{task}/mapped/{i}/...``.
    Only that exact task instance's path counts; any other page, or none (a proxy's
    ``Referrer-Policy: no-referrer``), reads as not mapped (a mapped task then shows its
    lowest map index, with links to the others)."""
    if not referer:
        return -1
    segments = [unquote(s) for s in urlsplit(referer).path.split("/")]
    wanted = ["dags", dag_id, "runs", run_id, "tasks", task_id, "mapped"]
    for start in range(len(segments) - len(wanted)):
        if segments[start : start + len(wanted)] == wanted:
            return parse_map_index(segments[start + len(wanted)])
    return -1


def locate(
    session: Session, user: Any, dag_id: str, task_id: str, run_id: str, *, edit: bool, map_index: int = -1
) -> TaskStoreRef:
    """The task instance's store, once the user may read (or edit) the DAG's task instances (403)
    and the task instance (with that map index) exists (404)."""
    require_dag_access(user, dag_id, edit=edit)
    try:
        return locate_task_store(session, dag_id, task_id, run_id, map_index)
    except NotFoundError as exc:
        if exc.reason != "task_instance":
            raise
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None


async def located(
    user: Any, dag_id: str, task_id: str, run_id: str, *, edit: bool, map_index: int = -1
) -> TaskStoreRef | StoreProblem:
    """:func:`locate` off the event loop; a store location that is not known yet (a templated
    ``checkpoint_uri`` the task has not rendered) becomes a :class:`StoreProblem`."""
    try:
        return await with_db(
            lambda session: locate(session, user, dag_id, task_id, run_id, edit=edit, map_index=map_index)
        )
    except HTTPException:
        raise
    except Exception as exc:  # a templated location the task has not rendered yet, or a DB failure
        return problem_from(exc, "")


def ref_json(ref: TaskStoreRef) -> dict[str, Any]:
    return {
        "dag_id": ref.dag_id,
        "task_id": ref.task_id,
        "run_id": ref.run_id,
        "map_index": ref.map_index,
        "map_indexes": list(ref.map_indexes),
        "task_state": ref.state,
        "store_uri": display_uri(ref.uri),
        "store_source": ref.source,
        "spark_task_id": ref.spark_task_id,
    }


def context_json(dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> dict[str, Any]:
    """The request's task instance, before its store is known."""
    return {
        "dag_id": dag_id,
        "task_id": task_id,
        "run_id": run_id,
        "map_index": map_index,
        "map_indexes": [],
        "task_state": None,
        "store_uri": None,
        "store_source": None,
        "spark_task_id": None,
        "can_edit": False,
    }


def audit_ref(
    user: Any,
    action: str,
    ref: TaskStoreRef,
    extra: dict[str, Any],
    failed: bool,
    also_dag_ids: tuple[str, ...] = (),
) -> int:
    """One audit entry for an action on ``ref``'s store (and one in each of ``also_dag_ids``, the
    other DAGs whose tasks own the store). A short DB session of its own: call it off the loop."""
    return write_audit_entry(
        user_name=user_name(user),
        action=action,
        dag_id=ref.dag_id,
        task_id=ref.task_id,
        run_id=ref.run_id,
        map_index=ref.map_index,
        extra={"store_uri": display_uri(ref.uri), **extra},
        failed=failed,
        also_dag_ids=also_dag_ids,
    )
