"""Skip audits: a row-key run's check that the input its shortcuts skipped was done, and the commit's guard.

A rerun skips whole input files or hash buckets by the records of the checkpoints that
vouch for them (``spark/row_source.py``), without reading their keys. That is exact only
while those checkpoints hold every key of what they vouch for; an action that removes
checkpoints (reprocess, rewind, undo, clear, discard) is where that could break
(docs/design.md, "A shortcut must be as exact as what it replaces"). So the first runs
after such an action check the shortcut before they write: they anti-join the keys of the
skipped part against every done key. A key left over was pending, and the shortcut would
have lost it. The run then reads its input exactly (no shortcut) and records what it found,
one record per row source, beside its epoch::

    epochs/{n:08d}.skip-audit-{source}.json
        {"epoch": n, "source": ..., "columns": [...], "pending_skipped": 87,
         "keys": [up to 1,000 of them], "fell_back": true}

The commit and ``check()`` compare each record of an epoch after the last finished commit
with the store: it is **unresolved** while one of its keys is pending (no valid checkpoint
holds it), or while the run that found it did not fall back (``fell_back`` false) and its
checkpoints are still valid (a key of a grouped source may have been sealed from the rows
of the files that run read, without the rows of the files it skipped). The commit refuses
an unresolved audit (:class:`RefusedError` (``input_skipped``)); ``check()`` reports it as a problem.

Reading a record never widens what an action does: it can only make a commit refuse.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from airflow_ckpt_provider.store.blobs.base import BlobStore
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.key_reader import key_sources
from airflow_ckpt_provider.store.layout import skip_audit_key
from airflow_ckpt_provider.store.records import dumps
from airflow_ckpt_provider.store.state import StateReader
from airflow_ckpt_provider.store.store_state import StoreState

#: How many of the pending keys an audit record keeps (its count is exact).
KEYS_KEPT = 1000


@dataclass(frozen=True)
class SkipAudit:
    """What one row source's audit found: ``pending_skipped`` keys of the skipped input were pending."""

    epoch: int
    source: str
    columns: tuple[str, ...]
    pending_skipped: int
    #: Up to :data:`KEYS_KEPT` of those keys, as JSON values (a composite key is an object).
    keys: tuple[Any, ...]
    #: Whether the run then read its input exactly (no shortcut), so that it processed them.
    fell_back: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "source": self.source,
            "columns": list(self.columns),
            "pending_skipped": self.pending_skipped,
            # As JSON values (a date or a timestamp as its text): what the store's reader compares them with.
            "keys": [json.loads(canonical_key(k)) for k in self.keys[:KEYS_KEPT]],
            "fell_back": self.fell_back,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SkipAudit:
        return cls(
            epoch=int(data["epoch"]),
            source=str(data["source"]),
            columns=tuple(str(c) for c in data.get("columns") or ()),
            pending_skipped=int(data["pending_skipped"]),
            keys=tuple(data.get("keys") or ()),
            fell_back=bool(data.get("fell_back")),
        )


def write_skip_audit(blobs: BlobStore, audit: SkipAudit) -> None:
    """Record ``audit`` beside its epoch (idempotent: the same run writes the same record)."""
    blobs.put(skip_audit_key(audit.epoch, audit.source), dumps(audit.to_json()))


def canonical_key(value: Any) -> str:
    """One text per key, equal for a key read from the store (Arrow) and from a record (JSON)."""
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


@dataclass(frozen=True)
class UnresolvedAudit:
    audit: SkipAudit
    #: The audit's recorded keys that no valid checkpoint holds now.
    pending: tuple[Any, ...]

    def describe(self, uri: str) -> str:
        audit = self.audit
        shown = ", ".join(canonical_key(k) for k in (self.pending or audit.keys)[:5])
        how = (
            "it then read its input exactly, yet "
            f"{len(self.pending)} of the {len(audit.keys)} recorded keys are still pending"
            if audit.fell_back
            else "it did not read its input exactly after that finding, so its checkpoints may hold keys "
            "without the rows of the input it skipped"
        )
        return (
            f"the run of epoch {audit.epoch} of {uri} found {audit.pending_skipped} pending input key(s) "
            f"({', '.join(audit.columns) or 'row key'}: e.g. {shown}) in the input a shortcut skipped; {how}"
        )


def last_commit_epoch(blobs: BlobStore) -> int:
    """The epoch of the newest finished commit (0: none)."""
    done = [i.key for i in blobs.list("commits/") if i.key.endswith(".done.json") and i.size]
    return max((int(k[len("commits/") : len("commits/") + 8]) for k in done), default=0)


def unresolved_audits(
    context: StoreContext,
    audits_by_epoch: dict[int, list[str]],
    done_keys: Callable[[], pa.Table],
    valid_epochs: Sequence[int],
) -> list[UnresolvedAudit]:
    """The skip audits of epochs after the last finished commit that are unresolved (see the module doc).

    ``done_keys``: a callable returning every done key (an Arrow table, key first), called only when
    there is a record to compare; ``valid_epochs``: the epochs of the valid checkpoints. Reads nothing
    when no run recorded an audit (the usual case).
    """
    if not audits_by_epoch:
        return []
    since = last_commit_epoch(context.blobs)
    keys = [k for epoch, ks in sorted(audits_by_epoch.items()) if epoch > since for k in ks]
    if not keys:
        return []
    audits = [SkipAudit.from_json(context.read_json(k)) for k in keys]
    table: pa.Table = done_keys()
    done = {canonical_key(k) for k in table.column(0).to_pylist()} if table.num_rows else set()
    live = set(valid_epochs)
    found: list[UnresolvedAudit] = []
    for audit in audits:
        pending = tuple(k for k in audit.keys if canonical_key(k) not in done)
        if pending or (not audit.fell_back and audit.epoch in live):
            found.append(UnresolvedAudit(audit, pending))
    return found


def audit_findings(context: StoreContext, reader: StateReader, state: StoreState) -> list[UnresolvedAudit]:
    """:func:`unresolved_audits` of ``state`` (read with its epochs listed: it names the audit records)."""
    epochs = state.catalog.table.column("epoch").filter(pa.array(state.valid_mask)).to_pylist()
    return unresolved_audits(context, state.skip_audits, lambda: reader.keys.read_keys(key_sources(state)), epochs)
