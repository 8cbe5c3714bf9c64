"""How every request of the Checkpoints view runs (docs/security.md, "The API server stays up").

The metadata DB is read in short sessions on worker threads (:func:`with_db`), never held while
a store is read; store calls run on the view's own bounded threads under a deadline
(:func:`store_calls`, plugins/store_calls.py); the task instance's store is the one its operator
names (:func:`locate`, hooks/locator.py). :class:`StoreRequest` is what every request on one task
instance's store shares: the task page, the clear/discard dialog and actions, reprocess and its history.

A request's deadline covers its store call only, and starts when that call is handed to its pool:
the access checks, the DB reads and the audit entry run before or after it, and what a process's first
store call would load is loaded with the app (plugins/store_access.py, ``warm_up``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Annotated, Any, Generic, NamedTuple, TypeVar
from urllib.parse import unquote, urlsplit

from fastapi import Depends, HTTPException, Query, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.locator import ACTIVE_STATES, TaskStoreRef, locate_task_store
from airflow_ckpt_provider.plugins.access import can_access_dag, require_dag_access
from airflow_ckpt_provider.plugins.audit import write_audit_entry
from airflow_ckpt_provider.plugins.ownership import OwnerMismatch, check_owners, owner_dag_id
from airflow_ckpt_provider.plugins.problems import StoreProblem, display_uri, problem_from
from airflow_ckpt_provider.plugins.store_access import open_for_view
from airflow_ckpt_provider.plugins.store_calls import Deadline, StoreCalls
from airflow_ckpt_provider.store import CheckpointStore, Epoch
from airflow_ckpt_provider.store.errors import NotFoundError

T = TypeVar("T")
#: Airflow's ids are at most 250 characters (its ``StringID`` columns).
MAX_ID_LENGTH = 250
#: An Airflow id in a query string (a longer one is refused with 422, never looked up).
IdQuery = Annotated[str, Query(min_length=1, max_length=MAX_ID_LENGTH)]
#: A map index in a query string (see :func:`parse_map_index`).
MapIndexQuery = Annotated[str | None, Query(max_length=MAX_ID_LENGTH)]
#: What a request answers: (HTTP status, JSON body).
Answer = tuple[int, dict[str, Any]]


class TaskInstanceIds(NamedTuple):
    """A task instance as a request names it (``map_index`` -1: not mapped, or the task's lowest)."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int


def _task_instance_query(
    dag_id: IdQuery, run_id: IdQuery, task_id: IdQuery, map_index: MapIndexQuery = None
) -> TaskInstanceIds:
    return TaskInstanceIds(dag_id, task_id, run_id, parse_map_index(map_index))


#: The task instance a GET names in its query string: ``dag_id``, ``run_id``, ``task_id``, ``map_index``.
TaskInstanceQuery = Annotated[TaskInstanceIds, Depends(_task_instance_query)]


class TaskInstanceBody(BaseModel):
    """The task instance a POST acts on (clear, discard, reprocess and their previews)."""

    dag_id: str = Field(min_length=1, max_length=MAX_ID_LENGTH)
    task_id: str = Field(min_length=1, max_length=MAX_ID_LENGTH)
    run_id: str = Field(min_length=1, max_length=MAX_ID_LENGTH)
    #: The mapped task instance (-1: not mapped, or the task's lowest map index).
    map_index: int = Field(default=-1, ge=-1)

    def ids(self) -> TaskInstanceIds:
        return TaskInstanceIds(self.dag_id, self.task_id, self.run_id, self.map_index)


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


def respond(answer: Answer) -> JSONResponse:
    """An (HTTP status, body) answer as the API's JSON response."""
    code, body = answer
    return JSONResponse(body, status_code=code)


@dataclass(frozen=True)
class Owned(Generic[T]):
    """What a store call found: ``value`` (None when refused), or the ``mismatch`` that refused it;
    ``foreign``: the other DAGs whose tasks opened the store's epochs (plugins/ownership.py)."""

    value: T | None = None
    mismatch: OwnerMismatch | None = None
    foreign: tuple[str, ...] = ()


@dataclass
class StoreRequest:
    """One request on a task instance's store, once located: the response's ``context`` and the
    secrets its store call read (scrubbed from every problem shown). A request that reads (``edit``
    False: the task page, the reprocess history) runs on the pages' pool under ``[ckpt]
    ui_store_deadline_seconds``; one that edits (a preview, an action: every record is read) on the
    actions' pool under ``ui_action_deadline_seconds``."""

    user: Any
    ref: TaskStoreRef
    context: dict[str, Any]
    edit: bool
    config: CheckpointConfig
    secrets: list[str] = field(default_factory=list)

    @classmethod
    async def start(
        cls,
        user: Any,
        dag_id: str,
        task_id: str,
        run_id: str,
        map_index: int,
        *,
        edit: bool,
        extra: dict[str, Any] | None = None,
        context: Callable[[TaskStoreRef], dict[str, Any]] = ref_json,
    ) -> StoreRequest | Answer:
        """The request on the task instance's store once the user may read (or ``edit``) it (else 403,
        404), or the answer of a store location that is not known yet. ``extra``: in every answer."""
        extra = extra or {}
        config = CheckpointConfig.load()
        found = await located(user, dag_id, task_id, run_id, edit=edit, map_index=map_index)
        if isinstance(found, StoreProblem):
            return found.status_code, context_json(dag_id, task_id, run_id, map_index) | extra | found.to_json()
        return cls(user, found, context(found) | extra, edit, config)

    @property
    def task_active(self) -> bool:
        """The task instance may be writing to its store right now: clear and reprocess wait."""
        return self.ref.state in ACTIVE_STATES

    async def run(
        self,
        work: Callable[[CheckpointStore], T],
        *,
        retries: int = 0,
        epochs_read: Callable[[T], Iterable[Epoch]] | None = None,
    ) -> Owned[T]:
        """``work(store)`` on a store thread, under a deadline that starts now and covers the store call
        only: the store opened with its operator's connection (``retries`` per request), refused
        (:attr:`Owned.mismatch`) when other DAGs' tasks own it and the user lacks the same rights on
        them. The owners are read from the store's epoch records before ``work``, or, with
        ``epochs_read``, from the records ``work`` read anyway (no second listing)."""
        pool = action_calls() if self.edit else store_calls()
        seconds = self.config.ui_action_deadline_seconds if self.edit else self.config.ui_store_deadline_seconds
        deadline = Deadline.after(seconds)

        def call() -> Owned[T]:
            store, found = open_for_view(self.ref, deadline, self.config, retries=retries)
            self.secrets.extend(found)
            try:
                if epochs_read is None:
                    return self._owned(store.epochs.all(), lambda: work(store))
                value = work(store)
                return self._owned(epochs_read(value), lambda: value)
            finally:
                store.close()

        return await pool.run(call, deadline)

    def _owned(self, epochs: Iterable[Epoch], value: Callable[[], T]) -> Owned[T]:
        epochs = tuple(epochs)
        foreign = tuple(sorted({d for d in map(owner_dag_id, epochs) if d and d != self.ref.dag_id}))

        def authorized(dag_id: str) -> bool:
            return can_access_dag(self.user, dag_id, edit=self.edit)

        mismatch = check_owners(epochs, self.ref.dag_id, authorized, edit=self.edit)
        return Owned(mismatch=mismatch, foreign=foreign) if mismatch is not None else Owned(value(), None, foreign)

    def problem(self, exc: BaseException) -> StoreProblem:
        """What failed, told without credentials (plugins/problems.py)."""
        return problem_from(exc, self.ref.uri, self.secrets)

    async def audit(self, action: str, entry: dict[str, Any], failed: bool, also: tuple[str, ...] = ()) -> int:
        """One audit entry for ``action`` on the store (and in each DAG of ``also``), off the loop."""
        return await run_in_threadpool(audit_ref, self.user, action, self.ref, entry, failed, also)

    async def refuse(
        self,
        action: str,
        code: int,
        kind: str,
        message: str,
        *,
        also: tuple[str, ...] = (),
        asked: dict[str, Any] | None = None,
        **extra: Any,
    ) -> Answer:
        """A refused ``action``, audited (``asked``: what the request asked for): (HTTP status, body)."""
        entry = (asked or {}) | {"refused": message, "http_status": code, "error": kind, **extra}
        audit_id = await self.audit(action, entry, True, also)
        return code, self.context | {"error": kind, "detail": message, "audit_log_id": audit_id, **extra}
