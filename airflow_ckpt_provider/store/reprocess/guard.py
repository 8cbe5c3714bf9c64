"""Which output files a reprocess may move or delete (docs/reprocess.md, "Safety rules").

The store's one deletion guard (store/deletion_guard.py, docs/design.md invariant 10): only
files under the output roots declared when epochs opened (by the operator or the Spark driver)
and copied into commit records, never inside the store root, never a path with '..'. A store
that declares no root (no epoch declares one, and no commit was given explicit
``output_roots``) allows nothing: the plan refuses and says why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from airflow_ckpt_provider.store.deletion_guard import DeletionGuard
from airflow_ckpt_provider.store.reprocess.view import StoreView


@dataclass(frozen=True)
class OutputGuard:
    """The store's deletion guard, as the reprocess planner and steps ask it."""

    guard: DeletionGuard

    @property
    def roots(self) -> tuple[str, ...]:
        return self.guard.root_uris

    def allows(self, path: str) -> bool:
        return self.guard.allows(path)


def output_guard(view: StoreView, commits: Iterable[int] | None = None) -> OutputGuard:
    """The guard for the files a plan touches. ``commits`` is accepted for the planner's calls;
    the roots are the whole store's (every epoch still recorded and every commit record)."""
    del commits  # the store's declared roots cover every commit's files
    return OutputGuard(view.parts.roots.guard())
