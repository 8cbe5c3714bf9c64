"""The orphan sweep: output files writers of this store recorded that nothing keeps, found and deleted.

A commit and a discard (or clear) run this one sweep; they differ only in what they keep:

* a commit keeps the files its record makes authoritative and every record of a valid
  checkpoint, and, in a degraded epoch, the files of attempts that may have finished without
  sealing (``unprovable``: kept and reported);
* a discard keeps the committed checkpoints and the committed output.

Every other recorded file (an exact path, or a native write's name pattern) is an orphan, and is
deleted if the deletion guard allows it (docs/design.md, invariant 10); a record the guard refuses
is reported, never acted on. The sweep is listed first (:func:`plan_orphan_sweep`, deletes
nothing: a commit can still refuse over unknown files) and run after (:meth:`OrphanSweep.run`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass

from airflow_ckpt_provider.store.deletion import StoreDeleter, Sweep, SweepPlan
from airflow_ckpt_provider.store.deletion_guard import DeletionGuard
from airflow_ckpt_provider.store.records import Intents


@dataclass
class OrphanSweep:
    """A sweep listed and sorted but not run: what it deletes, keeps and reports."""

    guard: DeletionGuard
    #: The output roots listed (canonical).
    roots: tuple[str, ...]
    listed: SweepPlan
    #: Files under the roots that no record of this store names (nor a kept path): never deleted.
    unknown: tuple[str, ...]
    #: Orphaned files ``unprovable`` keeps, by exact path and by name; and their checkpoints.
    kept: tuple[str, ...]
    kept_ids: frozenset[str]
    #: Records the guard refuses, each as "checkpoint: why" (in the order of the records).
    refused: tuple[str, ...]
    #: Name patterns whose root lies outside the guard's roots, each as "checkpoint: why".
    refused_patterns: tuple[str, ...]
    #: Recorded files (or "files named *marker* under root") kept because nothing is declared.
    undeclared: tuple[str, ...]

    def run(self, deleter: StoreDeleter) -> Sweep:
        """Delete what the listing picked and abort its uploads (``Sweep.refused``: what the guard
        refused while listing)."""
        return deleter.run_sweep(self.listed)


def plan_orphan_sweep(
    deleter: StoreDeleter,
    guard: DeletionGuard,
    recorded: Intents,
    *,
    keep_ids: Set[str],
    keep_paths: Set[str],
    known: Set[str] = frozenset(),
    unprovable: Callable[[str, int | None], bool] | None = None,
    roots: Sequence[str] | None = None,
    undeclared_keeps_output: bool = False,
) -> OrphanSweep:
    """List the output roots and sort what ``recorded`` names. Deletes nothing.

    ``keep_ids``: checkpoints whose records name no orphan; ``keep_paths``: files that are no
    orphan whoever recorded them (canonical URIs). ``known``: further paths that are neither
    unknown nor orphaned by a name pattern (``keep_paths`` count too). ``unprovable(checkpoint,
    epoch)``: whether an orphaned record's files are kept all the same (reported in ``kept``).
    ``roots``: the roots to list (already bounded by the guard); None: the directories of the
    orphans and the roots of the name patterns. ``undeclared_keeps_output``: a store whose records
    declare no output root keeps every output file (discard and clear), and says so.
    """

    def kept_anyway(checkpoint_id: str, epoch: int | None) -> bool:
        return unprovable is not None and unprovable(checkpoint_id, epoch)

    def keeps_all() -> bool:
        return guard.keeps_all_output or (undeclared_keeps_output and not guard.declared)

    patterns = [p for p in recorded.patterns if p.checkpoint_id not in keep_ids]
    doomed: dict[str, str] = {}
    kept: list[str] = []
    undeclared: list[str] = []
    refused: list[str] = []
    for path, (checkpoint_id, epoch) in recorded.paths.items():
        if path in keep_paths or checkpoint_id in keep_ids:
            continue
        if kept_anyway(checkpoint_id, epoch):
            kept.append(path)
            continue
        reason = guard.refusal(path)
        if reason is None:
            doomed[path] = checkpoint_id
        elif keeps_all():
            undeclared.append(path)
        else:
            refused.append(f"{checkpoint_id}: {reason}")
    refused_patterns: list[str] = []
    for pattern in patterns:
        if guard.root_of(f"{pattern.root}/{pattern.marker}") is not None:
            continue
        where = f"files named *{pattern.marker}* under {pattern.root}"
        if keeps_all():
            undeclared.append(where)
        else:
            refused_patterns.append(f"{pattern.checkpoint_id}: {where} are outside the declared output roots")
    if roots is None:
        roots, _ = guard.sweep_roots(sorted({p.rsplit("/", 1)[0] for p in doomed} | {p.root for p in patterns}))

    kept_by_name: dict[str, str] = {}

    def doomed_by_name(path: str) -> bool:
        # A native write's file: an orphan unless something keeps it (then it is in ``known``).
        for pattern in patterns:
            if pattern.matches(path):
                if kept_anyway(pattern.checkpoint_id, pattern.epoch):
                    kept_by_name[path] = pattern.checkpoint_id
                    return False
                return True
        return False

    listed = deleter.plan_sweep(guard, roots, doomed, set(keep_paths) | set(known), doomed_by_name)
    kept.extend(sorted(kept_by_name))
    kept_ids = {recorded.paths[p][0] for p in kept if p in recorded.paths} | set(kept_by_name.values())
    return OrphanSweep(
        guard=guard,
        roots=tuple(roots),
        listed=listed,
        unknown=tuple(sorted(p for p in listed.unknown if p not in kept_by_name)),
        kept=tuple(sorted(kept)),
        kept_ids=frozenset(kept_ids),
        refused=tuple(refused),
        refused_patterns=tuple(refused_patterns),
        undeclared=tuple(sorted(undeclared)),
    )
