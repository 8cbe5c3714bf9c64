"""Entries in Airflow's audit log (the ``log`` table, shown under Browse -> Audit Log).

Every clear or discard is written with the user, the DAG, the task, the run and what was
deleted (counts and the store URI without credentials). So is every refused or failed
attempt: refused before anything was read (not logged in, no rights, a request another site
could have forged: 401/403/415), refused because the store belongs to another DAG (409), or
failed on the store. A store owned by another DAG gets the entry in that DAG's log as well,
so each DAG's audit trail answers "who tried to reset this store".

Each entry is written in its own short DB session: a request never holds a DB connection
while it waits for a store (plugins/store_calls.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

#: ``Log.event`` values written by the plugin (the column holds at most 60 characters).
EVENT_CLEAR = "checkpoints.clear"
EVENT_DISCARD = "checkpoints.discard_uncommitted"
EVENT_VIEW = "checkpoints.view"
EVENT_FAILED_SUFFIX = ".failed"
#: Every action the view audits: clear and discard, a refused page (view), and reprocess, rewind
#: and what follows them (docs/reprocess.md).
EVENTS = {
    "clear": EVENT_CLEAR,
    "discard": EVENT_DISCARD,
    "view": EVENT_VIEW,
    "reprocess": "checkpoints.reprocess",
    "rewind": "checkpoints.rewind",
    "undo": "checkpoints.undo_reprocess",
    "purge": "checkpoints.purge_quarantine",
    "resume": "checkpoints.resume_reprocess",
    "abandon": "checkpoints.abandon_maintenance",
}


def event_name(action: str, *, failed: bool = False) -> str:
    return EVENTS[action] + (EVENT_FAILED_SUFFIX if failed else "")


def write_audit_entry(
    *,
    user_name: str | None,
    action: str,
    dag_id: str | None,
    task_id: str | None,
    run_id: str | None,
    extra: dict[str, Any],
    failed: bool = False,
    also_dag_ids: Iterable[str] = (),
    map_index: int | None = None,
) -> int:
    """Add and commit one ``Log`` row for ``dag_id`` (and one per DAG of ``also_dag_ids``);
    returns the id of the first. Short session of its own; call it off the event loop."""
    from airflow.models.log import Log
    from airflow.utils.session import create_session

    name = user_name or "anonymous"
    text = json.dumps(extra, sort_keys=True, default=str)
    dags = [dag_id, *(d for d in dict.fromkeys(also_dag_ids) if d != dag_id)]
    with create_session(scoped=False) as session:
        entries = [
            Log(
                event=event_name(action, failed=failed),
                owner=name,
                owner_display_name=name,
                dag_id=dag,
                task_id=task_id,
                run_id=run_id,
                map_index=map_index,
                extra=text,
            )
            for dag in dags
        ]
        session.add_all(entries)
        session.flush()
        return int(entries[0].id)
