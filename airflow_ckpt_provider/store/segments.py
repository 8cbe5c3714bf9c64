"""Segments: many sealed checkpoints in two columnar objects, and the state object that names them.

A segment ``segments/{name}/`` holds the manifests of the checkpoints it covers
(``manifests.parquet``: one row per checkpoint, with its file list and the intent
records of its directory) and their keys (``keys.parquet``: columns ``key``,
``checkpoint_id``, ``epoch``). Segments are immutable and written create-if-absent
(keys first; the manifests object completes a segment). ``state.json`` names the
segments that make up the store's current state; it is replaced only with a
conditional write (``If-Match`` on its etag, ``If-None-Match`` for the first), so
two compactions cannot both win and neither can drop the other's work
(docs/store-api.md, "Segments").
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_ckpt_provider.store.errors import CorruptCheckpointError
from airflow_ckpt_provider.store.keys import KEY_COLUMN
from airflow_ckpt_provider.store.model import Checkpoint, CheckpointStatus, FileMetadata
from airflow_ckpt_provider.store.records import now

STATE_KEY = "state.json"
SEGMENTS_PREFIX = "segments/"
STATE_FORMAT = 1

_FILE_TYPE = pa.struct(
    [("path", pa.string()), ("size_bytes", pa.int64()), ("num_rows", pa.int64()), ("format", pa.string())]
)
MANIFEST_SCHEMA = pa.schema(
    [
        ("checkpoint_id", pa.string()),
        ("status", pa.string()),
        ("epoch", pa.int64()),
        ("partition", pa.int64()),
        ("created_at", pa.string()),
        ("sealed_at", pa.string()),
        ("committed_at", pa.string()),
        ("key_parts", pa.list_(pa.string())),
        ("file_parts", pa.list_(pa.string())),
        ("num_keys", pa.int64()),
        ("key_type", pa.string()),
        ("num_files", pa.int64()),
        ("num_bytes", pa.int64()),
        ("num_rows", pa.int64()),
        ("metadata", pa.string()),  # JSON object
        ("files", pa.list_(_FILE_TYPE)),
        ("intents", pa.string()),  # JSON list of the checkpoint's intent records
    ]
)
#: What readers need of every row to compute validity and progress (the rest is read on demand).
SUMMARY_COLUMNS = (
    "checkpoint_id",
    "status",
    "epoch",
    "partition",
    "sealed_at",
    "committed_at",
    "num_keys",
    "key_type",
    "num_files",
    "num_bytes",
    "num_rows",
)


def segment_prefix(name: str) -> str:
    return f"{SEGMENTS_PREFIX}{name}/"


def manifests_key(name: str) -> str:
    return segment_prefix(name) + "manifests.parquet"


def keys_key(name: str) -> str:
    return segment_prefix(name) + "keys.parquet"


def new_segment_name(generation: int) -> str:
    """A name no other writer can pick: the state generation it was written for, and a random token."""
    return f"{generation:08d}-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class SegmentRef:
    """One segment as the state object names it."""

    name: str
    level: int
    checkpoints: int
    keys: int
    bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "level": self.level,
            "checkpoints": self.checkpoints,
            "keys": self.keys,
            "bytes": self.bytes,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SegmentRef:
        return cls(
            name=str(data["name"]),
            level=int(data["level"]),
            checkpoints=int(data["checkpoints"]),
            keys=int(data["keys"]),
            bytes=int(data.get("bytes", 0)),
        )


@dataclass(frozen=True)
class SegmentState:
    """The state object: the segments that make up the store's state, and those replaced but not yet deleted."""

    generation: int
    segments: tuple[SegmentRef, ...]
    retired: tuple[str, ...] = ()
    updated_at: str = ""
    etag: str | None = field(default=None, compare=False)
    #: Stays the same while states only add rows (folds) or move them (merges); a new one when rows are
    #: dropped (discard) or the state object is created again (after a clear): a fold that lost the race
    #: may add its segment to a newer state only of the same lineage (store/compaction.py).
    lineage: str = ""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format_version": STATE_FORMAT,
            "generation": self.generation,
            "segments": [s.to_json() for s in self.segments],
            "retired": list(self.retired),
            "updated_at": self.updated_at,
        }
        if self.lineage:
            data["lineage"] = self.lineage
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], etag: str | None) -> SegmentState:
        return cls(
            generation=int(data["generation"]),
            segments=tuple(SegmentRef.from_json(s) for s in data["segments"]),
            retired=tuple(str(n) for n in data.get("retired", ())),
            updated_at=str(data.get("updated_at", "")),
            etag=etag,
            lineage=str(data.get("lineage", "")),
        )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.segments)

    def successor(
        self, *, segments: tuple[SegmentRef, ...], retired: tuple[str, ...], new_lineage: bool = False
    ) -> SegmentState:
        """The state that replaces this one: next generation, same lineage unless rows are dropped or
        there was no state object (or one written before lineages)."""
        keep = self.lineage and self.etag is not None and not new_lineage
        return SegmentState(
            generation=self.generation + 1,
            segments=segments,
            retired=retired,
            updated_at=now(),
            lineage=self.lineage if keep else uuid.uuid4().hex,
        )


