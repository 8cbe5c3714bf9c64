"""Who opened an epoch: the Airflow task instance (dag_id, task_id, run_id, map_index).

``store.epochs.begin(owner=...)`` compares owners as strings: an owner may take over its own
open epoch (a retry of the same task instance), any other owner fails fast with
:class:`~airflow_ckpt_provider.store.errors.EpochConflictError`. :meth:`EpochOwner.key`
is that string. It is exactly the owner 0.1 recorded (``dag/task/run``) for an unmapped
task, so a retry after an upgrade still takes over its epoch; a mapped instance adds
``/map_index=N``, so two instances of one task never count as the same owner.

The structured owner is recorded beside it in the epoch's metadata (``"owner"``), so
readers (the UI's owner check, the CLI, the sibling check) need not parse the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_ckpt_provider.store.model import Epoch

#: The epoch metadata entry holding :meth:`EpochOwner.to_json`.
OWNER_METADATA_KEY = "owner"


@dataclass(frozen=True)
class EpochOwner:
    """One Airflow task instance; ``map_index`` -1 for a task that is not mapped."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1

    @property
    def mapped(self) -> bool:
        return self.map_index >= 0

    def key(self) -> str:
        """The owner string ``begin_epoch`` compares (see the module docstring)."""
        base = f"{self.dag_id}/{self.task_id}/{self.run_id}"
        return f"{base}/map_index={self.map_index}" if self.mapped else base

    def to_json(self) -> dict[str, Any]:
        return {"dag_id": self.dag_id, "task_id": self.task_id, "run_id": self.run_id, "map_index": self.map_index}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EpochOwner | None:
        """The owner recorded in ``data``, or None if it is not a complete owner record."""
        values = [data.get(name) for name in ("dag_id", "task_id", "run_id")]
        map_index = data.get("map_index", -1)
        if not all(isinstance(v, str) and v for v in values) or isinstance(map_index, bool):
            return None
        if not isinstance(map_index, int):
            return None
        dag_id, task_id, run_id = (str(v) for v in values)
        return cls(dag_id, task_id, run_id, map_index)

    @classmethod
    def from_epoch(cls, epoch: Epoch) -> EpochOwner | None:
        """The task instance that opened ``epoch`` (its structured record, which every operator writes);
        None for epochs not opened by a task (``clear``, a job without Airflow) or whose record does not parse."""
        recorded = epoch.metadata.get(OWNER_METADATA_KEY)
        return cls.from_json(recorded) if isinstance(recorded, Mapping) else None

    def same_instance(self, other: EpochOwner | None) -> bool:
        return other is not None and self == other

    def sibling_of(self, other: EpochOwner | None) -> bool:
        """Another mapped instance of the same task in the same run."""
        return (
            other is not None
            and (other.dag_id, other.task_id, other.run_id) == (self.dag_id, self.task_id, self.run_id)
            and other.map_index != self.map_index
        )

    def describe(self) -> str:
        where = f"task {self.task_id!r} of DAG {self.dag_id!r}, run {self.run_id!r}"
        return f"{where}, map index {self.map_index}" if self.mapped else where
