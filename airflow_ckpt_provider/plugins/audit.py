"""Entries in Airflow's audit log (the ``log`` table, shown under Browse → Audit Log).

Every clear or discard is written with the user, the DAG, the task, the run and
what was deleted (counts and the store URI without credentials); a refused or
failed attempt is written too, so the log answers "who tried to reset this run".
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.orm import Session

#: ``Log.event`` values written by the plugin (the column holds at most 60 characters).
EVENT_CLEAR = "checkpoints.clear"
EVENT_DISCARD = "checkpoints.discard_uncommitted"
EVENT_FAILED_SUFFIX = ".failed"
#: Reprocess and rewind (docs/reprocess.md) and what follows them.
EVENTS = {
    "clear": EVENT_CLEAR,
    "discard": EVENT_DISCARD,
    "reprocess": "checkpoints.reprocess",
    "rewind": "checkpoints.rewind",
    "undo": "checkpoints.undo_reprocess",
    "purge": "checkpoints.purge_quarantine",
    "resume": "checkpoints.resume_reprocess",
}


def event_name(action: str, *, failed: bool = False) -> str:
    return EVENTS[action] + (EVENT_FAILED_SUFFIX if failed else "")


def write_audit_entry(
    session: Session,
    *,
    user: Any,
    action: str,
    dag_id: str,
    task_id: str,
    run_id: str,
    extra: dict[str, Any],
    failed: bool = False,
) -> int:
    """Add and commit one ``Log`` row; returns its id."""
    from airflow.models.log import Log

    name = user.get_name() if user is not None else "anonymous"
    entry = Log(
        event=event_name(action, failed=failed),
        owner=name,
        owner_display_name=name,
        dag_id=dag_id,
        task_id=task_id,
        run_id=run_id,
        extra=json.dumps(extra, sort_keys=True, default=str),
    )
    session.add(entry)
    session.commit()
    return int(entry.id)
