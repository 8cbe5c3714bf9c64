"""What the Clear / Discard dialog shows, read when the dialog opens (docs/security.md).

``POST /api/task/clear/preview`` and ``POST /api/task/discard/preview`` answer what the action
would delete now (the counts, the output roots it may touch) and the intent records the deletion
guard refuses (docs/design.md, section 7), so a person reads them before saying yes. The task
page itself reads the store once and never the intent records: this is read only when someone
is about to act. It changes nothing and writes no audit entry (a read), except when the store
belongs to another DAG (409, audited as a refused view).

A request runs as the actions do (plugins/flow.py): edit access to the DAG's task instances, the
store the task's operator names, short DB sessions, store calls on bounded threads under a
deadline, no DB session held meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool

from airflow_ckpt_provider.display.deletion_preview import DeletionPreview, preview
from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.locator import ACTIVE_STATES
from airflow_ckpt_provider.plugins.access import can_access_dag
from airflow_ckpt_provider.plugins.flow import action_calls, audit_ref, context_json, located, ref_json
from airflow_ckpt_provider.plugins.ownership import OwnerMismatch, check_owners
from airflow_ckpt_provider.plugins.problems import StoreProblem, problem_from, scrub
from airflow_ckpt_provider.plugins.store_access import open_for_view
from airflow_ckpt_provider.plugins.store_calls import Deadline
from airflow_ckpt_provider.plugins.task_view import preview_json

#: Refused records the dialog lists (the count covers all; ``airflow-ckpt check`` lists every one).
MAX_REFUSED_SHOWN = 200


@dataclass(frozen=True)
class _Read:
    what: DeletionPreview | None = None
    store_uri: str = ""
    refused: tuple[str, ...] = ()
    mismatch: OwnerMismatch | None = None


async def confirmation_payload(
    user: Any, action: str, dag_id: str, task_id: str, run_id: str, map_index: int = -1
) -> tuple[int, dict[str, Any]]:
    """What ``action`` (clear or discard) would do to the task instance's store: (HTTP status, body)."""
    config = CheckpointConfig.load()
    found = await located(user, dag_id, task_id, run_id, edit=True, map_index=map_index)
    if isinstance(found, StoreProblem):
        context = context_json(dag_id, task_id, run_id, map_index) | {"action": action}
        return found.status_code, context | found.to_json()
    ref = found
    context = ref_json(ref) | {"action": action}
    if ref.state in ACTIVE_STATES:
        detail = (
            f"The task instance is {ref.state}: it may be writing checkpoints right now, so {action} is refused. "
            "Wait until it finishes (or mark it failed), then try again."
        )
        return 409, context | {"error": "task_active", "detail": detail}
    # Every intent record is read (one per checkpoint): the actions' deadline, not the page's.
    deadline = Deadline.after(config.ui_action_deadline_seconds)
    secrets: list[str] = []

    def read() -> _Read:
        store, found = open_for_view(ref, deadline, config)
        secrets.extend(found)
        try:
            mismatch = check_owners(
                store.list_epochs(), ref.dag_id, lambda d: can_access_dag(user, d, edit=True), edit=True
            )
            if mismatch is not None:
                return _Read(mismatch=mismatch)
            return _Read(preview(store, action), store.uri, tuple(store.refused_records()))
        finally:
            store.close()

    try:
        outcome = await action_calls().run(read, deadline)
    except Exception as exc:
        problem = problem_from(exc, ref.uri, secrets)
        return problem.status_code, context | problem.to_json()
    if outcome.mismatch is not None:
        mismatch = outcome.mismatch
        entry = {"http_status": 409, "confirmation_of": action, **mismatch.to_json()}
        await run_in_threadpool(audit_ref, user, "view", ref, entry, True, mismatch.foreign_dag_ids)
        return 409, context | mismatch.to_json()
    assert outcome.what is not None
    refused = [scrub(line, secrets) for line in outcome.refused[:MAX_REFUSED_SHOWN]]
    return 200, context | {
        "preview": preview_json(outcome.what, outcome.store_uri),
        "refused_records": refused,
        "refused_record_count": len(outcome.refused),
    }
