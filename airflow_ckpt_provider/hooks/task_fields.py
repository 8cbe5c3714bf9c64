"""What Airflow's metadata DB says about a task instance's operator fields (no store decided here).

The store fields (``checkpoint_uri``, ``aws_conn_id``, ``spark_task_id``) and the output roots of a
task instance, in this order (docs/security.md, "Which store a page shows"):

1. as that task instance rendered them (Airflow records rendered template fields when it runs);
2. as the serialized DAG of the task instance's DAG version names them (a task that has not run
   yet), unless they are templates (then the store is not known yet: an error);

Never from XCom: anyone with edit rights on a DAG can write its task instances' XCom entries
through the REST API. Which store those fields make is hooks/locator.py's answer.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from airflow_ckpt_provider.hooks.default_location import JobIdentity
from airflow_ckpt_provider.store.errors import NotFoundError

#: The operator fields that name a store (template fields of the provider's operators).
URI_FIELD = "checkpoint_uri"
CONN_FIELD = "aws_conn_id"
SPARK_TASK_FIELD = "spark_task_id"

SOURCE_RENDERED = "rendered by the task"
SOURCE_NAMED = "named by the operator"
SOURCE_DEFAULT = "default location"

TEMPLATE_MARKERS = ("{{", "{%", "{#")
#: Deserialized DAG versions kept per process (the view asks for the same few DAGs again and again).
_DAG_CACHE_SIZE = 32


@dataclass(frozen=True)
class OperatorFields:
    """A task instance's store fields, where they were read (a ``SOURCE_*``), and whether its operator
    is one of the provider's (it has a ``checkpoint_uri`` field)."""

    values: Mapping[str, Any]
    source: str
    checkpoint_task: bool


class _DagVersions:
    """A small, thread-safe cache of deserialized DAG versions, keyed by version id and hash."""

    def __init__(self) -> None:
        self._cache: OrderedDict[tuple[str, str | None], Any] = OrderedDict()
        self._lock = threading.Lock()

    def task(self, session: Session, dag_id: str, task_id: str, version_id: Any) -> Any | None:
        return getattr(self.dag(session, dag_id, version_id), "task_dict", {}).get(task_id)

    def dag(self, session: Session, dag_id: str, version_id: Any) -> Any | None:
        """The deserialized DAG of version ``version_id`` (else the DAG's latest), or None."""
        from airflow.models.serialized_dag import SerializedDagModel

        model = None
        if version_id is not None:
            model = session.scalar(select(SerializedDagModel).where(SerializedDagModel.dag_version_id == version_id))
        if model is None:  # a run older than DAG versioning, or a version `airflow db clean` removed
            model = SerializedDagModel.get(dag_id, session=session)
        if model is None:
            return None
        key = (str(model.dag_version_id), model.dag_hash)
        with self._lock:
            dag = self._cache.get(key)
            if dag is not None:
                self._cache.move_to_end(key)
        if dag is None:
            dag = model.dag
            with self._lock:
                self._cache[key] = dag
                while len(self._cache) > _DAG_CACHE_SIZE:
                    self._cache.popitem(last=False)
        return dag


DAG_VERSIONS = _DagVersions()


def task_instance_states(session: Session, dag_id: str, task_id: str, run_id: str) -> dict[int, str | None]:
    """The state of each map index of the task instance (-1 alone: not mapped), by map index;
    :class:`NotFoundError` (``task_instance``) if there is none."""
    from airflow.models.taskinstance import TaskInstance as TI

    states = {
        int(m): None if s is None else str(s)
        for m, s in session.execute(
            select(TI.map_index, TI.state)
            .where(TI.dag_id == dag_id, TI.task_id == task_id, TI.run_id == run_id)
            .order_by(TI.map_index)
        )
    }
    if not states:
        raise NotFoundError(f"no task instance {task_id!r} in run {run_id!r} of DAG {dag_id!r}", reason="task_instance")
    return states


