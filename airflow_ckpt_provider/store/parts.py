"""The store's parts, built once by :class:`~airflow_ckpt_provider.store.store.CheckpointStore`.

What the store's role objects (``store.epochs``, ``store.inspection``, ``store.housekeeping``,
``store.reprocessing``) are built from, instead of reaching through the facade: the facade imports
them, never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_ckpt_provider.store.blobs.base import BlobStore
from airflow_ckpt_provider.store.compaction import Compactor
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.deletion import StoreDeleter
from airflow_ckpt_provider.store.epochs import EpochLog
from airflow_ckpt_provider.store.output_roots import OutputRoots
from airflow_ckpt_provider.store.state import StateReader


@dataclass(frozen=True)
class StoreParts:
    """One store's shared context and the concerns built on it."""

    context: StoreContext
    #: The epoch records themselves (``store.epochs`` is the role object built on it).
    epoch_log: EpochLog
    reader: StateReader
    #: The declared output roots and the deletion guard they make.
    roots: OutputRoots
    deleter: StoreDeleter
    compactor: Compactor

    @property
    def uri(self) -> str:
        return self.context.uri

    @property
    def blobs(self) -> BlobStore:
        return self.context.blobs


class PartsUser:
    """A concern that works on a store's parts (commit, retention, inspection): each part as an attribute."""

    def __init__(self, parts: StoreParts) -> None:
        self._context = parts.context
        self._blobs = parts.blobs
        self._reader = parts.reader
        self._epoch_log = parts.epoch_log
        self._roots = parts.roots
        self._deleter = parts.deleter
        self._compactor = parts.compactor
