"""What the Checkpoints view shows of one store (the task-instance page and its JSON).

The page and the JSON endpoint render the same :class:`TaskStoreView`, so what a test
reads from the API is what a person sees. Nothing here may carry a credential: URIs
are shown through :func:`.problems.display_uri`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_ckpt_provider.display.deletion_preview import DeletionPreview, preview_clear, preview_discard
from airflow_ckpt_provider.plugins.ownership import owner_dag_id
from airflow_ckpt_provider.plugins.problems import display_uri
from airflow_ckpt_provider.store import CheckpointStore, Epoch, Progress
from airflow_ckpt_provider.store.rerun import RerunAction

#: The view lists at most this many checkpoints (newest first); the counts cover all.
MAX_CHECKPOINT_ROWS = 200


@dataclass(frozen=True)
class TaskStoreView:
    """Everything the task-instance view shows about one store."""

    store_uri: str
    progress: dict[str, Any]
    epochs: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]
    checkpoint_count: int
    uncommitted_count: int
    previews: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The epoch records read (for the owner check; not shown as such).
    epoch_records: tuple[Epoch, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "store_uri": self.store_uri,
            "progress": self.progress,
            "epochs": self.epochs,
            "checkpoints": self.checkpoints,
            "checkpoint_count": self.checkpoint_count,
            "uncommitted_count": self.uncommitted_count,
            "previews": self.previews,
        }


PREVIEWS = (("clear", preview_clear), ("discard", preview_discard))


def preview_json(what: DeletionPreview, raw_store_uri: str) -> dict[str, Any]:
    """A preview as the view shows it: the store's URI without credentials, in the text too."""
    shown = display_uri(raw_store_uri)
    body = what.to_json()
    body["store_uri"] = shown
    body["description"] = body["description"].replace(raw_store_uri, shown)
    return body


def _epoch_json(epoch: Any) -> dict[str, Any]:
    return {
        "number": epoch.number,
        "status": epoch.status.value,
        "degraded": epoch.degraded,
        "base_size": len(epoch.base),
        "base_snapshot": epoch.base_snapshot,
        "expected_partitions": epoch.expected_partitions,
        "owner": epoch.owner,
        "owner_dag_id": owner_dag_id(epoch),
        "created_at": epoch.created_at,
        "ended_at": epoch.ended_at,
    }


def _committed_figures(progress: dict[str, Any]) -> None:
    """After a commit whose retention deleted the checkpoints (``delete_after_success``), the live
    counters are all 0: show what the commit made authoritative instead (``figures``: "committed")."""
    last = progress.get("last_commit") or {}
    if not progress.get("committed") or progress.get("valid_checkpoints") or not last:
        progress["figures"] = "checkpoints"
        return
    progress["figures"] = "committed"
    progress["keys_done"] = int(last.get("keys_committed") or 0)
    progress["sealed_partitions"] = int(last.get("checkpoints_committed") or 0)
    progress["files"] = int(last.get("files_committed") or 0)
    progress["rows"] = int(last.get("rows_committed") or 0)
    progress["bytes"] = int(last.get("bytes_committed") or 0)


def rerun_json(store: CheckpointStore, progress: Progress) -> dict[str, Any]:
    """Whose output is live and what the next run of the store's job does (resume / replace / skip...)."""
    latest = progress.epoch
    plan = store.inspection.rerun_plan(None if latest is None else latest.job, progress=progress)
    body = plan.to_json()
    body["description"] = plan.describe()
    if plan.action is RerunAction.REPLACE:
        body["description"] += ' (a submit with on_rerun="skip" skips it instead)'
    return body


def build_task_store_view(store: CheckpointStore) -> TaskStoreView:
    """Read the store (never changes it). Raises the store's typed errors."""
    uri = display_uri(store.uri)
    contents = store.inspection.contents()  # one read of the store's records: progress comes with it
    state = contents.progress if contents.progress is not None else store.inspection.progress()
    progress = state.to_json()
    progress["store_uri"] = uri
    progress["epoch"] = None if state.epoch is None else _epoch_json(state.epoch)
    _committed_figures(progress)
    progress["rerun"] = rerun_json(store, state)
    records = store.epochs.all()
    epochs = [_epoch_json(e) for e in reversed(records)]
    checkpoints = sorted(contents.checkpoints, key=lambda c: c.sealed_at, reverse=True)
    rows = [
        {
            "checkpoint_id": c.checkpoint_id,
            "status": c.status.value,
            "valid": c.checkpoint_id in contents.valid_ids,
            "epoch": c.epoch,
            "partition": c.partition,
            "keys": c.num_keys,
            "files": c.num_files,
            "rows": c.num_rows,
            "bytes": c.num_bytes,
            "sealed_at": c.sealed_at,
        }
        for c in checkpoints[:MAX_CHECKPOINT_ROWS]
    ]
    previews = {name: preview_json(make(contents), store.uri) for name, make in PREVIEWS}
    return TaskStoreView(
        store_uri=uri,
        progress=progress,
        epochs=epochs,
        checkpoints=rows,
        checkpoint_count=len(checkpoints),
        uncommitted_count=len(contents.uncommitted),
        previews=previews,
        epoch_records=tuple(records),
    )


def summary_of(store: CheckpointStore) -> dict[str, Any]:
    """The short form the DAG view lists per store (one ``progress()`` read)."""
    progress = store.inspection.progress()
    epoch = progress.epoch
    return {
        "epoch": None if epoch is None else epoch.number,
        "epoch_status": None if epoch is None else epoch.status.value,
        "degraded": bool(progress.degraded_epochs) or bool(epoch and epoch.degraded),
        "sealed_partitions": progress.sealed_partitions,
        "expected_partitions": progress.expected_partitions,
        "keys_done": progress.keys_done,
        "files": progress.files,
        "bytes": progress.bytes,
        "committed": progress.committed,
        "owner_dag_id": None if epoch is None else owner_dag_id(epoch),
    }
