"""Compaction: loose sealed manifests into segments, small segments into bigger ones.

Whoever is in a position to compacts: the Spark driver while the job runs, the
commit, ``begin_epoch``. One compaction (docs/store-api.md, "Segments"):

1. reads the state object (and its etag) and the segments it names;
2. lists ``attempts/`` and ``checkpoints/`` once; the sealed checkpoints no segment holds are loose;
3. reads their manifests, keys, files and intent records, writes a new segment
   (keys, then manifests; create-if-absent under a fresh name);
4. replaces the state object with one naming the new segment, conditionally on the
   etag it read: of two compactions racing, one wins; the loser deletes its segment
   and nothing is lost (its checkpoints stay loose for the next one);
5. only then deletes the loose manifests and attempt directories the state now covers.

A crash after 3 leaves a segment no state names (ignored; ``check`` notes it); a
crash after 4 leaves loose directories a segment covers (readers take the segment's
row, the next compaction deletes them). Segments are merged eight at a time into one
of the next level, so a store holds a few segments per level (logarithmic in its
checkpoints). Replaced segments are deleted at once, or (``delete_retired=False``,
while a job may be reading them) named as retired and deleted by a later compaction.
"""

from __future__ import annotations

import logging
import random
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.store.blobs.base import BlobNotFoundError
from airflow_ckpt_provider.store.catalog import LoadedSegment
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.deletion import StoreDeleter
from airflow_ckpt_provider.store.errors import CorruptCheckpointError, PreconditionFailedError
from airflow_ckpt_provider.store.keys import KEY_COLUMN
from airflow_ckpt_provider.store.layout import attempt_prefix, manifest_key
from airflow_ckpt_provider.store.listing import checkpoint_records
from airflow_ckpt_provider.store.model import Checkpoint, CheckpointStatus, FileMetadata
from airflow_ckpt_provider.store.records import dumps, now
from airflow_ckpt_provider.store.segments import (
    STATE_KEY,
    SegmentRef,
    SegmentState,
    attributed_keys,
    keys_key,
    keys_parquet_bytes,
    keys_table,
    manifest_row,
    manifests_key,
    manifests_table,
    new_segment_name,
    parquet_bytes,
    read_table,
)
from airflow_ckpt_provider.store.state import StateReader

log = logging.getLogger(__name__)

#: Segments of one level merged into one of the next.
MERGE_FANIN = 8
#: How often a fold that lost the race on the state object adds its segment to the newer state instead.
_REBASES = 16
#: Loose checkpoints ``begin_epoch`` folds at most: a submit's critical path does bounded work and
#: leaves the rest to the job's driver (docs/store-api.md, "The loose tail").
SUBMIT_FOLD_LIMIT = 500


@dataclass(frozen=True)
class CompactionResult:
    """What one compaction did."""

    segment: str | None  # the segment written from loose manifests (None: none written)
    checkpoints: int  # loose checkpoints it holds
    merged: tuple[str, ...] = ()  # segments merged into a bigger one
    deleted_dirs: int = 0  # loose checkpoint directories deleted because a segment holds them
    lost_race: bool = False  # another compaction replaced the state first (nothing lost; retry later)


@dataclass
class _Loose:
    """One loose sealed checkpoint as the compaction read it."""

    checkpoint: Checkpoint
    files: list[FileMetadata]
    keys: pa.Table | None
    intents: list[dict[str, Any]]


