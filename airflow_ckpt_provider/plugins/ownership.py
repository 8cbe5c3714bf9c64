"""Whose store a page shows: the DAGs whose tasks opened its epochs.

A task's operator names its store; a DAG author can name any store, another team's too. So
before showing or clearing a store, the view reads which DAGs' tasks opened its epochs (the
submit operator records its dag, task, run and map index in every epoch it opens) and refuses
with 409 unless the user has the same rights (read to show, edit to clear) on each of them.
Epochs opened by the command line, by a clear or by another tool name no DAG and count for
none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_ckpt_provider.store import Epoch
from airflow_ckpt_provider.store.owner import EpochOwner


def owner_dag_id(epoch: Epoch) -> str | None:
    """The DAG whose task opened ``epoch``, or None (the CLI, a clear, a tool)."""
    metadata: Mapping[str, Any] = epoch.metadata if isinstance(epoch.metadata, Mapping) else {}
    owner_task = EpochOwner.from_epoch(epoch) if isinstance(epoch.metadata, Mapping) else None
    if owner_task is not None:  # the task instance the submit operator records (store/owner.py)
        return owner_task.dag_id
    structured = metadata.get("owner")
    if isinstance(structured, Mapping) and _is_id(structured.get("dag_id")):
        return str(structured["dag_id"])  # a partial owner record still names its DAG
    if _is_id(metadata.get("dag_id")):  # what the submit operator has always recorded
        return str(metadata["dag_id"])
    owner = epoch.owner
    # The owner string the operator passes to begin (EpochOwner.key: "dag_id/task_id/run_id[/map_index=N]";
    # DAG and task ids hold no '/'), when the metadata above was damaged or left out by another tool. Each
    # fallback can only name a DAG, so only add a refusal: a damaged record never opens a store to more users.
    if isinstance(owner, str) and owner.count("/") >= 2 and _is_id(owner.split("/", 1)[0]):
        return owner.split("/", 1)[0]
    return None


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


@dataclass(frozen=True)
class OwnerMismatch:
    """The store was opened by tasks of DAGs the user has no rights on."""

    viewed_dag_id: str
    foreign_dag_ids: tuple[str, ...]
    edit: bool

    def message(self) -> str:
        others = ", ".join(repr(d) for d in self.foreign_dag_ids)
        what = "clear or discard" if self.edit else "show"
        return (
            f"This task's operator names a checkpoint store that belongs to DAG {others}, not to "
            f"{self.viewed_dag_id!r}: its epochs were opened by that DAG's tasks, and you have no rights "
            f"to {what} that DAG's checkpoints. Nothing was shown or changed. Open the store from its own "
            f"DAG, or fix the checkpoint_uri of this task in {self.viewed_dag_id!r}."
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "error": "store_owner_mismatch",
            "detail": self.message(),
            "store_owner_dag_ids": list(self.foreign_dag_ids),
        }


def foreign_owner_dag_ids(epochs: Iterable[Epoch], viewed_dag_id: str) -> tuple[str, ...]:
    """The DAGs other than ``viewed_dag_id`` whose tasks opened any of ``epochs``."""
    return tuple(sorted({d for d in map(owner_dag_id, epochs) if d is not None and d != viewed_dag_id}))


def check_owners(
    epochs: Iterable[Epoch], viewed_dag_id: str, authorized: Callable[[str], bool], *, edit: bool
) -> OwnerMismatch | None:
    """None when every DAG that opened an epoch of the store is ``viewed_dag_id`` or one the user
    is ``authorized`` for; else the mismatch to answer with (409)."""
    refused = tuple(d for d in foreign_owner_dag_ids(epochs, viewed_dag_id) if not authorized(d))
    return OwnerMismatch(viewed_dag_id, refused, edit) if refused else None
