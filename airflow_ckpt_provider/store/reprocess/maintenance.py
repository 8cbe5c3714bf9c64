"""How the rest of the store treats maintenance epochs (reprocess, rewind, undo, purge).

Submits, commits, clear and discard are refused while one is unfinished, and ``check()``
reports it (docs/reprocess.md, "Fencing").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_ckpt_provider.store.errors import EpochConflictError
from airflow_ckpt_provider.store.model import Epoch, EpochStatus
from airflow_ckpt_provider.store.reprocess.records import PLAN_FIELD, Retractions, quarantine_prefix

if TYPE_CHECKING:
    from airflow_ckpt_provider.store.context import StoreContext


def is_unfinished_maintenance(epoch: Epoch | None) -> bool:
    return epoch is not None and bool(epoch.metadata.get(PLAN_FIELD)) and epoch.status is EpochStatus.OPEN


def refuse_unfinished_maintenance(uri: str, latest: Epoch | None, what: str) -> None:
    """Raise :class:`EpochConflictError` (``reprocess_in_progress``) when ``latest`` is an unfinished maintenance
    epoch."""
    if latest is None or not is_unfinished_maintenance(latest):
        return
    action = latest.metadata.get("action", "reprocess")
    raise EpochConflictError(
        f"a {action} of {uri} (epoch {latest.number}) is unfinished, so this {what} is refused (taking over would "
        "leave output files half-moved): resume it first with `airflow-ckpt resume` (or the same call again), "
        "then retry. Nothing was changed",
        reason="reprocess_in_progress",
    )


def maintenance_problems(context: StoreContext, latest: Epoch | None) -> list[str]:
    """``check()``'s problems: an unfinished maintenance epoch, with how far it got."""
    if latest is None or not is_unfinished_maintenance(latest):
        return []
    action = latest.metadata.get("action", "reprocess")
    plan = context.read_json(f"epochs/{latest.number:08d}.json").get(PLAN_FIELD) or {}
    files = plan.get("files") or []
    target = plan.get("target")
    moved = sum(1 for _ in context.blobs.list(quarantine_prefix(latest.number))) if action != "purge" else 0
    about = f" of reprocess {target}" if target is not None else f" ({moved} of {len(files)} file(s) in quarantine)"
    return [
        f"{action} of epoch {latest.number} is unfinished{about}: run `airflow-ckpt resume {context.uri}` "
        "(or the same call again) to finish it; submits and commits are refused until then"
    ]


def quarantine_notes(context: StoreContext, latest: Epoch | None) -> list[str]:
    """``check()``'s notes: quarantined files waiting for a purge, and whether undo is still possible."""
    retractions = Retractions.read(context.blobs, context.map)
    notes: list[str] = []
    for number, record in sorted(retractions.records.items()):
        if number in retractions.purged:
            continue
        infos = list(context.blobs.list(quarantine_prefix(number)))
        if not infos:
            continue
        size = sum(i.size for i in infos)
        undo = (
            "undo possible until the next run"
            if latest is not None and latest.number == number and number not in retractions.undone
            else ("undone" if number in retractions.undone else "undo no longer possible")
        )
        notes.append(
            f"{record.get('action', 'reprocess')} of epoch {number}: {len(infos)} file(s), {size} bytes in "
            f"{quarantine_prefix(number)} ({undo}); `airflow-ckpt purge` deletes them"
        )
    return notes
