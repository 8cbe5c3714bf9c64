"""What one consistent read of the store's metadata holds (:class:`StoreState`), as ``StateReader.read`` returns it.

Validity (docs/design.md, invariant 3): the valid checkpoints are the base of the
latest epoch plus those sealed in it, one per partition; the newest commit record is
the authority on which of them are committed; a snapshot holds keys compacted by
``retain``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_ckpt_provider.store.catalog import Catalog
from airflow_ckpt_provider.store.epochs import EpochBase
from airflow_ckpt_provider.store.model import Checkpoint, Epoch
from airflow_ckpt_provider.store.segments import EMPTY_STATE, SegmentState


@dataclass
class StoreState:
    """One consistent read of the store's metadata.

    ``catalog`` holds every sealed checkpoint (segments and loose manifests) as
    columns; ``valid`` and ``manifests`` build :class:`Checkpoint` records from it
    on first use (callers on hot paths use the catalog and ``valid_mask``).
    """

    epochs: dict[int, Epoch]
    latest: Epoch | None
    catalog: Catalog
    unsealed: list[str]
    corrupt: dict[str, str]
    snapshot: dict[str, Any] | None
    degraded_epochs: set[int]
    etags: dict[str, str] = field(default_factory=dict)
    commit_record: dict[str, Any] | None = None
    segment_state: SegmentState = EMPTY_STATE
    #: Listed checkpoint directories whose checkpoint a segment holds (a compaction not finished yet).
    covered_dirs: list[str] = field(default_factory=list)
    #: Every checkpoint directory listed (sealed, unsealed, corrupt, covered).
    listed_dirs: list[str] = field(default_factory=list)
    #: Segments the state object names that cannot be read (only with ``tolerate_corrupt``): name -> error.
    corrupt_segments: dict[str, str] = field(default_factory=dict)
    #: Whether ``attempts/`` was listed: else ``unsealed`` and ``listed_dirs`` miss the attempts of this
    #: version that never sealed. Whoever deletes directories requires it (``require_attempts``).
    attempts_listed: bool = True
    #: Keys of the skip audits runs recorded, by epoch (store/input_audit.py): listed with the epochs.
    skip_audits: dict[int, list[str]] = field(default_factory=dict)

    def require_attempts(self) -> None:
        """Raise if this read did not list the attempts (a caller about to delete or audit directories)."""
        if not self.attempts_listed:  # pragma: no cover - a caller's bug, not a user's input
            raise RuntimeError("this state was read with_attempts=False: read it again with the attempts listed")

    @property
    def folded(self) -> set[str]:
        """Ids of the checkpoints the snapshot's latest fold put in it (their manifests may be gone). Those of
        earlier folds are in its index only (``read_snapshot_index``): the snapshot holds their keys too."""
        return set(self.snapshot["checkpoint_ids"]) if self.snapshot else set()

    @cached_property
    def valid_mask(self) -> np.ndarray:
        return self.catalog.valid_mask(self.latest, self.folded)

    @cached_property
    def valid(self) -> list[Checkpoint]:
        """The valid checkpoints: base of the latest epoch + sealed in it, one per partition."""
        return self.catalog.checkpoints(self.valid_mask)

    @cached_property
    def valid_ids(self) -> list[str]:
        ids: list[str] = self.catalog.table.column("checkpoint_id").filter(pa.array(self.valid_mask)).to_pylist()
        return ids

    @cached_property
    def manifests(self) -> dict[str, Checkpoint]:
        """Every sealed checkpoint (valid or not) by id. Builds one record per checkpoint: avoid on hot paths."""
        return {c.checkpoint_id: c for c in self.catalog.checkpoints()}

    def sealed_ids(self) -> set[str]:
        return self.catalog.id_set()

    def epoch_base(self) -> EpochBase:
        """What the epoch after ``latest`` builds on: the valid checkpoints (the folded ones are not valid,
        the snapshot holds their keys) and the snapshot, counted as ``progress()`` counts them, so a submit
        need not read every manifest again to say what it skips."""
        mask = self.valid_mask
        return EpochBase(
            checkpoint_ids=tuple(sorted(self.valid_ids)),
            snapshot=None if self.snapshot is None else int(self.snapshot["snapshot"]),
            keys=(int(self.snapshot["num_keys"]) if self.snapshot else 0) + self.catalog.sum("num_keys", mask),
            rows=self.catalog.sum("num_rows", mask),
        )

    def is_sealed(self, checkpoint_id: str) -> bool:
        return checkpoint_id in self.catalog.id_set()
