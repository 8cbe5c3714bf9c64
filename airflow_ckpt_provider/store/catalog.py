"""The catalog: every sealed checkpoint of one state read, from segments and loose manifests, as columns.

Validity, progress and the key sources are computed on columns, so a store of
100,000 checkpoints is not turned into 100,000 Python objects to answer
``progress()``; :class:`Checkpoint` records are built only for the rows a caller
asks for. One row per checkpoint id: where a loose manifest and a segment both
hold one (a compaction that crashed before deleting the loose one), the segment's
row stands and the checkpoint is committed if either says so (docs/store-api.md, "Segments").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_ckpt_provider.store.model import Checkpoint, CheckpointStatus, Epoch
from airflow_ckpt_provider.store.segments import SUMMARY_COLUMNS, checkpoints_of, read_manifests

_SUMMARY_SCHEMA = pa.schema(
    [
        ("checkpoint_id", pa.string()),
        ("status", pa.string()),
        ("epoch", pa.int64()),
        ("partition", pa.int64()),
        ("sealed_at", pa.string()),
        ("committed_at", pa.string()),
        ("num_keys", pa.int64()),
        ("key_type", pa.string()),
        ("num_files", pa.int64()),
        ("num_bytes", pa.int64()),
        ("num_rows", pa.int64()),
    ]
)
LOOSE = -1


@dataclass(frozen=True)
class LoadedSegment:
    """A segment's name, the summary columns of its manifests (decoded when loaded) and the object's bytes.

    ``manifests`` (every column: file lists, intent records) is decoded on first use: the readers of
    keys, progress and epochs need only the summary, which is a tenth of the decoding at 100,000
    checkpoints. A segment whose other columns are corrupt raises :class:`CorruptCheckpointError`
    there (``check()`` reports it)."""

    name: str
    summary: pa.Table
    data: bytes = field(default=b"", repr=False)
    uri: str = ""

    @cached_property
    def manifests(self) -> pa.Table:
        return read_manifests(self.data, self.uri)


class Catalog:
    """Every sealed checkpoint of a state read, one row per id."""

    def __init__(self, segments: Sequence[LoadedSegment], loose: Mapping[str, Checkpoint]) -> None:
        self.segments = list(segments)
        self.loose = dict(loose)
        parts: list[pa.Table] = []
        for index, segment in enumerate(self.segments):
            summary = segment.summary.select(list(SUMMARY_COLUMNS)).cast(_SUMMARY_SCHEMA)
            rows = summary.num_rows
            summary = summary.append_column("source", pa.array(np.full(rows, index, np.int32)))
            parts.append(summary.append_column("row", pa.array(np.arange(rows, dtype=np.int64))))
        table = pa.concat_tables(parts) if parts else _loose_table({}).slice(0, 0)
        if parts and _has_duplicates(table.column("checkpoint_id")):
            table = _first_of_each_id(table)
        if self.loose:
            in_segments = pc.is_in(
                pa.array(list(self.loose), pa.string()), value_set=table.column("checkpoint_id")
            ).to_numpy(zero_copy_only=False)
            newer = {cid: c for (cid, c), hit in zip(self.loose.items(), in_segments, strict=True) if not hit}
            if newer:
                table = pa.concat_tables([table, _loose_table(newer)])
        self.table = table.combine_chunks()
        self._ids: list[str] | None = None
        self._id_set: set[str] | None = None

    # ------------------------------------------------------------------ lookups

    def __len__(self) -> int:
        return int(self.table.num_rows)

    @property
    def ids(self) -> list[str]:
        if self._ids is None:
            self._ids = self.table.column("checkpoint_id").to_pylist()
        return self._ids

    def id_set(self) -> set[str]:
        if self._id_set is None:
            self._id_set = set(self.ids)
        return self._id_set

    def held_by_segments(self, ids: Sequence[str]) -> list[bool]:
        """For each of ``ids``: whether a segment holds that checkpoint (whatever a loose manifest says)."""
        if not ids:
            return []
        segment_ids = self.table.column("checkpoint_id").filter(pc.not_equal(self.table.column("source"), LOOSE))
        held: list[bool] = pc.is_in(pa.array(list(ids), pa.string()), value_set=segment_ids).to_pylist()
        return held

    def mask_of(self, ids: Iterable[str]) -> np.ndarray:
        wanted = pa.array(list(ids), pa.string())
        mask: np.ndarray = pc.is_in(self.table.column("checkpoint_id"), value_set=wanted).to_numpy(zero_copy_only=False)
        return mask

    def with_committed(self, ids: Sequence[str], committed_at: str | None) -> Catalog:
        """This catalog with ``ids`` committed (the newest commit record is the authority)."""
        if ids:
            self.table = _mark_committed(self.table, list(ids), committed_at)
        return self

    # ------------------------------------------------------------------ validity

    def valid_mask(self, latest: Epoch | None, folded: set[str]) -> np.ndarray:
        """Base of the latest epoch + sealed in it, one per partition (first sealed, then smallest id); none
        once ``delete_after_success`` followed the latest epoch's commit (``Epoch.keys_deleted``)."""
        rows = self.table.num_rows
        if latest is None or rows == 0 or latest.keys_deleted:
            return np.zeros(rows, dtype=bool)
        ids = self.table.column("checkpoint_id")
        not_folded = (
            ~pc.is_in(ids, value_set=pa.array(list(folded), pa.string())).to_numpy(zero_copy_only=False)
            if folded
            else np.ones(rows, dtype=bool)
        )
        in_base = pc.is_in(ids, value_set=pa.array(list(latest.base), pa.string())).to_numpy(zero_copy_only=False)
        in_latest = (self.table.column("epoch").to_numpy() == latest.number) & not_folded
        partition = self.table.column("partition")
        no_partition = pc.is_null(partition).to_numpy(zero_copy_only=False)
        valid: np.ndarray = (in_base & not_folded) | (in_latest & no_partition)
        candidates = np.flatnonzero(in_latest & ~no_partition)
        if len(candidates):
            sub = self.table.select(["partition", "sealed_at", "checkpoint_id"]).take(pa.array(candidates))
            order = pc.sort_indices(
                sub, sort_keys=[("partition", "ascending"), ("sealed_at", "ascending"), ("checkpoint_id", "ascending")]
            ).to_numpy()
            partitions = sub.column("partition").to_numpy()[order]
            first = np.ones(len(order), dtype=bool)
            first[1:] = partitions[1:] != partitions[:-1]
            valid[candidates[order[first]]] = True
        return valid

    def sum(self, column: str, mask: np.ndarray) -> int:
        values = self.table.column(column).to_numpy()
        return int(values[mask].sum()) if len(values) else 0

    def key_types(self, mask: np.ndarray) -> set[str]:
        types = self.table.column("key_type").filter(pa.array(mask)).unique().to_pylist()
        return {t for t in types if t}

    # ------------------------------------------------------------------ records

    def checkpoints(self, mask: np.ndarray | None = None) -> list[Checkpoint]:
        """The rows under ``mask`` (default: all) as records, sorted as validity lists them."""
        indices = np.flatnonzero(mask) if mask is not None else np.arange(self.table.num_rows)
        if not len(indices):
            return []
        picked = self.table.select(["checkpoint_id", "source", "row", "status", "committed_at"]).take(pa.array(indices))
        out: list[Checkpoint] = []
        sources = picked.column("source").to_numpy()
        rows = picked.column("row").to_numpy()
        ids = picked.column("checkpoint_id").to_pylist()
        statuses = picked.column("status").to_pylist()
        committed_ats = picked.column("committed_at").to_pylist()
        for source in np.unique(sources):
            where = np.flatnonzero(sources == source)
            if source == LOOSE:
                for i in where:
                    out.append(_with_status(self.loose[ids[i]], statuses[i], committed_ats[i]))
                continue
            manifests = self.segments[int(source)].manifests.take(pa.array(rows[where]))
            for i, checkpoint in zip(where, checkpoints_of(manifests), strict=True):
                out.append(_with_status(checkpoint, statuses[i], committed_ats[i]))
        return sorted(out, key=lambda c: (c.epoch, c.partition if c.partition is not None else -1, c.checkpoint_id))

    def segment_rows(self, index: int, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of segment ``index`` under ``mask``: (catalog row numbers, segment row numbers)."""
        sources = self.table.column("source").to_numpy()
        picked = np.flatnonzero((sources == index) & mask)
        return picked, self.table.column("row").to_numpy()[picked]


def _with_status(checkpoint: Checkpoint, status: str, committed_at: str | None) -> Checkpoint:
    if status == checkpoint.status.value:
        return checkpoint
    return dataclasses.replace(checkpoint, status=CheckpointStatus(status), committed_at=committed_at)


def _loose_table(loose: Mapping[str, Checkpoint]) -> pa.Table:
    checkpoints = list(loose.values())
    columns = {
        "checkpoint_id": [c.checkpoint_id for c in checkpoints],
        "status": [c.status.value for c in checkpoints],
        "epoch": [c.epoch for c in checkpoints],
        "partition": [c.partition for c in checkpoints],
        "sealed_at": [c.sealed_at for c in checkpoints],
        "committed_at": [c.committed_at for c in checkpoints],
        "num_keys": [c.num_keys for c in checkpoints],
        "key_type": [c.key_type for c in checkpoints],
        "num_files": [c.num_files for c in checkpoints],
        "num_bytes": [c.num_bytes for c in checkpoints],
        "num_rows": [c.num_rows for c in checkpoints],
    }
    table = pa.table(columns, schema=_SUMMARY_SCHEMA)
    table = table.append_column("source", pa.array(np.full(len(checkpoints), LOOSE, np.int32)))
    return table.append_column("row", pa.array(np.arange(len(checkpoints), dtype=np.int64)))


def _has_duplicates(ids: pa.ChunkedArray) -> bool:
    return bool(pc.count_distinct(ids).as_py() != len(ids))


def _first_of_each_id(table: pa.Table) -> pa.Table:
    """One row per id, the first (a checkpoint in two segments: segments merged twice after a crash)."""
    ids = table.column("checkpoint_id")
    return table.take(pc.index_in(pc.unique(ids), value_set=ids))


def _mark_committed(table: pa.Table, ids: Sequence[str], committed_at: str | None) -> pa.Table:
    if not ids:
        return table
    hit = pc.is_in(table.column("checkpoint_id"), value_set=pa.array(list(ids), pa.string()))
    hit = pc.and_(hit, pc.not_equal(table.column("status"), "committed"))
    status = pc.if_else(hit, "committed", table.column("status"))
    stamp = pa.scalar(committed_at, pa.string())
    committed = pc.if_else(hit, stamp, table.column("committed_at"))
    table = table.set_column(table.schema.get_field_index("status"), "status", status)
    return table.set_column(table.schema.get_field_index("committed_at"), "committed_at", committed)
