"""Where committed output and done keys came from, kept after the manifests are gone.

Two records (docs/reprocess.md, "Rewind on retain stores"):

* ``lineage/{n:08d}.parquet``, written by commit *n* before its commit record: one row per file
  of every checkpoint it commits (a checkpoint without files has one row with a null path), so a
  reprocess can name a checkpoint's files and seal time after compaction or
  ``delete_after_success`` deleted its manifest.
* the retain snapshot's keys table carries, next to ``key``, the ``checkpoint_id`` and sealing
  ``epoch`` of each key (null for keys compacted by an earlier version), so a reprocess can take
  one checkpoint's keys out of the snapshot.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_ckpt_provider.store.blobs.base import BlobNotFoundError, BlobStore
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.errors import CorruptCheckpointError, corrupt_record
from airflow_ckpt_provider.store.key_reader import concat_keys, key_sources
from airflow_ckpt_provider.store.model import Checkpoint, FileMetadata
from airflow_ckpt_provider.store.records import now
from airflow_ckpt_provider.store.reprocess.model import dumps
from airflow_ckpt_provider.store.state import StateReader
from airflow_ckpt_provider.store.store_state import StoreState

KEY_COLUMN = "key"
ATTRIBUTION_COLUMNS = ("checkpoint_id", "epoch")
LINEAGE_PREFIX = "lineage/"
INDEX_NAME = "checkpoints.parquet"

LINEAGE_SCHEMA = pa.schema(
    [
        ("checkpoint_id", pa.string()),
        ("epoch", pa.int64()),
        ("partition", pa.int64()),
        ("sealed_at", pa.string()),
        ("num_keys", pa.int64()),
        ("path", pa.string()),
        ("size_bytes", pa.int64()),
        ("num_rows", pa.int64()),
        ("format", pa.string()),
    ]
)


def lineage_key(commit: int) -> str:
    return f"{LINEAGE_PREFIX}{commit:08d}.parquet"


@dataclass(frozen=True)
class LineageEntry:
    """One committed checkpoint as its commit's lineage records it."""

    checkpoint_id: str
    epoch: int
    partition: int | None
    sealed_at: str
    num_keys: int
    files: tuple[FileMetadata, ...]
    commit: int


def lineage_table(checkpoints: Sequence[Checkpoint], files: Mapping[str, Sequence[FileMetadata]]) -> pa.Table:
    rows: dict[str, list[Any]] = {name: [] for name in LINEAGE_SCHEMA.names}

    def add(checkpoint: Checkpoint, meta: FileMetadata | None) -> None:
        rows["checkpoint_id"].append(checkpoint.checkpoint_id)
        rows["epoch"].append(checkpoint.epoch)
        rows["partition"].append(checkpoint.partition)
        rows["sealed_at"].append(checkpoint.sealed_at)
        rows["num_keys"].append(checkpoint.num_keys)
        rows["path"].append(None if meta is None else meta.path)
        rows["size_bytes"].append(0 if meta is None else meta.size_bytes)
        rows["num_rows"].append(0 if meta is None else meta.num_rows)
        rows["format"].append(None if meta is None else meta.format)

    for checkpoint in checkpoints:
        metas = files.get(checkpoint.checkpoint_id) or ()
        if not metas:
            add(checkpoint, None)
        for meta in metas:
            add(checkpoint, meta)
    return pa.table(rows, schema=LINEAGE_SCHEMA)


def write_lineage(
    blobs: BlobStore,
    commit: int,
    checkpoints: Sequence[Checkpoint],
    files: Mapping[str, Sequence[FileMetadata]],
    output_roots: Sequence[str] = (),
) -> None:
    """Write commit ``commit``'s lineage (idempotent: the same checkpoints give the same object).
    ``output_roots``: the roots the commit's deletion guard allowed (kept for the record; the guard
    itself reads them from the commit records, docs/design.md section 7)."""
    table = lineage_table(checkpoints, files)
    if output_roots:
        table = table.replace_schema_metadata({b"output_roots": json.dumps(sorted(output_roots)).encode()})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    blobs.put(lineage_key(commit), sink.getvalue())


