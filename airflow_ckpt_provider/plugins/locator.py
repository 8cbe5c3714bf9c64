"""Which store belongs to a task instance, and which stores a DAG's latest runs have.

A task instance's store is, in this order:

1. the store it reported using: the ``checkpoint_uri`` in its XCom (the submit
   operator pushes its plan before submitting; commit and clear operators return
   the store they worked on, which is the submit task's);
2. the ``checkpoint_uri`` its operator named (rendered template field);
3. the configured default ``{base}/{dag_id}/{task_id}/{run_id}``, derived exactly as
   the operator derives it (``CheckpointHook.resolve_uri``).

The DAG view finds stores from the first two sources for the latest runs, and by
listing the default layout under the DAG's prefix, so a store whose task recorded
nothing (it failed before pushing) still shows. Tasks sharing a store are one row.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from airflow_ckpt_provider.contract import PLAN_XCOM_KEY
from airflow_ckpt_provider.store import (
    CheckpointError,
    CheckpointStore,
    StoreUnavailableError,
    open_blobs,
    open_store,
)

#: The template field / XCom entry that names a store.
URI_FIELD = "checkpoint_uri"
#: XCom keys whose value may name the store a task used (the submit operator's plan, any return value).
XCOM_KEYS = (PLAN_XCOM_KEY, "return_value")
#: Store reads from the UI fail fast: a person is waiting and the page must say why.
UI_TIMEOUT_SECONDS = 5.0
UI_MAX_ATTEMPTS = 2
#: Task-instance states in which the task may be writing to its store right now.
ACTIVE_STATES = frozenset({"running", "queued", "scheduled", "restarting", "deferred", "up_for_reschedule"})

SOURCE_USED = "used by the task"
SOURCE_NAMED = "named by the operator"
SOURCE_DEFAULT = "default location"


class TaskInstanceNotFound(LookupError):
    """No task instance (dag_id, task_id, run_id) in the metadata DB."""


@dataclass(frozen=True)
class TaskStoreRef:
    """Where one task instance keeps its checkpoints (no credentials here)."""

    dag_id: str
    task_id: str
    run_id: str
    uri: str
    aws_conn_id: str | None
    state: str | None
    source: str  # SOURCE_USED, SOURCE_NAMED or SOURCE_DEFAULT


@dataclass(frozen=True)
class _Named:
    uri: str
    source: str
    aws_conn_id: str | None = None


def _named_by_xcom(
    session: Session, dag_id: str, run_ids: Sequence[str], task_id: str | None = None
) -> dict[tuple[str, str], _Named]:
    from airflow.models.xcom import XComModel

    query = select(XComModel).where(
        XComModel.dag_id == dag_id, XComModel.run_id.in_(list(run_ids)), XComModel.key.in_(XCOM_KEYS)
    )
    if task_id is not None:
        query = query.where(XComModel.task_id == task_id)
    found: dict[tuple[str, str], _Named] = {}
    # The plan is pushed before the submit, the return value after: prefer the latter.
    for row in sorted(session.scalars(query), key=lambda r: (XCOM_KEYS.index(r.key), -r.map_index)):
        try:
            value = XComModel.deserialize_value(row)
        except Exception:  # a value this module does not understand names no store
            continue
        if isinstance(value, Mapping) and isinstance(value.get(URI_FIELD), str) and value[URI_FIELD].strip():
            conn = value.get("aws_conn_id")
            found[(row.task_id, row.run_id)] = _Named(
                value[URI_FIELD].strip(), SOURCE_USED, conn if isinstance(conn, str) and conn else None
            )
    return found


def _named_by_rendered_fields(
    session: Session, dag_id: str, run_ids: Sequence[str], task_id: str | None = None
) -> dict[tuple[str, str], _Named]:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF

    query = select(RTIF.task_id, RTIF.run_id, RTIF.map_index, RTIF.rendered_fields).where(
        RTIF.dag_id == dag_id, RTIF.run_id.in_(list(run_ids))
    )
    if task_id is not None:
        query = query.where(RTIF.task_id == task_id)
    found: dict[tuple[str, str], _Named] = {}
    # Mapped instances share the task's store; the lowest map index speaks for them.
    for tid, rid, _map_index, fields in session.execute(query.order_by(RTIF.map_index.desc())):
        value = fields.get(URI_FIELD) if isinstance(fields, dict) else None
        if isinstance(value, str) and value.strip() and value.strip() != "None":
            found[(tid, rid)] = _Named(value.strip(), SOURCE_NAMED)
    return found


def _named(
    session: Session, dag_id: str, run_ids: Sequence[str], task_id: str | None = None
) -> dict[tuple[str, str], _Named]:
    return _named_by_rendered_fields(session, dag_id, run_ids, task_id) | _named_by_xcom(
        session, dag_id, run_ids, task_id
    )


def _normalized(uri: str) -> str:
    """Plain local paths as the ``file://`` URI the store reports, so one store has one name."""
    if os.path.isabs(uri):
        return "file://" + os.path.normpath(uri).rstrip("/")
    return uri


def _ref(dag_id: str, task_id: str, run_id: str, state: str | None, named: _Named | None) -> TaskStoreRef:
    from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook

    return TaskStoreRef(
        dag_id=dag_id,
        task_id=task_id,
        run_id=run_id,
        uri=_normalized(
            CheckpointHook.resolve_uri(
                None if named is None else named.uri, dag_id=dag_id, task_id=task_id, run_id=run_id
            )
        ),
        aws_conn_id=None if named is None else named.aws_conn_id,
        state=state,
        source=SOURCE_DEFAULT if named is None else named.source,
    )


