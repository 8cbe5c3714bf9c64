"""The output roots a DAG declares for a store, read from Airflow's metadata DB.

They are the trust anchor of every deletion the Checkpoints view and ``airflow-ckpt
--dag-id/--task-id`` make (docs/security.md, "The trust model"): the store is opened with them
(``open_store(trusted_output_roots=...)``) and what its own records declare only narrows them.
A store's records are written by every Spark executor of its job, so they never decide alone.

The roots are the ``output_roots`` of the store's submit task and of every task of the DAG that
works on it through ``spark_task_id`` (commit, clear), as the task instance rendered them
(Airflow records rendered template fields when a task runs), else as the serialized DAG
version names them. A template not rendered yet, or a value ``expand()`` sets for another map
index, declares nothing. Never an XCom value.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from airflow_ckpt_provider.hooks.task_fields import (
    DAG_VERSIONS,
    EXPANDED,
    SPARK_TASK_FIELD,
    TEMPLATE_MARKERS,
    field_text,
    operator_value,
)

OUTPUT_ROOTS_FIELD = "output_roots"


def declared_output_roots(
    session: Session, dag_id: str, task_id: str, run_id: str, map_index: int = -1
) -> tuple[str, ...]:
    """The output roots the DAG declares for the store of task instance (``task_id``, ``run_id``,
    ``map_index``); empty when it declares none (then no output file may be deleted)."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
    from airflow.models.taskinstance import TaskInstance as TI

    version_id = session.scalar(
        select(TI.dag_version_id)
        .where(TI.dag_id == dag_id, TI.task_id == task_id, TI.run_id == run_id)
        .order_by(TI.map_index)
        .limit(1)
    )
    dag = DAG_VERSIONS.dag(session, dag_id, version_id)
    tasks: Mapping[str, Any] = getattr(dag, "task_dict", None) or {}
    if task_id not in tasks:
        return ()
    spark_task_id = field_text(operator_value(tasks[task_id], SPARK_TASK_FIELD, map_index)) or task_id
    members = {task_id, spark_task_id} & set(tasks)
    members |= {
        t for t, task in tasks.items() if field_text(operator_value(task, SPARK_TASK_FIELD, -1)) == spark_task_id
    }
    rendered: dict[tuple[str, int], Any] = {
        (str(t), int(m)): fields
        for t, m, fields in session.execute(
            select(RTIF.task_id, RTIF.map_index, RTIF.rendered_fields).where(
                RTIF.dag_id == dag_id, RTIF.run_id == run_id, RTIF.task_id.in_(sorted(members))
            )
        )
    }
    roots: list[str] = []
    for member in sorted(members):
        fields = rendered.get((member, map_index), rendered.get((member, -1)))
        if isinstance(fields, Mapping) and OUTPUT_ROOTS_FIELD in fields:
            value = fields[OUTPUT_ROOTS_FIELD]
        else:
            value = operator_value(tasks[member], OUTPUT_ROOTS_FIELD, map_index)
        roots.extend(_roots(value))
    return tuple(dict.fromkeys(roots))


def _roots(value: Any) -> list[str]:
    """The roots in a field's value: a string, a list of strings, or a list rendered as its text."""
    if value is None or value is EXPANDED:
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                return []
        else:
            value = [text] if text and text != "None" else []
    if not isinstance(value, (list, tuple)):
        return []
    return [
        str(v).strip()
        for v in value
        if isinstance(v, str) and v.strip() and not any(marker in v for marker in TEMPLATE_MARKERS)
    ]
