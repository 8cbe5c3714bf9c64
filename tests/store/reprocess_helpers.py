"""Scenarios for the reprocess / rewind tests: committed runs written through the store, and
exact pictures of a store and its output to compare before and after an operation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from airflow_ckpt_provider.store import CheckpointStore, EpochStatus, RetentionPolicy
from tests.store.conftest import Backend
from tests.store.helpers import write_task


@dataclass
class Run:
    """One committed run: its epoch, and per partition the checkpoint id, keys and output files."""

    epoch: int
    checkpoints: dict[str, list[object]] = field(default_factory=dict)
    files: dict[str, list[str]] = field(default_factory=dict)

    @property
    def keys(self) -> list[object]:
        return sorted(k for keys in self.checkpoints.values() for k in keys)

    @property
    def all_files(self) -> list[str]:
        return sorted(p for paths in self.files.values() for p in paths)

    def checkpoint_of(self, key: object) -> str:
        return next(cid for cid, keys in self.checkpoints.items() if key in keys)


def run_and_commit(
    store: CheckpointStore,
    backend: Backend,
    partitions: Sequence[Sequence[object]],
    *,
    policy: RetentionPolicy | None = RetentionPolicy.RETAIN,
    files: int = 1,
) -> Run:
    """A submit that seals one checkpoint per partition, then the commit task (commit + retention)."""
    epoch = store.epochs.begin(owner="dag/task/run").number
    run = Run(epoch)
    for partition, keys in enumerate(partitions):
        cid, paths, _ = write_task(store, backend, epoch=epoch, partition=partition, keys=list(keys), files=files)
        run.checkpoints[cid] = list(keys)
        run.files[cid] = paths
    store.epochs.end(epoch, status=EpochStatus.SUCCEEDED)
    store.commit([backend.output_uri])
    if policy is not None:
        store.housekeeping.cleanup(policy)
    return run


def rerun_pending(store: CheckpointStore, backend: Backend, pending: Sequence[object], *, commit: bool = True) -> Run:
    """The next run: processes exactly ``pending`` (one key per partition), then commits with retain."""
    epoch = store.epochs.begin(owner="dag/task/run").number
    run = Run(epoch)
    for partition, key in enumerate(pending):
        cid, paths, _ = write_task(store, backend, epoch=epoch, partition=partition, keys=[key])
        run.checkpoints[cid] = [key]
        run.files[cid] = paths
    store.epochs.end(epoch, status=EpochStatus.SUCCEEDED)
    if commit:
        store.commit([backend.output_uri])
        store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    return run


@dataclass(frozen=True)
class Picture:
    """Every object of the store and of the output (key -> bytes): equal pictures, equal states."""

    store: dict[str, bytes]
    output: dict[str, bytes]

    @classmethod
    def take(cls, backend: Backend) -> Picture:
        store_blobs = backend.store_blobs()
        output_blobs = backend.output_blobs()
        return cls(
            store={i.key: store_blobs.get(i.key)[0] for i in store_blobs.list("")},
            output={i.key: output_blobs.get(i.key)[0] for i in output_blobs.list("")},
        )

    def quarantine(self) -> dict[str, bytes]:
        return {k: v for k, v in self.store.items() if k.startswith("quarantine/")}


def output_names(backend: Backend) -> set[str]:
    return backend.output_names()


def name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def quarantined_names(backend: Backend) -> set[str]:
    return {k.rsplit("/", 1)[-1] for k in backend.store_keys() if k.startswith("quarantine/")}