EMPTY_STATE = SegmentState(generation=0, segments=())


# ---------------------------------------------------------------------- encoding


def manifest_row(
    checkpoint: Checkpoint, files: Sequence[FileMetadata], intents: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """One ``manifests.parquet`` row: the manifest, its whole file list and its directory's intent records."""
    return {
        "checkpoint_id": checkpoint.checkpoint_id,
        "status": checkpoint.status.value,
        "epoch": checkpoint.epoch,
        "partition": checkpoint.partition,
        "created_at": checkpoint.created_at,
        "sealed_at": checkpoint.sealed_at,
        "committed_at": checkpoint.committed_at,
        "key_parts": list(checkpoint.key_parts),
        "file_parts": list(checkpoint.file_parts),
        "num_keys": checkpoint.num_keys,
        "key_type": checkpoint.key_type,
        "num_files": checkpoint.num_files,
        "num_bytes": checkpoint.num_bytes,
        "num_rows": checkpoint.num_rows,
        "metadata": json.dumps(dict(checkpoint.metadata), sort_keys=True, separators=(",", ":")),
        "files": [f.to_json() for f in files],
        "intents": json.dumps(list(intents), sort_keys=True, separators=(",", ":")),
    }


def manifests_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=MANIFEST_SCHEMA)


def parquet_bytes(table: pa.Table, *, use_dictionary: bool | list[str] = True) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", use_dictionary=use_dictionary)
    return sink.getvalue()


def keys_parquet_bytes(table: pa.Table) -> bytes:
    """A keys table as zstd Parquet, a Parquet dictionary for ``epoch`` only (a few values: 25 % less time
    and size than plain at 5.76 M keys). Its ``checkpoint_id`` column is an Arrow
    dictionary of every checkpoint of the segment, which Parquet would write again in every row group (at
    100,000 checkpoints: 16 of the object's 28 MB, fetched whole by every key reader); written plain, zstd
    folds each checkpoint's run of equal ids. Readers still get the dictionary column back (the Arrow
    schema is stored in the file), so segments written either way read and merge alike."""
    return parquet_bytes(table, use_dictionary=["epoch"] if "epoch" in table.column_names else False)


def keys_table(tables: Sequence[pa.Table], key_type: pa.DataType | None) -> pa.Table:
    """Concatenated keys tables (``key``, ``checkpoint_id``, ``epoch``), or an empty one."""
    if tables:
        table = pa.concat_tables(tables)
    else:
        table = pa.table(
            {
                KEY_COLUMN: pa.array([], key_type or pa.string()),
                "checkpoint_id": pa.array([], pa.string()),
                "epoch": pa.array([], pa.int64()),
            }
        )
    return table.combine_chunks()


def attributed_keys(keys: pa.Table, checkpoint_id: str, epoch: int) -> pa.Table:
    """A checkpoint's keys with who sealed them (readers select ``key`` only). Built as arrays, not
    Python lists: at 120,000 keys a checkpoint, a list of ids cost 20 ms per checkpoint of the
    driver's fold at the end of a write (0.9 s for 5.76 M keys)."""
    count = keys.num_rows
    return pa.table(
        {
            KEY_COLUMN: keys.column(KEY_COLUMN),
            "checkpoint_id": pa.DictionaryArray.from_arrays(
                pa.repeat(pa.scalar(0, pa.int32()), count), pa.array([checkpoint_id], pa.string())
            ),
            "epoch": pa.repeat(pa.scalar(epoch, pa.int64()), count),
        }
    )


# ---------------------------------------------------------------------- decoding


def _parquet(data: bytes, what: str, columns: list[str] | None = None) -> pa.Table:
    """One segment object as a table; :class:`CorruptCheckpointError` naming ``what`` ("segment X is")
    if it does not parse or lacks a column asked for."""
    try:
        return pq.read_table(pa.BufferReader(data), columns=columns)
    except (pa.ArrowInvalid, OSError, KeyError) as exc:
        raise CorruptCheckpointError(
            f"{what} corrupt or truncated ({exc}); nothing was changed. Run `airflow-ckpt check`; "
            "restore the object, or clear the store to start over",
            reason="corrupt",
        ) from exc


def read_manifests(data: bytes, uri: str, columns: Sequence[str] | None = None) -> pa.Table:
    """A segment's manifests table; :class:`CorruptCheckpointError` if the object is not one."""
    table = _parquet(data, f"segment {uri} is", list(columns) if columns else None)
    missing = [c for c in (columns or MANIFEST_SCHEMA.names) if c not in table.column_names]
    if missing:
        raise CorruptCheckpointError(
            f"segment {uri} lacks the columns {missing}; nothing was changed", reason="corrupt"
        )
    return table


