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
checkpoints): :mod:`~airflow_ckpt_provider.store.segment_merge`, which also writes the
segments and the state object for both. Replaced segments are deleted at once, or
(``delete_retired=False``, while a job may be reading them) named as retired and deleted
by a later compaction.
"""

from __future__ import annotations

import logging
import random
import threading
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
from airflow_ckpt_provider.store.errors import CorruptCheckpointError
from airflow_ckpt_provider.store.keys import KEY_COLUMN
from airflow_ckpt_provider.store.layout import attempt_prefix, manifest_key
from airflow_ckpt_provider.store.listing import checkpoint_records
from airflow_ckpt_provider.store.model import Checkpoint, FileMetadata
from airflow_ckpt_provider.store.segment_merge import MERGE_FANIN, SegmentMerger, put_segment, replace_state
from airflow_ckpt_provider.store.segments import (
    SegmentRef,
    SegmentState,
    attributed_keys,
    keys_table,
    manifest_row,
    manifests_table,
    new_segment_name,
)
from airflow_ckpt_provider.store.state import StateReader

log = logging.getLogger(__name__)

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
        #: Merges segments into bigger ones (:mod:`~airflow_ckpt_provider.store.segment_merge`).
        self.merger = SegmentMerger(context.blobs, reader, deleter)

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
        state = self._reader.segments.segment_state()
        segments = self._context.map(self._reader.segments.load_segment, list(state.names))
        covered = _covered(segments)
        listing = self._listing() if limit is None else checkpoint_records(self._blobs, attempts=False)
        sealed = sorted(i for i, keys in listing.items() if manifest_key(i) in keys)
        loose = [i for i in sealed if i not in covered]
        # The whole tail counts, not the batch ``limit`` takes.
        loose_ids = _window(loose, limit) if len(loose) >= min_loose else []
        leftovers = _window(sorted(i for i in listing if i in covered), limit)
        if limit is not None:
            listing = self._attempt_listing(listing, [*loose_ids, *leftovers])
        result = CompactionResult(segment=None, checkpoints=0)
        if loose_ids:
            result = self._fold_loose(state, segments, loose_ids, listing, leftovers)
            if result.lost_race:
                return result
            state = self._reader.segments.segment_state()
        elif leftovers:
            self._delete_dirs(leftovers, listing)
            result = CompactionResult(segment=None, checkpoints=0, deleted_dirs=len(leftovers))
        if merge:
            max_rows = None if limit is None else MERGE_FANIN * limit
            merged = self.merger.merge_levels(state, delete_retired=delete_retired, max_rows=max_rows)
            result = CompactionResult(result.segment, result.checkpoints, merged, result.deleted_dirs, lost_race=False)
        elif delete_retired and state.retired:
            self.merger.delete_retired(state)
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
                successor = base.successor(segments=(*base.segments, ref), retired=base.retired)
                if replace_state(self._blobs, base, successor):
                    return name, pending
                current = self._reader.segments.segment_state()
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
            added = [self._reader.segments.load_segment(n) for n in current.names if n not in known]
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
            files = self._reader.files.files_of([checkpoint])
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
                raise CorruptCheckpointError(
                    f"keys of checkpoint {checkpoint.checkpoint_id}: {exc}", reason="corrupt"
                ) from exc
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
        return put_segment(self._blobs, name, level, manifests, keys)

    def _delete_dirs(self, ids: Sequence[str], listing: Mapping[str, list[str]]) -> None:
        keys = [k for i in ids for k in listing.get(i, [])]
        self._deleter.delete_loose_checkpoints(keys, after_batch=lambda: failpoint("store.compact.during_delete_loose"))

    # ------------------------------------------------------------------ segments -> a bigger segment (segment_merge.py)

    def rewrite_without(self, drop: frozenset[str]) -> bool:
        """One segment holding every row but ``drop`` replaces all segments (discard). False if a race was lost."""
        return self.merger.rewrite_without(drop)


def _window(ids: list[str], limit: int | None) -> list[str]:
    """``ids``, or ``limit`` consecutive ones of them from a random start (wrapping round, so that every id
    is as likely to be taken), sorted."""
    if limit is None or len(ids) <= limit:
        return ids
    start = random.randrange(len(ids))
    return sorted((ids[start:] + ids[:start])[:limit])


def _covered(segments: Sequence[LoadedSegment]) -> set[str]:
    """The checkpoints the segments hold."""
    return {i for segment in segments for i in segment.summary.column("checkpoint_id").to_pylist()}


def _one_key_type(loose: list[_Loose], segments: Sequence[LoadedSegment]) -> list[_Loose]:
    """``loose``, or nothing when its keys and the segments' are not all of one type: a key type that changed
    between runs is an error readers report (:class:`InvalidArgumentError` (``key_type_mismatch``)), and compaction
    leaves such a
    store as it is, so that nothing moves because of it."""
    types = {t for s in segments for t in s.summary.column("key_type").unique().to_pylist() if t}
    types |= {str(r.keys.schema.field(KEY_COLUMN).type) for r in loose if r.keys is not None and r.keys.num_rows}
    if len(types) > 1:
        log.warning("not compacting: the checkpoints hold keys of types %s", sorted(types))
        return []
    return loose


class BackgroundCompaction:
    """Compacts a store every ``interval`` seconds while a job runs, and once more when it ends, each time
    only when at least ``min_loose`` manifests are loose.

    For the Spark driver: it sees every seal (executors' manifests, or its own for
    Spark's writer), so it keeps the loose manifests of a big write few. A write that
    leaves fewer loose is not folded at its end: the job's executors would wait on the
    driver for it (1.9 s at 48 checkpoints of 120,000 keys), while readers read a few
    hundred loose manifests in milliseconds, the sealers keep the tail under its bound
    (store/tail.py) and the commit folds everything first anyway. Best effort: a
    failure is logged, never raised (the job does not depend on it). Replaced segments
    are kept until a later ``begin_epoch`` or commit (this job's tasks may be reading them).
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
        self._once(self._min_loose)

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
