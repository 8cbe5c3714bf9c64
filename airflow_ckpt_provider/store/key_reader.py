"""Reading done keys: which objects hold a state's keys (:func:`key_sources`) and their ``key`` tables."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from airflow_ckpt_provider.store.catalog import LOOSE
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.errors import CorruptCheckpointError, InvalidArgumentError, corrupt_record
from airflow_ckpt_provider.store.keys import KEY_COLUMN
from airflow_ckpt_provider.store.layout import attempt_prefix, manifest_key, snapshot_prefix
from airflow_ckpt_provider.store.model import Checkpoint, KeySource
from airflow_ckpt_provider.store.segment_reader import SegmentReader
from airflow_ckpt_provider.store.segments import keys_key as segment_keys_key
from airflow_ckpt_provider.store.segments import read_keys as read_segment_keys
from airflow_ckpt_provider.store.segments import read_table as read_segment_table
from airflow_ckpt_provider.store.store_state import StoreState


def concat_keys(tables: Sequence[pa.Table], uri: str) -> pa.Table:
    """The key tables of one store as one; :class:`InvalidArgumentError` (``key_type_mismatch``) if their key
    types differ (the key column changed type between runs)."""
    types = {str(t.schema.field(KEY_COLUMN).type) for t in tables}
    if len(types) > 1:
        raise InvalidArgumentError(
            f"the checkpoints of {uri} hold keys of different types {sorted(types)}: the key column changed type "
            "between runs. Cast it back to the earlier type, or clear the store to start over",
            reason="key_type_mismatch",
        )
    return pa.concat_tables(tables)


class KeyReader:
    """Reads the keys objects of checkpoints, segments and snapshots (column ``key``)."""

    def __init__(self, context: StoreContext, segments: SegmentReader) -> None:
        self._context = context
        self._blobs = context.blobs
        self._segments = segments

    def read_key_source(self, source: KeySource) -> pa.Table:
        data = source.data if source.data else self._blobs.get(source.key)[0]
        if source.format == "segment":
            return read_segment_keys(data, self._blobs.child_uri(source.key), source.exclude)
        try:
            if source.format == "manifest" and not source.data:
                inline = Checkpoint.from_json(self._context.parse_json(source.key, data)).inline_keys
                if inline is None:
                    raise CorruptCheckpointError(
                        f"{self._blobs.child_uri(source.key)} carries no inline keys", reason="corrupt"
                    )
                data = inline
            if source.format == "parquet":  # a snapshot: key, and which checkpoint each came from
                table = pq.read_table(pa.BufferReader(data), columns=[KEY_COLUMN])
            else:
                with ipc.open_stream(pa.BufferReader(data)) as reader:
                    table = reader.read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            raise corrupt_record(
                self._blobs.child_uri(source.key),
                f"is corrupt or truncated ({exc})",
                "Run `airflow-ckpt check`; discard that checkpoint to reprocess its keys",
            ) from exc
        if KEY_COLUMN not in table.column_names:
            raise CorruptCheckpointError(
                f"{self._blobs.child_uri(source.key)} has no '{KEY_COLUMN}' column", reason="corrupt"
            )
        return table.select([KEY_COLUMN])

    def warm_segment_keys(self) -> dict[str, tuple[bytes, pa.Table]]:
        """The keys objects of the segments the state object names now, with their ``key`` column decoded
        (keyed by object key). Best effort: a segment that cannot be read is left to the real read."""

        def load(name: str) -> tuple[str, tuple[bytes, pa.Table]] | None:
            key = segment_keys_key(name)
            try:
                data = self._blobs.get(key)[0]
                return key, (data, read_segment_keys(data, self._blobs.child_uri(key)))
            except Exception:  # the real read raises what it must
                return None

        try:
            names = list(self._segments.segment_state().names)
        except Exception:  # the real read raises what it must
            return {}
        return dict(found for found in self._context.map(load, names) if found is not None)

    def read_keys(
        self, sources: Sequence[KeySource], warmed: Mapping[str, tuple[bytes, pa.Table]] | None = None
    ) -> pa.Table:
        """Every key of ``sources`` in one table; :class:`InvalidArgumentError` (``key_type_mismatch``) if their
        types differ.
        ``warmed``: segment keys objects already fetched (object key -> bytes, ``key`` column)."""
        early = warmed or {}

        def read(source: KeySource) -> pa.Table:
            found = early.get(source.key) if source.format == "segment" else None
            if found is None:
                return self.read_key_source(source)
            data, table = found
            return self.read_key_source(dataclasses.replace(source, data=data)) if source.exclude else table

        tables = self._context.map(read, sources)
        if not tables:
            return pa.table({KEY_COLUMN: pa.array([], pa.string())})
        return concat_keys(tables, self._context.uri)

    def key_type(self, state: StoreState) -> str | None:
        types = state.catalog.key_types(state.valid_mask)
        if state.snapshot and state.snapshot.get("key_type"):
            types.add(state.snapshot["key_type"])
        if len(types) > 1:
            raise InvalidArgumentError(
                f"the checkpoints of {self._context.uri} hold keys of types {sorted(types)}", reason="key_type_mismatch"
            )
        return types.pop() if types else None

    def segment_keys(self, state: StoreState, only: Sequence[str]) -> tuple[list[pa.Table], set[str]]:
        """The keys segments hold of the checkpoints ``only``, with who sealed them (columns ``key``,
        ``checkpoint_id``, ``epoch``): one read per segment, whatever the number of checkpoints.
        Returns the tables and the ids they cover (the others are loose)."""
        catalog = state.catalog
        mask = catalog.mask_of(only)
        tables: list[pa.Table] = []
        covered: set[str] = set()
        for index, segment in enumerate(catalog.segments):
            rows, _ = catalog.segment_rows(index, mask)
            if not len(rows):
                continue
            ids = catalog.table.column("checkpoint_id").take(pa.array(rows))
            key = segment_keys_key(segment.name)
            table = read_segment_table(self._blobs.get(key)[0], self._blobs.child_uri(key))
            owners = pc.cast(table.column("checkpoint_id"), pa.string())
            table = table.set_column(table.schema.get_field_index("checkpoint_id"), "checkpoint_id", owners)
            tables.append(table.filter(pc.is_in(owners, value_set=ids)))
            covered |= set(ids.to_pylist())
        return tables, covered


def key_sources(state: StoreState, only: Sequence[str] | None = None) -> list[KeySource]:
    """The snapshot (if it holds keys), the segments holding valid checkpoints' keys and the keys of the
    valid loose checkpoints (or of ``only`` among them).

    A segment is one source that names the checkpoints whose keys it must leave out (not
    valid, or not in ``only``). A loose checkpoint whose manifest carries its keys is one
    source (the manifest, with the bytes when the state kept them); others contribute
    each key part.
    """
    sources: list[KeySource] = []
    if state.snapshot is not None and int(state.snapshot.get("num_keys", 0)):
        number = int(state.snapshot["snapshot"])
        sources.append(KeySource(key=snapshot_prefix(number) + "keys.parquet", format="parquet"))
    catalog = state.catalog
    mask = state.valid_mask if only is None else state.valid_mask & catalog.mask_of(only)
    num_keys = catalog.table.column("num_keys").to_numpy()
    ids = catalog.table.column("checkpoint_id")
    for index, segment in enumerate(catalog.segments):
        rows, _ = catalog.segment_rows(index, mask)
        if not len(rows) or not num_keys[rows].sum():
            continue
        # On columns: a segment of 100,000 checkpoints usually excludes none of them.
        held = segment.summary.column("checkpoint_id")
        left_out = pc.filter(held, pc.invert(pc.is_in(held, value_set=ids.take(pa.array(rows)))))
        exclude = tuple(sorted(left_out.to_pylist()))
        sources.append(KeySource(key=segment_keys_key(segment.name), format="segment", exclude=exclude))
    loose_rows, _ = catalog.segment_rows(LOOSE, mask)
    loose_ids: list[str] = ids.take(pa.array(loose_rows)).to_pylist() if len(loose_rows) else []
    for checkpoint_id in sorted(loose_ids):
        checkpoint = catalog.loose[checkpoint_id]
        if checkpoint.inline_keys is not None:
            sources.append(
                KeySource(key=manifest_key(checkpoint_id), format="manifest", data=checkpoint.inline_keys or None)
            )
        else:
            prefix = attempt_prefix(checkpoint_id)
            sources.extend(KeySource(key=prefix + part, format="arrow") for part in checkpoint.key_parts)
    return sources