def locate_task_store(session: Session, dag_id: str, task_id: str, run_id: str) -> TaskStoreRef:
    """The store of a task instance that exists in the DB; :class:`TaskInstanceNotFound` otherwise."""
    from airflow.models.taskinstance import TaskInstance as TI

    states = [
        None if s is None else str(s)
        for s in session.scalars(
            select(TI.state).where(TI.dag_id == dag_id, TI.task_id == task_id, TI.run_id == run_id)
        ).all()
    ]
    if not states:
        raise TaskInstanceNotFound(f"no task instance {task_id!r} in run {run_id!r} of DAG {dag_id!r}")
    # Mapped instances share one store: if any of them is active, the store is in use.
    active = [s for s in states if s in ACTIVE_STATES]
    state = active[0] if active else states[0]
    named = _named(session, dag_id, [run_id], task_id).get((task_id, run_id))
    return _ref(dag_id, task_id, run_id, state, named)


def open_ref(ref: TaskStoreRef) -> tuple[CheckpointStore, list[str]]:
    """Open the store with the operator's connection; returns it and the secret values to scrub."""
    from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook
    from airflow_ckpt_provider.plugins.problems import secret_values

    hook = CheckpointHook(checkpoint_uri=ref.uri, aws_conn_id=ref.aws_conn_id)
    try:
        options = dict(hook.store_options)
    except CheckpointError:
        raise
    except Exception as exc:  # the connection or the credential chain failed: the store cannot be opened
        raise StoreUnavailableError(
            f"no usable credentials from connection {hook.aws_conn_id!r} ({type(exc).__name__}: {exc}); "
            "define the connection with keys (or fix [ckpt] aws_conn_id)"
        ) from exc
    if ref.uri.startswith(("s3://", "s3a://")):
        options["timeout_seconds"] = min(float(options.get("timeout_seconds") or 10), UI_TIMEOUT_SECONDS)
        options["max_attempts"] = UI_MAX_ATTEMPTS
    return open_store(ref.uri, **options), secret_values(options)


@dataclass
class DagStoreRow:
    """One store among a DAG's latest runs (tasks sharing a store are one row)."""

    ref: TaskStoreRef
    task_ids: list[str] = field(default_factory=list)


def latest_run_ids(session: Session, dag_id: str, limit: int) -> list[str]:
    from airflow.models.dagrun import DagRun

    return list(
        session.scalars(
            select(DagRun.run_id).where(DagRun.dag_id == dag_id).order_by(DagRun.run_after.desc()).limit(limit)
        )
    )


def _default_layout_prefix(dag_id: str) -> str:
    """``{base}/{dag_id}`` of the default layout (derived from the hook so both agree)."""
    from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook

    probe = CheckpointHook.resolve_uri(None, dag_id=dag_id, task_id="t", run_id="r")
    suffix = "/t/r"
    if not probe.endswith(suffix):  # pragma: no cover - a layout this module does not know
        raise RuntimeError(f"unexpected default store layout {probe!r}")
    return probe[: -len(suffix)]


def dag_store_rows(session: Session, dag_id: str, *, limit_runs: int = 10) -> tuple[list[DagStoreRow], str | None]:
    """The stores of the DAG's latest ``limit_runs`` runs, newest run first.

    Also returns why the default layout could not be listed (None when it could):
    the stores named by XCom or rendered fields are still listed then.
    """
    from airflow.models.taskinstance import TaskInstance as TI

    from airflow_ckpt_provider.hooks.config import path_segment

    run_ids = latest_run_ids(session, dag_id, limit_runs)
    if not run_ids:
        return [], None
    order = {rid: i for i, rid in enumerate(run_ids)}
    tis: dict[tuple[str, str], str | None] = {}
    for task_id, run_id, state in session.execute(
        select(TI.task_id, TI.run_id, TI.state).where(TI.dag_id == dag_id, TI.run_id.in_(run_ids))
    ):
        tis.setdefault((task_id, run_id), None if state is None else str(state))
    named = _named(session, dag_id, run_ids)
    candidates = set(named)
    discovery_problem = None
    try:
        candidates |= _discover_default_layout(dag_id, tis, path_segment)
    except CheckpointError as exc:
        discovery_problem = str(exc)
    rows: dict[str, DagStoreRow] = {}
    # Tasks that reported their store first, so a row is labelled by the store's real user.
    for task_id, run_id in sorted(candidates, key=lambda k: (order.get(k[1], 1 << 30), k not in named, k[0])):
        ref = _ref(dag_id, task_id, run_id, tis.get((task_id, run_id)), named.get((task_id, run_id)))
        row = rows.setdefault(ref.uri, DagStoreRow(ref=ref))
        row.task_ids.append(task_id)
    return list(rows.values()), discovery_problem


def _discover_default_layout(
    dag_id: str, tis: Mapping[tuple[str, str], str | None], path_segment: Callable[[str], str]
) -> set[tuple[str, str]]:
    """Task instances whose default-layout store directory exists (one listing per task)."""
    from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook

    by_segment = {(path_segment(task_id), path_segment(run_id)): (task_id, run_id) for task_id, run_id in tis}
    prefix = _default_layout_prefix(dag_id)
    options = dict(CheckpointHook(checkpoint_uri=prefix).store_options)
    options.update(timeout_seconds=UI_TIMEOUT_SECONDS, max_attempts=UI_MAX_ATTEMPTS)
    blobs = open_blobs(prefix, **options)
    try:
        found: set[tuple[str, str]] = set()
        task_segments = {seg for seg, _ in by_segment}
        for task_segment in blobs.list_dirs(""):
            if task_segment not in task_segments:
                continue
            for run_segment in blobs.list_dirs(f"{task_segment}/"):
                if (task_segment, run_segment) in by_segment:
                    found.add(by_segment[(task_segment, run_segment)])
        return found
    finally:
        blobs.close()
