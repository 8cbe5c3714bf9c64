"""Which stores a DAG's latest runs have: the rows of the Checkpoints view's DAG page.

Each task instance's store is hooks/locator.py's answer from the metadata DB (rendered fields,
serialized DAG, ``[ckpt]`` default; never an XCom value). No store is opened here: callers hold a
DB session only for these reads, never while a store is read (plugins/store_calls.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from airflow_ckpt_provider.hooks.locator import ACTIVE_STATES, TaskStoreRef, configured_store
from airflow_ckpt_provider.store.errors import NotFoundError


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
        except NotFoundError as exc:
            if exc.reason != "store_location":
                raise
            unknown.append(str(exc))
            continue
        if not found.checkpoint_task:
            continue
        ref = TaskStoreRef.of(dag_id, task_id, run_id, map_index, tis[(task_id, run_id, map_index)], found)
        row = rows.get(ref.uri)
        if row is not None and ref.state in ACTIVE_STATES and row.ref.state not in ACTIVE_STATES:
            row.ref = dataclasses.replace(row.ref, state=ref.state)  # a shared store is in use if any user is
        row = rows.setdefault(ref.uri, DagStoreRow(ref=ref))
        if task_id not in row.task_ids:
            row.task_ids.append(task_id)
        if found.spark_task_id is None and row.ref.spark_task_id is not None:
            row.ref = ref  # the Spark task itself labels the row
    return list(rows.values()), unknown
