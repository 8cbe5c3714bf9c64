"""Reading the store's state: which checkpoints are sealed, which are valid, and their keys and files.

Validity (docs/design.md, invariant 3): the valid checkpoints are the base of the
latest epoch plus those sealed in it, one per partition; the newest commit record is
the authority on which of them are committed; a snapshot holds keys compacted by
``retain``. Sealed checkpoints are read from the segments the state object names and
from the loose manifests not compacted yet (docs/store-api.md, "Segments").
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from airflow_ckpt_provider.store.blobs.base import BlobNotFoundError
from airflow_ckpt_provider.store.catalog import LOOSE, Catalog, LoadedSegment
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.deletion_guard import canonical_uri
from airflow_ckpt_provider.store.epochs import EpochBase, EpochFiles, EpochLog
from airflow_ckpt_provider.store.errors import CorruptCheckpointError, InvalidArgumentError
from airflow_ckpt_provider.store.keys import KEY_COLUMN
from airflow_ckpt_provider.store.layout import COMMIT_RE, attempt_prefix, manifest_key, snapshot_prefix
from airflow_ckpt_provider.store.listing import checkpoint_records
from airflow_ckpt_provider.store.model import Checkpoint, CheckpointStatus, Epoch, FileMetadata, KeySource
from airflow_ckpt_provider.store.reprocess.records import retracted_paths
from airflow_ckpt_provider.store.rerun import committed_output
from airflow_ckpt_provider.store.segments import (
    EMPTY_STATE,
    STATE_KEY,
    SUMMARY_COLUMNS,
    SegmentState,
    checkpoints_of,
    intent_records,
    manifests_key,
    read_manifests,
)
from airflow_ckpt_provider.store.segments import keys_key as segment_keys_key
from airflow_ckpt_provider.store.segments import read_keys as read_segment_keys
from airflow_ckpt_provider.store.segments import read_table as read_segment_table

#: How often a reader reads the state object again when a segment it names was replaced meanwhile.
_SEGMENT_RETRIES = 3
#: Segments kept in memory per store (immutable, so a process that reads the state often reads each once).
_SEGMENT_CACHE_SIZE = 64


@dataclass
class StoreState:
    """One consistent read of the store's metadata.

    ``catalog`` holds every sealed checkpoint (segments and loose manifests) as
    columns; ``valid`` and ``manifests`` build :class:`Checkpoint` records from it
    on first use (callers on hot paths use the catalog and ``valid_mask``).
    """

    epochs: dict[int, Epoch]
    latest: Epoch | None
    catalog: Catalog
    unsealed: list[str]
    corrupt: dict[str, str]
    snapshot: dict[str, Any] | None
    degraded_epochs: set[int]
    etags: dict[str, str] = field(default_factory=dict)
    commit_record: dict[str, Any] | None = None
    segment_state: SegmentState = EMPTY_STATE
    #: Listed checkpoint directories whose checkpoint a segment holds (a compaction not finished yet).
    covered_dirs: list[str] = field(default_factory=list)
    #: Every checkpoint directory listed (sealed, unsealed, corrupt, covered).
    listed_dirs: list[str] = field(default_factory=list)
    #: Segments the state object names that cannot be read (only with ``tolerate_corrupt``): name -> error.
    corrupt_segments: dict[str, str] = field(default_factory=dict)
    #: Whether ``attempts/`` was listed: else ``unsealed`` and ``listed_dirs`` miss the attempts of this
    #: version that never sealed. Whoever deletes directories requires it (``require_attempts``).
    attempts_listed: bool = True
    #: Keys of the skip audits runs recorded, by epoch (store/input_audit.py): listed with the epochs.
    skip_audits: dict[int, list[str]] = field(default_factory=dict)

    def require_attempts(self) -> None:
        """Raise if this read did not list the attempts (a caller about to delete or audit directories)."""
        if not self.attempts_listed:  # pragma: no cover - a caller's bug, not a user's input
            raise RuntimeError("this state was read with_attempts=False: read it again with the attempts listed")

    @property
    def folded(self) -> set[str]:
        """Ids of the checkpoints whose keys the snapshot holds (their manifests may be gone)."""
        return set(self.snapshot["checkpoint_ids"]) if self.snapshot else set()

    @cached_property
    def valid_mask(self) -> np.ndarray:
        return self.catalog.valid_mask(self.latest, self.folded)

    @cached_property
    def valid(self) -> list[Checkpoint]:
        """The valid checkpoints: base of the latest epoch + sealed in it, one per partition."""
        return self.catalog.checkpoints(self.valid_mask)

    @cached_property
    def valid_ids(self) -> list[str]:
        ids: list[str] = self.catalog.table.column("checkpoint_id").filter(pa.array(self.valid_mask)).to_pylist()
        return ids

    @cached_property
    def manifests(self) -> dict[str, Checkpoint]:
        """Every sealed checkpoint (valid or not) by id. Builds one record per checkpoint: avoid on hot paths."""
        return {c.checkpoint_id: c for c in self.catalog.checkpoints()}

    def sealed_ids(self) -> set[str]:
        return self.catalog.id_set()

    def epoch_base(self) -> EpochBase:
        """What the epoch after ``latest`` builds on: the valid checkpoints (the folded ones are not valid,
        the snapshot holds their keys) and the snapshot, counted as ``progress()`` counts them, so a submit
        need not read every manifest again to say what it skips."""
        mask = self.valid_mask
        return EpochBase(
            checkpoint_ids=tuple(sorted(self.valid_ids)),
            snapshot=None if self.snapshot is None else int(self.snapshot["snapshot"]),
            keys=(int(self.snapshot["num_keys"]) if self.snapshot else 0) + self.catalog.sum("num_keys", mask),
            rows=self.catalog.sum("num_rows", mask),
        )

    def is_sealed(self, checkpoint_id: str) -> bool:
        return checkpoint_id in self.catalog.id_set()


class StateReader:
    """Reads manifests, snapshots and commit records into a :class:`StoreState`, and keys and files from it."""

    def __init__(self, context: StoreContext, epochs: EpochLog) -> None:
        self._context = context
        self._blobs = context.blobs
        self._epochs = epochs
        self._segment_cache: dict[str, LoadedSegment] = {}
        self._cache_lock = threading.Lock()

    @property
    def uri(self) -> str:
        return self._context.uri

    # ------------------------------------------------------------------ records

    def manifest(self, checkpoint_id: str) -> Checkpoint | None:
        found = self.manifest_and_etag(checkpoint_id)
        return None if found is None else found[0]

    def manifest_and_etag(
        self, checkpoint_id: str, *, keep_inline: bool = True, keep_files: bool = True
    ) -> tuple[Checkpoint, str] | None:
        """The manifest and its etag, or None if the checkpoint is not sealed (no manifest, or an empty one).

        ``keep_inline=False``: ``inline_keys`` is ``b""`` when the manifest carries keys (not decoded);
        ``keep_files=False``: ``inline_files`` is None (the files are read from the parts if asked):
        what a reader of keys or counts skips decoding."""
        key = manifest_key(checkpoint_id)
        found = self._blobs.get_if_exists(key)
        if found is None or not found[0]:
            # Every manifest we write is a JSON object, so an empty one is an upload a cut connection left
            # behind on a server whose PUT is not atomic (SeaweedFS keeps the empty object). It was never
            # sealed: readers skip it, and the commit deletes it with the rest of its attempt.
            return None
        data = self._context.parse_json(key, found[0])
        if not keep_inline and data.get("inline_keys") is not None:
            data["inline_keys"] = ""  # b"" once decoded: inline, not kept
        if not keep_files:
            data.pop("inline_files", None)
        try:
            return Checkpoint.from_json(data), found[1]
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptCheckpointError(
                f"{self._blobs.child_uri(key)} is not a valid manifest ({exc!r}); nothing was changed. "
                "Run `airflow-ckpt check` and delete that checkpoint directory",
                reason="corrupt",
            ) from exc

    def snapshot(self, latest: Epoch | None) -> dict[str, Any] | None:
        """The snapshot valid for ``latest``: the one its own commit compacted, else its base snapshot.

        Compaction writes ``snapshots/{n}`` for the committed epoch *n* and the next
        epoch records it as ``base_snapshot``, so no listing is needed (reads stay at
        a handful of requests however many runs the store has seen).
        """
        if latest is None:
            return None
        for number in (latest.number, latest.base_snapshot):
            if number is None:
                continue
            key = snapshot_prefix(number) + "manifest.json"
            found = self._blobs.get_if_exists(key)
            if found is not None:
                return self._context.parse_json(key, found[0])
        return None

    def _commit_record_keys(self) -> list[str]:
        """The commit records, oldest first. An empty one is a commit whose record upload was cut short (a
        server whose PUT is not atomic) and whose process died: it committed nothing, and the commit's retry
        takes its place (BlobStore.put)."""
        return sorted(i.key for i in self._blobs.list("commits/") if COMMIT_RE.search(i.key) and i.size)

    def newest_commit_record(self) -> dict[str, Any] | None:
        keys = self._commit_record_keys()
        return self._context.read_json(keys[-1]) if keys else None

    def commit_records(self) -> list[dict[str, Any]]:
        """Every commit record of this store, oldest first."""
        return list(self._context.map(self._context.read_json, self._commit_record_keys()))

    def committed_paths(self, records: Sequence[Mapping[str, Any]] | None = None) -> set[str]:
        """Every output path the commit records of this store make authoritative (canonical URIs): each
        record's files, minus what a later commit of the same job replaced (store/rerun.py) and what a
        reprocess retracted. ``records``: :meth:`commit_records` when the caller has read them."""
        if records is None:
            records = self.commit_records()
        committed = committed_output(records, canonical_uri)
        # A reprocess or rewind took these out of the committed output (docs/reprocess.md).
        return committed - {canonical_uri(p) for p in retracted_paths(self._blobs, self._context.map)}

    def commit_output_roots(self) -> list[str]:
        """The output roots the commits of this store were allowed to sweep. Each commit copies into
        its record the roots its guard allowed, which include every earlier commit record's: so the
        newest record holds them all (one read), and they outlive the epoch records retention prunes."""
        record = self.newest_commit_record()
        value = record.get("output_roots") if record else None
        return [str(r) for r in value if isinstance(r, str)] if isinstance(value, list) else []

    # ------------------------------------------------------------------ the state

    def read(
        self,
        *,
        tolerate_corrupt: bool = False,
        with_status: bool = True,
        with_commits: bool = True,
        keep_inline: bool = False,
        with_attempts: bool = True,
        keep_files: bool = True,
    ) -> StoreState:
        """Read the store's metadata once: epochs, loose manifests, then the state object and its segments.

        Loose manifests are listed and read *before* the state object: a compaction
        deletes a loose manifest only after a state naming its segment was written,
        so every checkpoint is seen in one place or the other.

        ``with_status=False`` skips the latest epoch's end and expected-count records and
        ``with_commits=False`` the commit record (validity depends on neither): fewer
        requests for key readers. ``keep_inline`` keeps the manifests' inline key copies
        (the commit needs every key; other callers drop them to save memory).
        ``keep_files=False`` does not decode the loose manifests' inline file lists (a state's
        files are then read from their parts if asked for: for readers of keys and counts).
        ``with_attempts=False`` does not list ``attempts/``: ``unsealed`` and ``listed_dirs``
        then hold only directories of stores written before manifest format 2. Validity,
        keys and counts do not depend on it; what deletes or audits must list them
        (``StoreState.attempts_listed``).
        """
        # The epoch records, the snapshot and the commit record are read beside the checkpoints (fewer round
        # trips). The segments the state object names now are fetched beside the listing too: that read only
        # fills the segment cache, the state object is read again once the listing is done (the order that
        # makes the read consistent, see above), and its segments then come from the cache unless a
        # compaction replaced them meanwhile.
        with ThreadPoolExecutor(max_workers=3) as side:
            warm = side.submit(self._warm_segments)
            epochs_read = side.submit(self._latest_epoch, with_status)
            commit_read = side.submit(self.newest_commit_record) if with_commits else None
            found = self._loose_manifests(tolerate_corrupt, keep_inline, with_attempts, keep_files)
            loose, etags, no_manifest, corrupt, ids = found
            warm.result()
            segment_state, segments, corrupt_segments = self.segments(tolerate_corrupt=tolerate_corrupt)
            files, latest, snapshot = epochs_read.result()
            commit_record = commit_read.result() if commit_read is not None else None
        epochs: dict[int, Epoch] = {} if latest is None else {latest.number: latest}
        catalog = Catalog(segments, loose)
        listed = [*no_manifest, *loose]
        covered = {i for i, held in zip(listed, catalog.held_by_segments(listed), strict=True) if held}
        unsealed = [i for i in no_manifest if i not in covered]
        covered_dirs = sorted(covered)
        if commit_record is not None:
            # The newest commit record is the authority on what is committed (one atomic write).
            catalog.with_committed(commit_record["checkpoint_ids"], str(commit_record.get("created_at")))
        return StoreState(
            epochs=epochs,
            latest=latest,
            catalog=catalog,
            unsealed=unsealed,
            corrupt=corrupt,
            snapshot=snapshot,
            degraded_epochs=files.degraded,
            skip_audits=files.skip_audits,
            etags=etags,
            commit_record=commit_record,
            segment_state=segment_state,
            covered_dirs=covered_dirs,
            listed_dirs=list(ids),
            corrupt_segments=corrupt_segments,
            attempts_listed=with_attempts,
        )

    def _latest_epoch(self, with_status: bool) -> tuple[EpochFiles, Epoch | None, dict[str, Any] | None]:
        files = self._epochs.list_files()
        if not with_status:
            files = dataclasses.replace(files, ends={}, expected={})
        latest = self._epochs.load(max(files.records), files) if files.records else None
        return files, latest, self.snapshot(latest)

    def _loose_manifests(
        self, tolerate_corrupt: bool, keep_inline: bool, with_attempts: bool, keep_files: bool = True
    ) -> tuple[dict[str, Checkpoint], dict[str, str], list[str], dict[str, str], list[str]]:
        """The sealed manifests under ``checkpoints/`` (with etags), the directories without one, the corrupt
        ones, and every directory listed.

        One recursive listing of ``checkpoints/`` says which checkpoints have a manifest: only those are
        read. A job's failed attempts (a thousand in a job of 100,000 tasks) leave their directories under
        ``attempts/``, listed only ``with_attempts`` (store/listing.py).
        """
        records = checkpoint_records(self._blobs, attempts=with_attempts)
        sealed = {i: manifest_key(i) in keys for i, keys in records.items()}
        ids = sorted(sealed)
        corrupt: dict[str, str] = {}

        def load(checkpoint_id: str) -> tuple[str, tuple[Checkpoint, str] | None, str | None]:
            try:
                found = self.manifest_and_etag(checkpoint_id, keep_inline=keep_inline, keep_files=keep_files)
                return checkpoint_id, found, None
            except CorruptCheckpointError as exc:
                if not tolerate_corrupt:
                    raise
                return checkpoint_id, None, str(exc)

        loose: dict[str, Checkpoint] = {}
        etags: dict[str, str] = {}
        no_manifest = [i for i in ids if not sealed[i]]
        for checkpoint_id, found, error in self._context.map(load, [i for i in ids if sealed[i]]):
            if error is not None:
                corrupt[checkpoint_id] = error
            elif found is None:
                no_manifest.append(checkpoint_id)
            else:
                loose[checkpoint_id], etags[checkpoint_id] = found
        return loose, etags, no_manifest, corrupt, ids

    # ------------------------------------------------------------------ segments

    def _warm_segments(self) -> None:
        """Load the segments the state object names into the cache; errors are left to the real read."""
        with contextlib.suppress(Exception):
            self.segments()

    def segment_state(self) -> SegmentState:
        """The state object (with its etag), or an empty state when the store has none (an older layout)."""
        found = self._blobs.get_if_exists(STATE_KEY)
        if found is None:
            return EMPTY_STATE
        data = self._context.parse_json(STATE_KEY, found[0])
        try:
            return SegmentState.from_json(data, found[1])
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptCheckpointError(
                f"{self._blobs.child_uri(STATE_KEY)} is not a valid state object ({exc!r}); nothing was changed. "
                "Run `airflow-ckpt check`",
                reason="corrupt",
            ) from exc

    def segments(self, *, tolerate_corrupt: bool = False) -> tuple[SegmentState, list[LoadedSegment], dict[str, str]]:
        """The state object, every segment it names (immutable: cached by name) and, with
        ``tolerate_corrupt``, the segments that cannot be read (name -> error) instead of raising.

        A segment a newer compaction replaced and deleted meanwhile is not an error: the
        state object is read again (the rows it held are in the replacing segment).
        """
        missing: BlobNotFoundError | None = None
        for _ in range(_SEGMENT_RETRIES):
            state = self.segment_state()

            def load(name: str) -> LoadedSegment | str:
                try:
                    loaded = self.load_segment(name)
                    if tolerate_corrupt:  # who reports damage (check, cleanup) decodes every column
                        loaded.manifests  # noqa: B018
                    return loaded
                except CorruptCheckpointError as exc:
                    if not tolerate_corrupt:
                        raise
                    return str(exc)

            try:
                loaded = self._context.map(load, list(state.names))
            except BlobNotFoundError as exc:
                missing = exc
                continue
            corrupt = {n: r for n, r in zip(state.names, loaded, strict=True) if isinstance(r, str)}
            return state, [r for r in loaded if not isinstance(r, str)], corrupt
        message = (
            f"{self._blobs.child_uri(STATE_KEY)} names a segment that does not exist ({missing}); nothing was "
            "changed. Run `airflow-ckpt check`"
        )
        if tolerate_corrupt:
            return self.segment_state(), [], {"?": message}
        raise CorruptCheckpointError(message, reason="corrupt")

    def load_segment(self, name: str) -> LoadedSegment:
        with self._cache_lock:
            cached = self._segment_cache.get(name)
        if cached is not None:
            return cached
        key = manifests_key(name)
        data, _ = self._blobs.get(key)
        uri = self._blobs.child_uri(key)
        loaded = LoadedSegment(name, read_manifests(data, uri, SUMMARY_COLUMNS), data, uri)
        with self._cache_lock:
            self._segment_cache[name] = loaded
            while len(self._segment_cache) > _SEGMENT_CACHE_SIZE:
                self._segment_cache.pop(next(iter(self._segment_cache)))
        return loaded

    def checkpoint(self, checkpoint_id: str) -> Checkpoint | None:
        """One sealed checkpoint (its loose manifest, else its segment row), committed per the newest commit record."""
        manifest = self.manifest(checkpoint_id)
        if manifest is None:
            manifest = self._segment_checkpoint(checkpoint_id)
        if manifest is None or manifest.status is CheckpointStatus.COMMITTED:
            return manifest
        record = self.newest_commit_record()
        if record is not None and checkpoint_id in record["checkpoint_ids"]:
            return dataclasses.replace(
                manifest, status=CheckpointStatus.COMMITTED, committed_at=str(record.get("created_at"))
            )
        return manifest

    def _segment_checkpoint(self, checkpoint_id: str) -> Checkpoint | None:
        _, segments, _ = self.segments()
        for segment in segments:
            rows = segment.manifests.filter(pc.equal(segment.manifests.column("checkpoint_id"), checkpoint_id))
            if rows.num_rows:
                return checkpoints_of(rows.slice(0, 1))[0]
        return None

    # ------------------------------------------------------------------ keys

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
            raise CorruptCheckpointError(
                f"{self._blobs.child_uri(source.key)} is corrupt or truncated ({exc}); nothing was changed. "
                "Run `airflow-ckpt check`; discard that checkpoint to reprocess its keys",
                reason="corrupt",
            ) from exc
        if KEY_COLUMN not in table.column_names:
            raise CorruptCheckpointError(
                f"{self._blobs.child_uri(source.key)} has no '{KEY_COLUMN}' column", reason="corrupt"
            )
        return table.select([KEY_COLUMN])

    def done_keys(self) -> pa.Table:
        """Every done key (column ``key``). The keys objects of the segments the state object names are
        fetched and decoded while the state is read (the listing of loose manifests is the longest
        part of that read); a segment is immutable under its name, so what was fetched early is what
        a later read would get, and only the segments the state read names are used."""
        with ThreadPoolExecutor(max_workers=1) as side:
            warm = side.submit(self._warm_segment_keys)
            # The manifests carry small checkpoints' keys: keep them rather than fetch them twice.
            state = self.read(
                with_status=False, with_commits=False, keep_inline=True, with_attempts=False, keep_files=False
            )
            warmed = warm.result()
        return self.read_keys(key_sources(state), warmed)

    def _warm_segment_keys(self) -> dict[str, tuple[bytes, pa.Table]]:
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
            names = list(self.segment_state().names)
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
        types = {str(t.schema.field(KEY_COLUMN).type) for t in tables}
        if len(types) > 1:
            raise InvalidArgumentError(
                f"the checkpoints of {self._context.uri} hold keys of different types {sorted(types)}: the key "
                "column changed type between runs. Cast it back to the earlier type, or clear the store to start over",
                reason="key_type_mismatch",
            )
        if not tables:
            return pa.table({KEY_COLUMN: pa.array([], pa.string())})
        return pa.concat_tables(tables)

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

    # ------------------------------------------------------------------ files

    def files_of(self, checkpoints: Sequence[Checkpoint]) -> list[FileMetadata]:
        """The output files of ``checkpoints`` (inline in the manifest, else from its file parts)."""
        return [f for files in self._files_per_checkpoint(checkpoints) for f in files]

    def files_by_checkpoint(self, checkpoints: Sequence[Checkpoint]) -> dict[str, list[FileMetadata]]:
        """The output files of each of ``checkpoints``, by id (one pass for all of them)."""
        ordered = list(checkpoints)
        return {c.checkpoint_id: files for c, files in zip(ordered, self._files_per_checkpoint(ordered), strict=True)}

    def _files_per_checkpoint(self, checkpoints: Sequence[Checkpoint]) -> list[list[FileMetadata]]:
        """Each checkpoint's files, in order. Inline lists are copied here; only the checkpoints whose files
        are in parts are read, on the context's threads (a commit of 100,000 compacted checkpoints spent 2 s
        starting a thread pass per checkpoint for files it already held)."""

        def load(checkpoint: Checkpoint) -> list[FileMetadata]:
            files: list[FileMetadata] = []
            for part in checkpoint.file_parts:
                key = attempt_prefix(checkpoint.checkpoint_id) + part
                try:
                    data, _ = self._blobs.get(key)
                except BlobNotFoundError:
                    raise CorruptCheckpointError(
                        f"{self._blobs.child_uri(key)} is named by its manifest but missing; nothing was "
                        "changed. Run `airflow-ckpt check`",
                        reason="corrupt",
                    ) from None
                try:
                    files.extend(FileMetadata.from_json(item) for item in json.loads(data))
                except (ValueError, KeyError, TypeError) as exc:
                    raise CorruptCheckpointError(
                        f"{self._blobs.child_uri(key)} is corrupt ({exc!r})", reason="corrupt"
                    ) from exc
            return files

        ordered = list(checkpoints)
        out: list[list[FileMetadata]] = [list(c.inline_files or ()) for c in ordered]
        in_parts = [i for i, c in enumerate(ordered) if c.inline_files is None]
        for index, files in zip(in_parts, self._context.map(load, [ordered[i] for i in in_parts]), strict=True):
            out[index] = files
        return out


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


def segment_intents(state: StoreState, skip: set[str]) -> list[dict[str, Any]]:
    """The intent records segments carry for their checkpoints not in ``skip`` (their directories are gone)."""
    records: list[dict[str, Any]] = []
    catalog = state.catalog
    wanted = ~catalog.mask_of(skip) if skip else np.ones(len(catalog), dtype=bool)
    for index, segment in enumerate(catalog.segments):
        _, rows = catalog.segment_rows(index, wanted)
        if len(rows):
            records.extend(intent_records(segment.manifests.take(pa.array(rows))))
    return records