def operator_fields(session: Session, dag_id: str, task_id: str, run_id: str, map_index: int) -> OperatorFields:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
    from airflow.models.taskinstance import TaskInstance as TI

    rendered_query = select(RTIF.map_index, RTIF.rendered_fields).where(
        RTIF.dag_id == dag_id, RTIF.task_id == task_id, RTIF.run_id == run_id
    )
    rendered_rows = {int(m): f for m, f in session.execute(rendered_query)}
    # Mapped instances share the task's fields unless told otherwise; the lowest map index speaks for them.
    rendered = rendered_rows.get(map_index)
    if rendered is None and map_index == -1 and rendered_rows:
        rendered = rendered_rows[min(rendered_rows)]
    version_id = session.scalar(
        select(TI.dag_version_id)
        .where(TI.dag_id == dag_id, TI.task_id == task_id, TI.run_id == run_id)
        .order_by(TI.map_index)
        .limit(1)
    )
    task = DAG_VERSIONS.task(session, dag_id, task_id, version_id)
    template_fields = tuple(getattr(task, "template_fields", ()) or ())
    checkpoint_task = URI_FIELD in template_fields
    if isinstance(rendered, Mapping) and URI_FIELD in rendered:
        return OperatorFields(rendered, SOURCE_RENDERED, True)
    if task is None:
        return OperatorFields({}, SOURCE_DEFAULT, False)
    named = {name: operator_value(task, name, map_index) for name in (URI_FIELD, CONN_FIELD, SPARK_TASK_FIELD)}
    for name, value in named.items():
        if value is EXPANDED:
            raise NotFoundError(
                f"the {name} of mapped task {task_id!r} in DAG {dag_id!r} comes from its expand() arguments and "
                f"task instance {run_id!r} has not run yet: its store is known once it runs. "
                "Name the store by its URI instead",
                reason="store_location",
            )
        if isinstance(value, str) and any(marker in value for marker in TEMPLATE_MARKERS):
            raise NotFoundError(
                f"the {name} of task {task_id!r} in DAG {dag_id!r} is templated ({value!r}) and task instance "
                f"{run_id!r} has not rendered it yet (it has not run): its store is known once it runs. "
                "Name the store by its URI instead",
                reason="store_location",
            )
    return OperatorFields(named, SOURCE_NAMED, checkpoint_task)


#: A field of a mapped operator that its ``expand()`` arguments set, per map index.
EXPANDED = object()


def operator_value(task: Any, name: str, map_index: int) -> Any:
    """The field ``name`` as the serialized DAG names it. A mapped operator keeps its ``partial()``
    arguments apart; a field given to ``expand()`` is known only per map index: the value at
    ``map_index`` of a literal list, else :data:`EXPANDED`."""
    partial = getattr(task, "partial_kwargs", None)
    if not isinstance(partial, Mapping):
        return getattr(task, name, None)
    if name in partial:
        return partial[name]
    expanded = getattr(getattr(task, "expand_input", None), "value", None)
    if isinstance(expanded, Mapping):  # .expand(name=[...])
        if name not in expanded:
            return None
        values = expanded[name]
        if isinstance(values, (list, tuple)) and 0 <= map_index < len(values):
            return values[map_index]
        return EXPANDED
    if isinstance(expanded, (list, tuple)) and all(isinstance(kwargs, Mapping) for kwargs in expanded):
        if 0 <= map_index < len(expanded):  # .expand_kwargs([{...}, ...])
            return expanded[map_index].get(name)
        return EXPANDED if any(name in kwargs for kwargs in expanded) else None
    return EXPANDED  # .expand_kwargs(an upstream XCom): any field may come from it


def lowest_map_index(session: Session, dag_id: str, task_id: str, run_id: str) -> int:
    from airflow.models.taskinstance import TaskInstance as TI

    where = (TI.dag_id == dag_id, TI.task_id == task_id, TI.run_id == run_id)
    lowest = session.scalar(select(TI.map_index).where(*where).order_by(TI.map_index).limit(1))
    return int(lowest) if lowest is not None else -1


def job_identity(session: Session, dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> JobIdentity:
    """The job of a task instance (its default store location): its run's logical date from the DB."""
    from airflow.models.dagrun import DagRun

    logical_date = session.scalar(select(DagRun.logical_date).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    return JobIdentity(
        dag_id, task_id, run_id, logical_date if isinstance(logical_date, dt.datetime) else None, map_index
    )


def field_text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip() and value.strip() != "None":
        return value.strip()
    return None
