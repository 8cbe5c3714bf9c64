"""Where a store's runs write: the output roots each epoch declared, and the deletion guard they make.

Deletions (commit, discard, clear, retention, reprocess) never reach output outside the roots
declared here (docs/design.md, section 7): each epoch's opener may declare ``output_roots`` in its
record, and the job's driver declares each write's root before its tasks run (under the opener's
roots, when it declared any). Everything read back from the store only narrows what the guard lets
through: the roots the store was opened with (``trusted_output_roots``: the DAG's) bound it.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.deletion_guard import (
    DeletionGuard,
    Location,
    binding_refusal,
    overlaps_resolved,
    parse_location,
)
from airflow_ckpt_provider.store.epochs import EpochFiles, EpochLog
from airflow_ckpt_provider.store.errors import InvalidArgumentError, RefusedError
from airflow_ckpt_provider.store.layout import epoch_key, output_declaration_key
from airflow_ckpt_provider.store.model import Epoch
from airflow_ckpt_provider.store.records import dumps, now
from airflow_ckpt_provider.store.state import StateReader


class OutputRoots:
    """The declared output roots of one store, and its deletion guard."""

    def __init__(self, context: StoreContext, epochs: EpochLog, reader: StateReader) -> None:
        self._context = context
        self._epochs = epochs
        self._reader = reader

    def declarable(self, root: str, vouched_by: Sequence[str] | None = None) -> str:
        """``root`` in canonical form, if it may be declared as an output root; else
        :class:`InvalidArgumentError` (``output_root``): not an absolute file/s3 location, the filesystem root,
        overlapping the store root (deleting output there would reach the store's records), or not
        bound to the store (another scheme, another bucket) unless it lies under a root the store
        was opened with (``trusted_output_roots``: the DAG's) or under ``vouched_by`` (the roots the
        epoch's opener declared)."""
        found = parse_location(str(root))
        store_root = parse_location(self._context.uri)
        if found is None or (found.scheme == "file" and found.path == "/"):
            raise InvalidArgumentError(
                f"{root!r} cannot be an output root: give an absolute file:///dir, /dir or s3://bucket/prefix "
                "(no '..' segments, not the filesystem root)",
                reason="output_root",
            )
        if store_root is not None and overlaps_resolved(found, store_root):
            raise InvalidArgumentError(
                f"output root {found.uri} overlaps the store root {store_root.uri}: keep output and checkpoint "
                "store in separate directories (prefixes), or deleting orphans could reach the store's records",
                reason="output_root",
            )
        unbound = None if store_root is None else binding_refusal(found, store_root)
        trusted = [*(self._context.trusted_roots or ()), *(self._context.configured_roots or ()), *(vouched_by or ())]
        if unbound is not None and not _under_any(found, trusted):
            raise InvalidArgumentError(
                f"{unbound}. Declare it in the DAG (the operators' output_roots), which opens the store with it, or "
                "keep output in the store's bucket. Nothing was written",
                reason="output_root",
            )
        return found.uri

    def declare(self, epoch: int, root: str) -> str:
        """Record, for ``epoch``, that its job writes output under ``root`` (the driver, before a
        write). Returns the canonical root. If the epoch's opener declared output roots, ``root``
        must lie under one of them (:class:`RefusedError` (``output_root_not_declared``)). Idempotent."""
        record = Epoch.from_json(self._context.read_json(epoch_key(epoch)))
        canonical = self.declarable(root, vouched_by=record.output_roots)
        if not _covered(canonical, record.output_roots):
            raise RefusedError(
                f"this job writes to {canonical}, but epoch {epoch} of {self._context.uri} was opened with "
                f"output_roots={list(record.output_roots or ())}: add it to the operator's output_roots (or write "
                "under one of them). Nothing was written",
                reason="output_root_not_declared",
            )
        self._context.blobs.put(
            output_declaration_key(epoch, canonical),
            dumps({"epoch": epoch, "root": canonical, "declared_by": "driver", "created_at": now()}),
        )
        return canonical

    def declared(self, files: EpochFiles | None = None) -> tuple[list[str], bool]:
        """The output roots declared by the epochs still recorded: each opener's ``output_roots``
        and the driver's declarations (those under the opener's roots, when it declared any).
        Returns (roots, whether any epoch declared anything)."""
        files = files or self._epochs.list_files()
        records = self._context.map(self._epochs.read_record, sorted(files.records))
        by_number = {r.number: r for r in records if r is not None}
        roots: list[str] = []
        declared = False
        for record in by_number.values():
            if record.output_roots is not None:
                declared = True
                roots.extend(record.output_roots)
        keys = [(n, k) for n, ks in sorted(files.outputs.items()) for k in ks]
        found = self._context.map(self._epochs.read_optional, [k for _, k in keys])
        for (number, _), data in zip(keys, found, strict=True):
            root = data.get("root") if data else None
            if not isinstance(root, str):
                continue
            declared = True
            opener = by_number.get(number)
            if opener is not None and not _covered(root, opener.output_roots):
                continue  # a declaration the opener's roots do not cover declares nothing
            roots.append(root)
        return roots, declared

    def run_roots(self, epoch: Epoch) -> list[str]:
        """Where the run of ``epoch`` wrote: the roots its driver declared for its writes (those its opener's
        ``output_roots`` cover), else its opener's ``output_roots``, else none (canonical). What a commit
        replaces of the earlier output lies there (store/rerun.py). Reads the epoch's declarations."""
        keys = self._epochs.list_files().outputs.get(epoch.number, [])
        found = self._context.map(self._epochs.read_optional, keys)
        declared = sorted(
            {
                root
                for root in (data.get("root") if data else None for data in found)
                if isinstance(root, str) and _covered(root, epoch.output_roots)
            }
        )
        return declared or list(epoch.output_roots or ())

    def guard(self, explicit_roots: Sequence[str] | None = None) -> DeletionGuard:
        """The guard of this store as it stands: its root, and the output roots declared by the
        epochs still recorded and copied into commit records, bounded by the roots the store was
        opened with (``trusted_output_roots``: the DAG's) or, without those, bound to the store's
        scheme and bucket (store/deletion_guard.py). ``explicit_roots`` (a commit's
        ``output_roots``, given by the operator or the CLI user) vouch for recorded roots under
        them, and count by themselves when no epoch record still present declares any (the epochs
        were opened without ``output_roots`` and no driver declared one); without any root no
        output file may be deleted."""
        epoch_roots, epochs_declared = self.declared()
        commit_roots = self._reader.commits.commit_output_roots()
        # Explicit roots alone do not make the store "declared": what lies outside them is then kept
        # as output of a store that declares nothing, not reported as a refused record.
        return DeletionGuard.build(
            self._context.uri,
            [*epoch_roots, *commit_roots],
            declared=epochs_declared or bool(commit_roots),
            trusted=self._context.trusted_roots,
            trusted_by=self._context.trusted_by,
            configured=self._context.configured_roots,
            explicit=explicit_roots or (),
            explicit_counts=not epochs_declared,
        )


def _under_any(location: Location, roots: Sequence[str]) -> bool:
    parsed = [parse_location(r) for r in roots]
    return any(p is not None and location.is_under(p) for p in parsed)


def _covered(root: str, opener_roots: Sequence[str] | None) -> bool:
    """Whether ``root`` lies under the roots an epoch's opener declared (any root, if it declared none)."""
    if opener_roots is None:
        return True
    location = parse_location(root)
    return location is not None and _under_any(location, opener_roots)