def read_lineage(blobs: BlobStore, commit: int) -> dict[str, LineageEntry]:
    """Commit ``commit``'s lineage by checkpoint id. Every commit writes it before its record, so a missing
    one is a corrupt record (:class:`CorruptCheckpointError`, ``corrupt``)."""
    found = blobs.get_if_exists(lineage_key(commit))
    if found is None:
        raise corrupt_record(
            blobs.child_uri(lineage_key(commit)), f"is missing (commit {commit} writes it before its record)"
        )
    try:
        table = pq.read_table(pa.BufferReader(found[0]))
    except (pa.ArrowInvalid, OSError) as exc:
        raise corrupt_record(blobs.child_uri(lineage_key(commit)), f"is corrupt or truncated ({exc})") from exc
    entries: dict[str, LineageEntry] = {}
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in table.to_pylist():
        grouped.setdefault(str(row["checkpoint_id"]), []).append(row)
    for checkpoint_id, rows in grouped.items():
        first = rows[0]
        entries[checkpoint_id] = LineageEntry(
            checkpoint_id=checkpoint_id,
            epoch=int(first["epoch"]),
            partition=first["partition"],
            sealed_at=str(first["sealed_at"]),
            num_keys=int(first["num_keys"]),
            files=tuple(
                FileMetadata(
                    path=str(r["path"]),
                    size_bytes=int(r["size_bytes"]),
                    num_rows=int(r["num_rows"]),
                    format=str(r["format"] or "parquet"),
                )
                for r in rows
                if r["path"] is not None
            ),
            commit=commit,
        )
    return entries


# ---------------------------------------------------------------------- snapshot attribution


def attributed(table: pa.Table, checkpoint_id: str | None, epoch: int | None) -> pa.Table:
    """``table`` (column ``key``) with the attribution columns set to one checkpoint."""
    keys = table.select([KEY_COLUMN])
    return keys.append_column("checkpoint_id", pa.array([checkpoint_id] * keys.num_rows, pa.string())).append_column(
        "epoch", pa.array([epoch] * keys.num_rows, pa.int64())
    )


def with_attribution(table: pa.Table) -> pa.Table:
    """A snapshot's keys table, its attribution columns typed; :class:`KeyError` if it has none (a snapshot
    format no release wrote: the callers raise it as a corrupt record)."""
    return table.select([KEY_COLUMN, *ATTRIBUTION_COLUMNS]).cast(
        pa.schema(
            [table.schema.field(KEY_COLUMN), pa.field("checkpoint_id", pa.string()), pa.field("epoch", pa.int64())]
        )
    )


def attributed_keys(
    context: StoreContext, reader: StateReader, state: StoreState, checkpoints: Sequence[Checkpoint]
) -> pa.Table:
    """The snapshot's keys and ``checkpoints``' keys, each row with its checkpoint id and epoch
    (what a retain compaction writes, and what a reprocess by key searches)."""
    tables: list[pa.Table] = []
    snapshot = state.snapshot
    if snapshot is not None and int(snapshot.get("num_keys", 0)):
        key = f"snapshots/{int(snapshot['snapshot']):08d}/keys.parquet"
        try:
            tables.append(with_attribution(pq.read_table(pa.BufferReader(context.blobs.get(key)[0]))))
        except (pa.ArrowInvalid, OSError, KeyError) as exc:
            raise corrupt_record(context.blobs.child_uri(key), f"is corrupt or truncated ({exc})") from exc
    loose = dataclasses.replace(state, snapshot=None)

    def one(checkpoint: Checkpoint) -> pa.Table:
        parts = [reader.keys.read_key_source(s) for s in key_sources(loose, only=[checkpoint.checkpoint_id])]
        keys = pa.concat_tables(parts) if parts else pa.table({KEY_COLUMN: pa.array([], pa.string())})
        return attributed(keys, checkpoint.checkpoint_id, checkpoint.epoch)

    # Segments already hold keys with their checkpoint and epoch: one read per segment, not per checkpoint.
    compacted, covered = reader.keys.segment_keys(state, [c.checkpoint_id for c in checkpoints])
    tables.extend(t for t in compacted if t.num_rows)
    tables.extend(t for t in context.map(one, [c for c in checkpoints if c.checkpoint_id not in covered]) if t.num_rows)
    if not tables:
        return attributed(pa.table({KEY_COLUMN: pa.array([], pa.string())}), None, None)
    return concat_keys(tables, context.uri)


