"""Writing segments, and merging segments into bigger ones.

Both ways a segment is born go through :func:`put_segment` (its keys, then its manifests, each
create-if-absent) and :func:`replace_state` (``state.json``, conditionally on the etag read):
folding loose manifests (:mod:`~airflow_ckpt_provider.store.compaction`) and merging here.

:class:`SegmentMerger` replaces ``MERGE_FANIN`` segments of one level with one of the next, so
a store holds a few segments per level (logarithmic in its checkpoints); a discard rewrites all
segments into one without the dropped checkpoints. Replaced segments are deleted at once, or
(``delete_retired=False``, while a job may be reading them) named as retired in the state and
deleted by a later compaction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from airflow_ckpt_provider.store.blobs.base import BlobStore
from airflow_ckpt_provider.store.deletion import StoreDeleter
from airflow_ckpt_provider.store.errors import PreconditionFailedError
from airflow_ckpt_provider.store.records import dumps
from airflow_ckpt_provider.store.segments import (
    STATE_KEY,
    SegmentRef,
    SegmentState,
    keys_key,
    keys_parquet_bytes,
    keys_table,
    manifests_key,
    new_segment_name,
    parquet_bytes,
    read_table,
)
from airflow_ckpt_provider.store.state import StateReader

#: Segments of one level merged into one of the next.
MERGE_FANIN = 8


def put_segment(blobs: BlobStore, name: str, level: int, manifests: pa.Table, keys: pa.Table) -> SegmentRef:
    """Write segment ``name`` (keys first: the manifests object completes it), create-if-absent."""
    key_bytes = keys_parquet_bytes(keys)
    manifest_bytes = parquet_bytes(manifests)
    blobs.put(keys_key(name), key_bytes, if_absent=True)
    blobs.put(manifests_key(name), manifest_bytes, if_absent=True)
    return SegmentRef(
        name=name,
        level=level,
        checkpoints=manifests.num_rows,
        keys=keys.num_rows,
        bytes=len(key_bytes) + len(manifest_bytes),
    )


def replace_state(blobs: BlobStore, old: SegmentState, new: SegmentState) -> bool:
    """Write ``new`` if the state object is still ``old`` (conditional write); False if another won."""
    try:
        if old.etag is None:
            blobs.put(STATE_KEY, dumps(new.to_json()), if_absent=True)
        else:
            blobs.put(STATE_KEY, dumps(new.to_json()), if_match=old.etag)
    except PreconditionFailedError:
        return False
    return True


class SegmentMerger:
    """Merges segments into bigger ones and deletes the segments a state retired."""

    def __init__(self, blobs: BlobStore, reader: StateReader, deleter: StoreDeleter) -> None:
        self._blobs = blobs
        self._reader = reader
        self._deleter = deleter

    def merge_levels(
        self, state: SegmentState, *, delete_retired: bool, max_rows: int | None = None
    ) -> tuple[str, ...]:
        """Merge ``MERGE_FANIN`` segments of a level into one of the next while a level has that many
        (``max_rows``: only groups holding at most that many checkpoints in all)."""
        merged: list[str] = []
        while True:
            by_level: dict[int, list[SegmentRef]] = defaultdict(list)
            for ref in state.segments:
                by_level[ref.level].append(ref)
            groups = [refs[:MERGE_FANIN] for _, refs in sorted(by_level.items()) if len(refs) >= MERGE_FANIN]
            if max_rows is not None:
                groups = [g for g in groups if sum(r.checkpoints for r in g) <= max_rows]
            if not groups:
                break
            group = groups[0]
            replaced = self.merge(state, group, level=group[0].level + 1, delete_retired=delete_retired)
            if replaced is None:
                break  # another compaction changed the state: it merges next time
            merged.extend(r.name for r in group)
            state = replaced
        if delete_retired and state.retired:
            self.delete_retired(state)
        return tuple(merged)

    def merge(
        self,
        state: SegmentState,
        group: Sequence[SegmentRef],
        *,
        level: int,
        delete_retired: bool,
        drop: frozenset[str] = frozenset(),
    ) -> SegmentState | None:
        """Replace the ``group`` segments with one segment holding their rows (minus the ``drop`` ids).

        Returns the new state, or None if another compaction replaced the state first
        (then nothing changed).
        """
        loaded = [self._reader.segments.load_segment(r.name) for r in group]
        manifests = pa.concat_tables([s.manifests for s in loaded]).combine_chunks()
        # Segments of empty checkpoints hold an empty key table of no particular type: leave them out.
        key_tables = [t for t in (self._segment_keys(s.name) for s in loaded) if t.num_rows]
        keys = pa.concat_tables(key_tables).combine_chunks() if key_tables else keys_table([], None)
        manifests, keys = _dedupe(manifests, keys, drop)
        name = new_segment_name(state.generation + 1)
        ref = put_segment(self._blobs, name, level, manifests, keys)
        names = {r.name for r in group}
        new_state = state.successor(
            segments=(*tuple(r for r in state.segments if r.name not in names), ref),
            retired=(*state.retired, *sorted(names)),
            new_lineage=bool(drop),
        )
        if not replace_state(self._blobs, state, new_state):
            self._deleter.delete_segments([name])
            return None
        replaced = self._reader.segments.segment_state()
        if delete_retired:
            replaced = self.delete_retired(replaced)
        return replaced

    def _segment_keys(self, name: str) -> pa.Table:
        key = keys_key(name)
        return read_table(self._blobs.get(key)[0], self._blobs.child_uri(key))

    def delete_retired(self, state: SegmentState) -> SegmentState:
        """Delete the retired segments, then drop them from the state (a crash between: deleted again)."""
        self._deleter.delete_segments(list(state.retired))
        cleaned = state.successor(segments=state.segments, retired=())
        if replace_state(self._blobs, state, cleaned):
            return self._reader.segments.segment_state()
        return self._reader.segments.segment_state()

    def rewrite_without(self, drop: frozenset[str]) -> bool:
        """One segment holding every row but ``drop`` replaces all segments (discard). False if a race was lost."""
        state = self._reader.segments.segment_state()
        if not state.segments:
            return True
        level = max(r.level for r in state.segments)
        return self.merge(state, list(state.segments), level=level, delete_retired=True, drop=drop) is not None


def _dedupe(manifests: pa.Table, keys: pa.Table, drop: frozenset[str]) -> tuple[pa.Table, pa.Table]:
    """One row per checkpoint id (the first; committed if any row is), its keys once, without ``drop``."""
    ids = manifests.column("checkpoint_id")
    unique = pc.unique(ids)
    first = pc.index_in(unique, value_set=ids)
    duplicates = len(first) != manifests.num_rows
    kept = manifests.take(first)
    if drop:
        dropped = pc.is_in(kept.column("checkpoint_id"), value_set=pa.array(sorted(drop), pa.string()))
        kept = kept.filter(pc.invert(dropped))
    committed = set()
    if duplicates:
        committed_rows = manifests.filter(pc.equal(manifests.column("status"), "committed"))
        committed = set(committed_rows.column("checkpoint_id").to_pylist())
    if committed:
        rows = kept.to_pylist()
        for row in rows:
            if row["checkpoint_id"] in committed and row["status"] != "committed":
                row["status"] = "committed"
        kept = pa.Table.from_pylist(rows, schema=manifests.schema)
    if duplicates or drop:
        # Keys of an id held twice would count twice: keep those of the row that stays.
        owners = pc.cast(keys.column("checkpoint_id"), pa.string()) if keys.num_rows else keys.column("checkpoint_id")
        keep_ids = kept.column("checkpoint_id")
        keys = keys.filter(pc.is_in(owners, value_set=keep_ids)) if keys.num_rows else keys
        if duplicates and keys.num_rows:
            keys = _keys_once_per_owner(keys, manifests, first)
    return kept, keys


def _keys_once_per_owner(keys: pa.Table, manifests: pa.Table, first: pa.Array) -> pa.Table:
    """Drop the keys a duplicate row of an id brought (a merged segment holds each id's keys once)."""
    counts: dict[str, int] = {}
    for row in manifests.take(first).select(["checkpoint_id", "num_keys"]).to_pylist():
        counts[row["checkpoint_id"]] = int(row["num_keys"])
    owners = pc.cast(keys.column("checkpoint_id"), pa.string()).to_pylist()
    taken: dict[str, int] = defaultdict(int)
    mask = []
    for owner in owners:
        keep = taken[owner] < counts.get(owner, 0)
        taken[owner] += int(keep)
        mask.append(keep)
    return keys.filter(pa.array(mask))
