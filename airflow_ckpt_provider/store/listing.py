"""One listing of the checkpoint records: manifests under ``checkpoints/``, attempts' parts under ``attempts/``.

Readers of the state (done keys, progress, ``begin_epoch``) list ``checkpoints/`` only: since
manifest format 2 it holds a manifest per loose sealed checkpoint and nothing else (plus the
directories of stores written before). The commit, cleanup, compaction and ``check()`` also need
the attempts that never sealed (their intents name output to delete), so they list ``attempts/``
too, and *first*: an attempt that seals between the two listings is then seen with its manifest,
never taken for an unsealed leftover (docs/store-api.md, "Layout").
"""

from __future__ import annotations

from collections import defaultdict

from airflow_ckpt_provider.store.blobs.base import BlobStore
from airflow_ckpt_provider.store.layout import ATTEMPTS, CHECKPOINTS, checkpoint_id_of


def checkpoint_records(blobs: BlobStore, *, attempts: bool = True) -> dict[str, list[str]]:
    """Every record key under ``attempts/`` (unless ``attempts=False``) and ``checkpoints/``, by checkpoint id."""
    by_id: dict[str, list[str]] = defaultdict(list)
    for prefix in (ATTEMPTS, CHECKPOINTS) if attempts else (CHECKPOINTS,):
        for info in blobs.list(prefix):
            checkpoint_id = checkpoint_id_of(info.key)
            if checkpoint_id is not None:
                by_id[checkpoint_id].append(info.key)
    return dict(by_id)