def write_snapshot_data(blobs: BlobStore, prefix: str, keys: pa.Table) -> None:
    """A snapshot's data: ``keys.parquet`` (the keys with attribution) and ``checkpoints.parquet``
    (one row per checkpoint: its id, epoch and number of keys), the small index a reprocess plans
    from without reading every key. Both are written before the snapshot's manifest."""
    sink = io.BytesIO()
    pq.write_table(keys, sink, compression="zstd")
    blobs.put(prefix + "keys.parquet", sink.getvalue())
    attributed_rows = keys.filter(pc.is_valid(keys.column("checkpoint_id")))
    index = attributed_rows.group_by(["checkpoint_id", "epoch"]).aggregate([([], "count_all")])
    index = index.rename_columns(["checkpoint_id", "epoch", "num_keys"])
    sink = io.BytesIO()
    pq.write_table(index, sink, compression="zstd")
    blobs.put(prefix + INDEX_NAME, sink.getvalue())


def read_snapshot_index(blobs: BlobStore, number: int) -> dict[str, tuple[int, int]]:
    """Checkpoint id -> (epoch, number of keys) of the keys snapshot ``number`` holds (every snapshot
    has this index: ``write_snapshot_data`` writes it before the snapshot's manifest)."""
    key = f"snapshots/{number:08d}/{INDEX_NAME}"
    found = blobs.get_if_exists(key)
    if found is None:
        raise corrupt_record(blobs.child_uri(key), "is missing (every snapshot has its checkpoint index)")
    try:
        table = pq.read_table(pa.BufferReader(found[0]))
    except (pa.ArrowInvalid, OSError) as exc:
        raise corrupt_record(blobs.child_uri(key), f"is corrupt or truncated ({exc})") from exc
    return {
        str(i): (int(e), int(n))
        for i, e, n in zip(
            table.column("checkpoint_id").to_pylist(),
            table.column("epoch").to_pylist(),
            table.column("num_keys").to_pylist(),
            strict=True,
        )
    }


def drop_checkpoints(table: pa.Table, checkpoint_ids: Iterable[str]) -> pa.Table:
    """The snapshot keys table (with its attribution) without the rows of ``checkpoint_ids``."""
    doomed = pa.array(sorted(set(checkpoint_ids)), pa.string())
    keep = pc.invert(pc.fill_null(pc.is_in(table.column("checkpoint_id"), value_set=doomed), False))
    return table.filter(keep)


def derive_snapshot(context: StoreContext, number: int | None, source: int | None, drop: Iterable[str]) -> None:
    """``snapshots/{number}``: snapshot ``source`` without the keys of the checkpoints in ``drop`` (a reprocess
    retracting them). Idempotent: a snapshot already written is kept."""
    assert number is not None and source is not None
    blobs = context.blobs
    prefix = f"snapshots/{number:08d}/"
    if blobs.exists(prefix + "manifest.json"):
        return
    source_prefix = f"snapshots/{source:08d}/"
    old = context.read_json(source_prefix + "manifest.json")
    try:
        table = with_attribution(pq.read_table(pa.BufferReader(blobs.get(source_prefix + "keys.parquet")[0])))
    except BlobNotFoundError:
        table = attributed(pa.table({KEY_COLUMN: pa.array([], pa.string())}), None, None)
    except (pa.ArrowInvalid, OSError, KeyError) as exc:
        raise CorruptCheckpointError(
            f"{blobs.child_uri(source_prefix + 'keys.parquet')} is corrupt ({exc}); nothing more was changed. "
            "Run `airflow-ckpt check`",
            reason="corrupt",
        ) from exc
    dropped = set(drop)
    kept = drop_checkpoints(table, dropped)
    write_snapshot_data(blobs, prefix, kept)
    manifest = dict(old) | {
        "snapshot": number,
        "checkpoint_ids": sorted(set(old.get("checkpoint_ids", [])) - dropped),
        "num_keys": kept.num_rows,
        "created_at": now(),
        "derived_from": source,
    }
    blobs.put(prefix + "manifest.json", dumps(manifest))
