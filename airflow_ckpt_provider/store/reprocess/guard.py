"""Which output files a reprocess may move or delete (docs/reprocess.md, "Safety rules").

Only files under the output roots the store's writers declared: the roots a commit was given
explicitly (kept with its lineage) and the roots an epoch record declares. A store that declares
none (written before roots were recorded) is not restricted, and the plan says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_ckpt_provider.store.reprocess.lineage import lineage_commits, lineage_key
from airflow_ckpt_provider.store.reprocess.view import StoreView

#: Schema metadata key of a lineage object: the output roots its commit was given.
ROOTS_METADATA = b"output_roots"


@dataclass(frozen=True)
class OutputGuard:
    roots: tuple[str, ...] | None  # None: nothing declared, not restricted

    def allows(self, path: str) -> bool:
        if self.roots is None:
            return True
        return any(path.startswith(root.rstrip("/") + "/") for root in self.roots)


def declared_roots(view: StoreView, commits: Iterable[int]) -> set[str]:
    roots: set[str] = set()
    latest = view.state.latest
    if latest is not None:
        roots.update(str(r) for r in latest.metadata.get("output_roots") or ())
    have = lineage_commits(view.store.blobs)

    def read(commit: int) -> list[str]:
        data = view.store.blobs.get_if_exists(lineage_key(commit))
        if data is None:
            return []
        metadata = pq.read_schema(pa.BufferReader(data[0])).metadata or {}
        raw = metadata.get(ROOTS_METADATA)
        return [str(r) for r in json.loads(raw)] if raw else []

    for found in view.store.context.map(read, sorted(set(commits) & have)):
        roots.update(found)
    return roots


def output_guard(view: StoreView, commits: Iterable[int] | None = None) -> OutputGuard:
    """The guard for files committed by ``commits`` (default: every commit of the store; a plan
    passes the few commits its files come from, so it reads only their lineage)."""
    roots = declared_roots(view, view.commits if commits is None else commits)
    return OutputGuard(tuple(sorted(roots)) if roots else None)