def checkpoints_of(table: pa.Table) -> list[Checkpoint]:
    """The rows of a manifests table as :class:`Checkpoint` records (inline files set, keys not inline).

    Column by column, and without the intent records: a commit turns 100,000 rows into records."""
    count = table.num_rows

    def column(name: str) -> list[Any]:
        return table.column(name).to_pylist() if name in table.column_names else [None] * count

    ids, statuses, epochs, partitions = column("checkpoint_id"), column("status"), column("epoch"), column("partition")
    created, sealed, committed = column("created_at"), column("sealed_at"), column("committed_at")
    key_parts, file_parts, key_types = column("key_parts"), column("file_parts"), column("key_type")
    num_keys, num_files, num_bytes, num_rows = (
        column("num_keys"),
        column("num_files"),
        column("num_bytes"),
        column("num_rows"),
    )
    metadata = column("metadata")
    files = _files_column(table.column("files")) if "files" in table.column_names else [None] * count
    return [
        Checkpoint(
            checkpoint_id=ids[i],
            status=CheckpointStatus(statuses[i]),
            epoch=int(epochs[i]),
            partition=partitions[i],
            created_at=created[i] or sealed[i],
            sealed_at=sealed[i],
            committed_at=committed[i],
            key_parts=tuple(key_parts[i] or ()),
            file_parts=tuple(file_parts[i] or ()),
            num_keys=int(num_keys[i]),
            key_type=key_types[i],
            num_files=int(num_files[i]),
            num_bytes=int(num_bytes[i]),
            num_rows=int(num_rows[i]),
            metadata=json.loads(metadata[i]) if metadata[i] and metadata[i] != "{}" else {},
            inline_keys=None,
            inline_files=files[i],
        )
        for i in range(count)
    ]


def _files_column(files: pa.ChunkedArray) -> list[tuple[FileMetadata, ...] | None]:
    """A ``files`` column (list of structs) as one tuple of :class:`FileMetadata` per row (None: null)."""
    out: list[tuple[FileMetadata, ...] | None] = []
    for chunk in files.chunks:
        values = chunk.values  # every row's structs, indexed by the (slice-aware) offsets below
        fields = dict(zip([f.name for f in values.type], values.flatten(), strict=True))
        paths, sizes = fields["path"].to_pylist(), fields["size_bytes"].to_pylist()
        rows, formats = fields["num_rows"].to_pylist(), fields["format"].to_pylist()
        offsets = chunk.offsets.to_pylist()
        valid = chunk.is_valid().to_pylist()
        for i in range(len(chunk)):
            if not valid[i]:
                out.append(None)
                continue
            out.append(
                tuple(
                    FileMetadata(str(paths[j]), int(sizes[j]), int(rows[j]), str(formats[j] or "parquet"))
                    for j in range(offsets[i], offsets[i + 1])
                )
            )
    return out


def intent_records(table: pa.Table) -> list[dict[str, Any]]:
    """Every intent record a manifests table carries."""
    records: list[dict[str, Any]] = []
    for text in table.column("intents").to_pylist():
        if text:
            records.extend(json.loads(text))
    return records


def files_by_id(table: pa.Table) -> dict[str, list[FileMetadata]]:
    ids = table.column("checkpoint_id").to_pylist()
    files = table.column("files").to_pylist()
    return {i: [FileMetadata.from_json(f) for f in (fs or [])] for i, fs in zip(ids, files, strict=True)}


def read_table(data: bytes, uri: str) -> pa.Table:
    """A segment's whole keys table (``key``, ``checkpoint_id``, ``epoch``)."""
    return _parquet(data, f"segment keys {uri} are")


def read_keys(data: bytes, uri: str, exclude: Sequence[str] = ()) -> pa.Table:
    """A segment's ``key`` column, without the keys of the ``exclude`` checkpoints."""
    columns = [KEY_COLUMN, "checkpoint_id"] if exclude else [KEY_COLUMN]
    table = _parquet(data, f"segment keys {uri} are", columns)
    if exclude:
        owners = table.column("checkpoint_id")
        keep = pc.invert(pc.is_in(owners, value_set=pa.array(list(exclude), pa.string())))
        table = table.filter(keep).select([KEY_COLUMN])
    return table


def read_owners(data: bytes, uri: str) -> dict[str, list[Any]]:
    """How many keys a segment holds per checkpoint: ``{"checkpoint_id": [...], "count": [...]}``."""
    table = _parquet(data, f"segment keys {uri} are", ["checkpoint_id"])
    owners = pa.table({"checkpoint_id": pc.cast(table.column("checkpoint_id"), pa.string())})
    counts = owners.group_by("checkpoint_id").aggregate([([], "count_all")])
    return {
        "checkpoint_id": counts.column("checkpoint_id").to_pylist(),
        "count": counts.column("count_all").to_pylist(),
    }