class Compactor:
    """Writes segments and the state object that names them."""

    def __init__(self, context: StoreContext, reader: StateReader, deleter: StoreDeleter) -> None:
        self._context = context
        self._blobs = context.blobs
        self._reader = reader
        self._deleter = deleter

    def compact(
        self, *, min_loose: int = 1, merge: bool = True, delete_retired: bool = True, limit: int | None = None
    ) -> CompactionResult:
        """Fold loose sealed manifests into a segment (when the store holds at least ``min_loose``), then
        merge segments.

        ``limit``: fold at most that many loose checkpoints (a window of the loose ones, from a
        random start, so that concurrent bounded compactions mostly fold different ones), delete at
        most that many leftover directories, and merge only segments holding at most
        ``MERGE_FANIN * limit`` checkpoints together: work bounded whatever the store holds, for a
        caller on a critical path (``begin_epoch``, a sealing task keeping the loose tail short). It
        lists ``checkpoints/`` and then only the attempt directories of the checkpoints it folds.

        Raises :class:`CorruptCheckpointError` when a segment the state names cannot be
        read (nothing is deleted then: which directories it covers is unknown).
        """
        state = self._reader.segment_state()
        segments = self._context.map(self._reader.load_segment, list(state.names))
        covered = _covered(segments)
        listing = self._listing() if limit is None else checkpoint_records(self._blobs, attempts=False)
        sealed = sorted(i for i, keys in listing.items() if manifest_key(i) in keys)
        loose = [i for i in sealed if i not in covered]
        loose_ids = _window(loose, limit)
        # A manifest mark_committed rewrote after its checkpoint was compacted: fold that status in again.
        recommitted = self._committed_since(_window(sorted(i for i in sealed if covered.get(i) is False), limit))
        if len(loose) + len(recommitted) < min_loose:  # the whole tail counts, not the batch ``limit`` takes
            loose_ids = []
        else:
            loose_ids += recommitted
        # A recommitted manifest is never a leftover to delete, folded now or not (its status is folded later).
        leftovers = _window(sorted(i for i in listing if i in covered and i not in {*loose_ids, *recommitted}), limit)
        if limit is not None:
            listing = self._attempt_listing(listing, [*loose_ids, *leftovers])
        result = CompactionResult(segment=None, checkpoints=0)
        if loose_ids:
            result = self._fold_loose(state, segments, loose_ids, listing, leftovers)
            if result.lost_race:
                return result
            state = self._reader.segment_state()
        elif leftovers:
            self._delete_dirs(leftovers, listing)
            result = CompactionResult(segment=None, checkpoints=0, deleted_dirs=len(leftovers))
        if merge:
            max_rows = None if limit is None else MERGE_FANIN * limit
            merged = self._merge_levels(state, delete_retired=delete_retired, max_rows=max_rows)
            result = CompactionResult(result.segment, result.checkpoints, merged, result.deleted_dirs, lost_race=False)
        elif delete_retired and state.retired:
            self._delete_retired(state)
        return result

    # ------------------------------------------------------------------ loose manifests -> a segment

    def _listing(self) -> dict[str, list[str]]:
        """Every record under ``attempts/`` and ``checkpoints/`` by checkpoint id (store/listing.py)."""
        return checkpoint_records(self._blobs)

    def _attempt_listing(self, listing: Mapping[str, list[str]], ids: Sequence[str]) -> dict[str, list[str]]:
        """``listing`` (records under ``checkpoints/``) for ``ids`` only, with each one's records under
        ``attempts/`` added: one listing per checkpoint folded, not one of every attempt of the store."""
        found = self._context.map(lambda i: [b.key for b in self._blobs.list(attempt_prefix(i))], list(ids))
        return {i: [*keys, *listing.get(i, [])] for i, keys in zip(ids, found, strict=True)}

    def _committed_since(self, ids: Sequence[str]) -> list[str]:
        def committed(checkpoint_id: str) -> str | None:
            try:
                found = self._reader.manifest(checkpoint_id)
            except CorruptCheckpointError:
                return None
            return checkpoint_id if found is not None and found.status is CheckpointStatus.COMMITTED else None

        return [i for i in self._context.map(committed, list(ids)) if i is not None]

    def _fold_loose(
        self,
        state: SegmentState,
        segments: Sequence[LoadedSegment],
        ids: Sequence[str],
        listing: Mapping[str, list[str]],
        leftovers: Sequence[str],
    ) -> CompactionResult:
        read = [r for r in self._context.map(lambda i: self._read_loose(i, listing[i]), list(ids)) if r is not None]
        read = _one_key_type(read, segments)
        if not read:
            if leftovers:
                self._delete_dirs(leftovers, listing)
            return CompactionResult(segment=None, checkpoints=0, deleted_dirs=len(leftovers))
        name, read = self._land(state, read)
        if name is None:
            log.info("compaction of %s lost a race; its checkpoints stay loose", self._context.uri)
            return CompactionResult(segment=None, checkpoints=0, lost_race=True)
        failpoint("store.compact.after_state")
        done = sorted({r.checkpoint.checkpoint_id for r in read} | set(leftovers))
        self._delete_dirs(done, listing)
        return CompactionResult(segment=name, checkpoints=len(read), deleted_dirs=len(done))

    def _land(self, state: SegmentState, read: list[_Loose]) -> tuple[str | None, list[_Loose]]:
        """Write a segment of ``read`` and replace ``state`` with it plus that segment (conditional write).
        Returns the segment's name and what it holds, or (None, []) if it was not added.

        When another compaction replaced the state first, the segment goes into the newer state instead, if
        that state only added or merged rows since (same lineage): concurrent folds (sealers of several
        processes keeping the tail short) then all land. Checkpoints a newer segment already holds are
        left out of a rewritten segment (from what was read: nothing is read again)."""
        base, pending, tries = state, read, 0
        while pending and tries <= _REBASES:
            name = new_segment_name(base.generation + 1)
            ref = self._write_segment(name, 0, pending)
            failpoint("store.compact.after_segment")
            ids = {r.checkpoint.checkpoint_id for r in pending}
            while tries <= _REBASES:
                tries += 1
                if self._replace_state(base, _successor(base, segments=(*base.segments, ref), retired=base.retired)):
                    return name, pending
                current = self._reader.segment_state()
                taken = self._taken_since(state, current, ids)
                if taken is None or taken:
                    self._deleter.delete_segments([name])
                if taken is None:
                    return None, []
                base = current
                if taken:
                    pending = [r for r in pending if r.checkpoint.checkpoint_id not in taken]
                    break
            else:
                self._deleter.delete_segments([name])
        return None, []

    def _taken_since(self, read: SegmentState, current: SegmentState, ids: set[str]) -> set[str] | None:
        """Which of ``ids`` the segments ``current`` added since ``read`` hold; None if ``current`` did more
        than add or merge rows (rows dropped by a discard, the state deleted by a clear: fold from scratch)."""
        if current.etag is None or not read.lineage or current.lineage != read.lineage:
            return None
        known = set(read.names)
        try:
            added = [self._reader.load_segment(n) for n in current.names if n not in known]
        except (CorruptCheckpointError, BlobNotFoundError):
            return None
        wanted = pa.array(sorted(ids), pa.string())
        taken: set[str] = set()
        for segment in added:
            held = segment.summary.column("checkpoint_id")
            taken.update(held.filter(pc.is_in(held, value_set=wanted)).to_pylist())
        return taken

    def _read_loose(self, checkpoint_id: str, keys: Sequence[str]) -> _Loose | None:
        """A loose checkpoint's manifest, files, keys and intents; None if it cannot be read whole (it stays loose)."""
        try:
            checkpoint = self._reader.manifest(checkpoint_id)
            if checkpoint is None:
                return None  # deleted meanwhile (another compaction covered it)
            files = self._reader.files_of([checkpoint])
            intents = [self._context.read_json(k) for k in keys if "/intents/" in k]
            key_table = self._keys_of(checkpoint)
        except (CorruptCheckpointError, BlobNotFoundError) as exc:
            log.warning("not compacting checkpoint %s of %s: %s", checkpoint_id, self._context.uri, exc)
            return None
        return _Loose(checkpoint, files, key_table, intents)

    def _keys_of(self, checkpoint: Checkpoint) -> pa.Table | None:
        if checkpoint.inline_keys:
            datas = [checkpoint.inline_keys]
        else:
            prefix = attempt_prefix(checkpoint.checkpoint_id)
            datas = [self._blobs.get(prefix + p)[0] for p in checkpoint.key_parts]
        if not datas:
            return None
        tables = []
        for data in datas:
            try:
                with ipc.open_stream(pa.BufferReader(data)) as reader:
                    tables.append(reader.read_all().select([KEY_COLUMN]))
            except (pa.ArrowInvalid, OSError, KeyError) as exc:
                raise CorruptCheckpointError(f"keys of checkpoint {checkpoint.checkpoint_id}: {exc}") from exc
        return pa.concat_tables(tables)

    def _write_segment(self, name: str, level: int, loose: Sequence[_Loose]) -> SegmentRef:
        keys = keys_table(
            [
                attributed_keys(r.keys, r.checkpoint.checkpoint_id, r.checkpoint.epoch)
                for r in loose
                if r.keys is not None and r.keys.num_rows
            ],
            None,
        )
        manifests = manifests_table([manifest_row(r.checkpoint, r.files, r.intents) for r in loose])
        return self._put_segment(name, level, manifests, keys)

    def _put_segment(self, name: str, level: int, manifests: pa.Table, keys: pa.Table) -> SegmentRef:
        key_bytes = keys_parquet_bytes(keys)
        manifest_bytes = parquet_bytes(manifests)
        self._blobs.put(keys_key(name), key_bytes, if_absent=True)
        self._blobs.put(manifests_key(name), manifest_bytes, if_absent=True)
        return SegmentRef(
            name=name,
            level=level,
            checkpoints=manifests.num_rows,
            keys=keys.num_rows,
            bytes=len(key_bytes) + len(manifest_bytes),
        )

    def _replace_state(self, old: SegmentState, new: SegmentState) -> bool:
        """Write ``new`` if the state object is still ``old`` (conditional write); False if another won."""
        try:
            if old.etag is None:
                self._blobs.put(STATE_KEY, dumps(new.to_json()), if_absent=True)
            else:
                self._blobs.put(STATE_KEY, dumps(new.to_json()), if_match=old.etag)
        except PreconditionFailedError:
            return False
        return True

    def _delete_dirs(self, ids: Sequence[str], listing: Mapping[str, list[str]]) -> None:
        keys = [k for i in ids for k in listing.get(i, [])]
        self._deleter.delete_loose_checkpoints(keys, after_batch=lambda: failpoint("store.compact.during_delete_loose"))

    # ------------------------------------------------------------------ segments -> a bigger segment

    def _merge_levels(
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
            self._delete_retired(state)
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
        loaded = [self._reader.load_segment(r.name) for r in group]
        manifests = pa.concat_tables([s.manifests for s in loaded]).combine_chunks()
        # Segments of empty checkpoints hold an empty key table of no particular type: leave them out.
        key_tables = [t for t in (self._segment_keys(s.name) for s in loaded) if t.num_rows]
        keys = pa.concat_tables(key_tables).combine_chunks() if key_tables else keys_table([], None)
        manifests, keys = _dedupe(manifests, keys, drop)
        name = new_segment_name(state.generation + 1)
        ref = self._put_segment(name, level, manifests, keys)
        names = {r.name for r in group}
        new_state = _successor(
            state,
            segments=(*tuple(r for r in state.segments if r.name not in names), ref),
            retired=(*state.retired, *sorted(names)),
            new_lineage=bool(drop),
        )
        if not self._replace_state(state, new_state):
            self._deleter.delete_segments([name])
            return None
        replaced = self._reader.segment_state()
        if delete_retired:
            replaced = self._delete_retired(replaced)
        return replaced

    def _segment_keys(self, name: str) -> pa.Table:
        key = keys_key(name)
        return read_table(self._blobs.get(key)[0], self._blobs.child_uri(key))

    def _delete_retired(self, state: SegmentState) -> SegmentState:
        """Delete the retired segments, then drop them from the state (a crash between: deleted again)."""
        self._deleter.delete_segments(list(state.retired))
        cleaned = _successor(state, segments=state.segments, retired=())
        if self._replace_state(state, cleaned):
            return self._reader.segment_state()
        return self._reader.segment_state()

    def rewrite_without(self, drop: frozenset[str]) -> bool:
        """One segment holding every row but ``drop`` replaces all segments (discard). False if a race was lost."""
        state = self._reader.segment_state()
        if not state.segments:
            return True
        level = max(r.level for r in state.segments)
        return self.merge(state, list(state.segments), level=level, delete_retired=True, drop=drop) is not None


def _successor(
    state: SegmentState, *, segments: tuple[SegmentRef, ...], retired: tuple[str, ...], new_lineage: bool = False
) -> SegmentState:
    """The state that replaces ``state``: next generation, same lineage unless rows are dropped or there
    was no state object (or one written before lineages)."""
    keep = state.lineage and state.etag is not None and not new_lineage
    return SegmentState(
        generation=state.generation + 1,
        segments=segments,
        retired=retired,
        updated_at=now(),
        lineage=state.lineage if keep else uuid.uuid4().hex,
    )


def _window(ids: list[str], limit: int | None) -> list[str]:
    """``ids``, or ``limit`` consecutive ones of them from a random start (wrapping round, so that every id
    is as likely to be taken), sorted."""
    if limit is None or len(ids) <= limit:
        return ids
    start = random.randrange(len(ids))
    return sorted((ids[start:] + ids[:start])[:limit])


def _covered(segments: Sequence[LoadedSegment]) -> dict[str, bool]:
    """Checkpoint id -> whether a segment holds it as committed."""
    covered: dict[str, bool] = {}
    for segment in segments:
        ids = segment.summary.column("checkpoint_id").to_pylist()
        statuses = segment.summary.column("status").to_pylist()
        for checkpoint_id, status in zip(ids, statuses, strict=True):
            covered[checkpoint_id] = covered.get(checkpoint_id, False) or status == "committed"
    return covered


def _one_key_type(loose: list[_Loose], segments: Sequence[LoadedSegment]) -> list[_Loose]:
    """``loose``, or nothing when its keys and the segments' are not all of one type: a key type that changed
    between runs is an error readers report (:class:`KeyTypeMismatchError`), and compaction leaves such a
    store as it is, so that nothing moves because of it."""
    types = {t for s in segments for t in s.summary.column("key_type").unique().to_pylist() if t}
    types |= {str(r.keys.schema.field(KEY_COLUMN).type) for r in loose if r.keys is not None and r.keys.num_rows}
    if len(types) > 1:
        log.warning("not compacting: the checkpoints hold keys of types %s", sorted(types))
        return []
    return loose


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


class BackgroundCompaction:
    """Compacts a store every ``interval`` seconds while a job runs, and once more when it ends.

    For the Spark driver: it sees every seal (executors' manifests, or its own for
    Spark's writer), so it keeps the loose manifests few and the next ``begin_epoch``,
    ``progress`` or commit reads a few segments. Best effort: a failure is logged,
    never raised (the job does not depend on it). Replaced segments are kept until a
    later ``begin_epoch`` or commit (this job's tasks may be reading them).
    """

    def __init__(
        self, compact: Callable[..., CompactionResult], *, interval: float = 10.0, min_loose: int = 500
    ) -> None:
        self._compact = compact
        self._interval = interval
        self._min_loose = min_loose
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ckpt-compaction", daemon=True)
        self._failing = False
        self.results: list[CompactionResult] = []

    def __enter__(self) -> BackgroundCompaction:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._once(1)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._once(self._min_loose)

    def _once(self, min_loose: int) -> None:
        try:
            failpoint("store.compact.background")
            result = self._compact(min_loose=min_loose, delete_retired=False)
        except Exception as exc:  # best effort: the job's outcome never depends on compaction
            if not self._failing:
                log.warning("compacting the checkpoint store failed (the job goes on): %s", exc)
            self._failing = True
            return
        self._failing = False
        if result.segment or result.merged:
            self.results.append(result)
