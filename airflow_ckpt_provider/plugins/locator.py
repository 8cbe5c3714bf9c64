"""Which store a task instance works on, and which stores a DAG's latest runs have.

Read from the metadata DB only (no store is opened here): the store a task's operator was
configured with (hooks/task_store.py: rendered fields, serialized DAG, ``[ckpt]`` default),
never an XCom value. Callers hold a DB session only for these reads, never while a store
is read (plugins/store_calls.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from airflow_ckpt_provider.hooks.declared_roots import declared_output_roots
from airflow_ckpt_provider.hooks.task_store import (
    SOURCE_DEFAULT,
    SOURCE_NAMED,
    SOURCE_RENDERED,
    ConfiguredStore,
    StoreLocationUnknownError,
    TaskInstanceNotFound,
    configured_store,
    task_instance_states,
)
from airflow_ckpt_provider.store.blobs.local import file_uri, local_path_of

__all__ = [
    "ACTIVE_STATES",
    "SOURCE_DEFAULT",
    "SOURCE_NAMED",
    "SOURCE_RENDERED",
    "DagStoreRow",
    "TaskInstanceNotFound",
    "TaskStoreRef",
    "dag_store_rows",
    "locate_task_store",
]

#: Task-instance states in which the task may be writing to its store right now.
ACTIVE_STATES = frozenset({"running", "queued", "scheduled", "restarting", "deferred", "up_for_reschedule"})


@dataclass(frozen=True)
class TaskStoreRef:
    """Where one task instance keeps its checkpoints (no credentials here)."""

    dag_id: str
    task_id: str
    run_id: str
    uri: str
    aws_conn_id: str | None
    state: str | None
    source: str  # SOURCE_RENDERED, SOURCE_NAMED or SOURCE_DEFAULT
    map_index: int = -1
    #: The Spark task whose store this is, for a commit/clear/sensor task that names none itself.
    spark_task_id: str | None = None
    #: Every map index of the task in this run (empty: the task is not mapped); each has its own store.
    map_indexes: tuple[int, ...] = ()
    #: The output roots the DAG declares for this store (hooks/declared_roots.py): the only places
    #: an action may delete, move or write output files (empty: none; docs/security.md).
    output_roots: tuple[str, ...] = ()


def canonical_uri(uri: str) -> str:
    """One name per store: local paths and ``file:`` URIs as the escaped ``file://`` URI the store
    reports (so '#', '?' or '%2F' in a path never name another store), ``s3a://`` as ``s3://``."""
    if uri.startswith("file:") or uri.startswith("/"):
        return file_uri(local_path_of(uri))
    if uri.startswith("s3a://"):
        return "s3://" + uri[len("s3a://") :].rstrip("/")
    return uri.rstrip("/")


def _ref(
    dag_id: str,
    task_id: str,
    run_id: str,
    map_index: int,
    state: str | None,
    found: ConfiguredStore,
    map_indexes: tuple[int, ...] = (),
    output_roots: tuple[str, ...] = (),
) -> TaskStoreRef:
    return TaskStoreRef(
        dag_id=dag_id,
        task_id=task_id,
        run_id=run_id,
        uri=canonical_uri(found.uri),
        aws_conn_id=found.aws_conn_id,
        state=state,
        source=found.source,
        map_index=map_index,
        spark_task_id=found.spark_task_id,
        map_indexes=map_indexes,
        output_roots=output_roots,
    )


def locate_task_store(session: Session, dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> TaskStoreRef:
    """The store of a task instance that exists in the DB. Raises :class:`TaskInstanceNotFound`,
    :class:`StoreLocationUnknownError` (a templated location the task has not rendered yet).

    Each mapped instance has its own store; ``map_index`` -1 on a mapped task (Airflow's page of
    all its instances) means its lowest map index, and the ref lists the others.
    """
    states = task_instance_states(session, dag_id, task_id, run_id)
    mapped = tuple(m for m in states if m >= 0)
    if map_index < 0 and mapped:
        map_index = mapped[0]
    if map_index not in states:
        raise TaskInstanceNotFound(
            f"no map index {map_index} of task {task_id!r} in run {run_id!r} of DAG {dag_id!r}"
            + (f" (it has map indexes {mapped[0]}..{mapped[-1]})" if mapped else " (the task is not mapped)")
        )
    found = configured_store(session, dag_id, task_id, run_id, map_index=map_index)
    state = states[map_index]
    if found.source != SOURCE_DEFAULT:
        # A store the operator names may be shared by all of the task's instances: it is in use
        # while any of them is active (default stores are one per map index).
        active = [s for s in states.values() if s in ACTIVE_STATES]
        state = active[0] if active else state
    roots = declared_output_roots(session, dag_id, task_id, run_id, map_index)
    return _ref(dag_id, task_id, run_id, map_index, state, found, mapped, roots)


@dataclass
class DagStoreRow:
    """One store among a DAG's latest runs (tasks sharing a store are one row; each map index of a
    mapped task with the default location is a row of its own)."""

    ref: TaskStoreRef
    task_ids: list[str] = field(default_factory=list)


def latest_run_ids(session: Session, dag_id: str, limit: int) -> list[str]:
    from airflow.models.dagrun import DagRun

    return list(
        session.scalars(
            select(DagRun.run_id).where(DagRun.dag_id == dag_id).order_by(DagRun.run_after.desc()).limit(limit)
        )
    )


def dag_store_rows(session: Session, dag_id: str, *, limit_runs: int = 10) -> tuple[list[DagStoreRow], list[str]]:
    """The stores of the checkpointing tasks of the DAG's latest ``limit_runs`` runs, newest run first.

    Also returns one line per task instance whose store is not known (a templated location
    it has not rendered yet). Tasks of other operators (no ``checkpoint_uri``) are left out.
    """
    from airflow.models.taskinstance import TaskInstance as TI

    run_ids = latest_run_ids(session, dag_id, limit_runs)
    if not run_ids:
        return [], []
    order = {rid: i for i, rid in enumerate(run_ids)}
    tis: dict[tuple[str, str, int], str | None] = {}
    for task_id, run_id, map_index, state in session.execute(
        select(TI.task_id, TI.run_id, TI.map_index, TI.state).where(TI.dag_id == dag_id, TI.run_id.in_(run_ids))
    ):
        tis[(task_id, run_id, int(map_index))] = None if state is None else str(state)
    rows: dict[str, DagStoreRow] = {}
    unknown: list[str] = []
    # Tasks that name their own store first, so a row is labelled by the store's real user.
    for task_id, run_id, map_index in sorted(tis, key=lambda k: (order.get(k[1], 1 << 30), k[0], k[2])):
        try:
            found = configured_store(session, dag_id, task_id, run_id, map_index=map_index)
        except StoreLocationUnknownError as exc:
            unknown.append(str(exc))
            continue
        if not found.checkpoint_task:
            continue
        ref = _ref(dag_id, task_id, run_id, map_index, tis[(task_id, run_id, map_index)], found)
        row = rows.get(ref.uri)
        if row is not None and ref.state in ACTIVE_STATES and row.ref.state not in ACTIVE_STATES:
            row.ref = dataclasses.replace(row.ref, state=ref.state)  # a shared store is in use if any user is
        row = rows.setdefault(ref.uri, DagStoreRow(ref=ref))
        if task_id not in row.task_ids:
            row.task_ids.append(task_id)
        if found.spark_task_id is None and row.ref.spark_task_id is not None:
            row.ref = ref  # the Spark task itself labels the row
    return list(rows.values()), unknown
