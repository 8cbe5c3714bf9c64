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

from airflow_ckpt_provider.display.deletion_preview import DeletionPreview, preview
from airflow_ckpt_provider.plugins.flow import Answer, StoreRequest, TaskInstanceBody
from airflow_ckpt_provider.plugins.problems import scrub
from airflow_ckpt_provider.plugins.task_view import preview_json
from airflow_ckpt_provider.store import CheckpointStore

#: The actions on a whole store, and what each deletes (``POST /api/task/{action}``, plugins/app.py).
ACTIONS = {
    "clear": "Delete every checkpoint of the store: the next run reprocesses everything",
    "discard": "Delete sealed but uncommitted checkpoints and their output files",
}
#: Refused records the dialog lists (the count covers all; ``airflow-ckpt check`` lists every one).
MAX_REFUSED_SHOWN = 200


class ActionBody(TaskInstanceBody):
    """The body of a clear or discard, and of its preview."""

    #: The epoch the confirmation was computed at: refuse if the store moved on since.
    expected_epoch: int | None = None


@dataclass(frozen=True)
class _Read:
    what: DeletionPreview
    store_uri: str
    refused: tuple[str, ...]


async def confirmation_payload(user: Any, action: str, body: ActionBody) -> Answer:
    """What ``action`` (clear or discard) would do to the task instance's store: (HTTP status, body)."""
    request = await StoreRequest.start(user, *body.ids(), edit=True, extra={"action": action})
    if not isinstance(request, StoreRequest):
        return request
    if request.task_active:
        detail = (
            f"The task instance is {request.ref.state}: it may be writing checkpoints right now, so {action} is "
            "refused. Wait until it finishes (or mark it failed), then try again."
        )
        return 409, request.context | {"error": "task_active", "detail": detail}

    def read(store: CheckpointStore) -> _Read:
        return _Read(preview(store, action), store.uri, tuple(store.inspection.refused_records()))

    try:  # every intent record is read (one per checkpoint): the actions' deadline, not the page's
        owned = await request.run(read)
    except Exception as exc:
        problem = request.problem(exc)
        return problem.status_code, request.context | problem.to_json()
    if owned.mismatch is not None:
        mismatch = owned.mismatch
        entry = {"http_status": 409, "confirmation_of": action, **mismatch.to_json()}
        await request.audit("view", entry, True, mismatch.foreign_dag_ids)
        return 409, request.context | mismatch.to_json()
    outcome = owned.value
    assert outcome is not None
    refused = [scrub(line, request.secrets) for line in outcome.refused[:MAX_REFUSED_SHOWN]]
    return 200, request.context | {
        "preview": preview_json(outcome.what, outcome.store_uri),
        "refused_records": refused,
        "refused_record_count": len(outcome.refused),
    }
