"""Reading the store's state: one consistent read of epochs, manifests, segments and the commit record.

:class:`StateReader` reads a :class:`~airflow_ckpt_provider.store.store_state.StoreState`
and holds the readers it is built from, each of one kind of object: ``segments``
(store/segment_reader.py), ``commits`` (store/commit_records.py), ``keys``
(store/key_reader.py) and ``files`` (store/file_reader.py). Sealed checkpoints are read
from the segments the state object names and from the loose manifests not compacted yet
(docs/store-api.md, "Segments").
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_ckpt_provider.store.catalog import Catalog
from airflow_ckpt_provider.store.commit_records import CommitRecordReader
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.epochs import EpochFiles, EpochLog
from airflow_ckpt_provider.store.errors import CorruptCheckpointError, corrupt_record
from airflow_ckpt_provider.store.file_reader import FileReader
from airflow_ckpt_provider.store.key_reader import KeyReader, key_sources
from airflow_ckpt_provider.store.layout import manifest_key, snapshot_prefix
from airflow_ckpt_provider.store.listing import checkpoint_records
from airflow_ckpt_provider.store.model import Checkpoint, CheckpointStatus, Epoch
from airflow_ckpt_provider.store.segment_reader import SegmentReader
from airflow_ckpt_provider.store.segments import checkpoints_of
from airflow_ckpt_provider.store.store_state import StoreState


class StateReader:
    """Reads manifests, snapshots, segments and the newest commit record into a :class:`StoreState`; one
    checkpoint; every done key. Its attributes read one kind of object each."""

    def __init__(self, context: StoreContext, epochs: EpochLog) -> None:
        self._context = context
        self._blobs = context.blobs
        self._epochs = epochs
        #: The state object and the segments it names (cached by name).
        self.segments = SegmentReader(context)
        #: The commit records.
        self.commits = CommitRecordReader(context)
        #: The keys objects of checkpoints, segments and snapshots.
        self.keys = KeyReader(context, self.segments)
        #: The output files of checkpoints.
        self.files = FileReader(context)

    @property
    def uri(self) -> str:
        return self._context.uri

    # ------------------------------------------------------------------ manifests

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
            raise corrupt_record(
                self._blobs.child_uri(key),
                f"is not a valid manifest ({exc!r})",
                "Run `airflow-ckpt check` and delete that checkpoint directory",
            ) from exc

    def snapshot(self, latest: Epoch | None) -> dict[str, Any] | None:
        """The snapshot valid for ``latest``: the one its own commit compacted, else its base snapshot.

        Compaction writes ``snapshots/{n}`` for the committed epoch *n* and the next
        epoch records it as ``base_snapshot``, so no listing is needed (reads stay at
        a handful of requests however many runs the store has seen). None once ``delete_after_success``
        followed the latest epoch's commit (it deletes the snapshots too).
        """
        if latest is None or latest.keys_deleted:
            return None
        for number in (latest.number, latest.base_snapshot):
            if number is None:
                continue
            key = snapshot_prefix(number) + "manifest.json"
            found = self._blobs.get_if_exists(key)
            if found is not None:
                data = self._context.parse_json(key, found[0])
                if data.get("attributed") is not True:
                    raise corrupt_record(
                        self._blobs.child_uri(key),
                        "does not record which checkpoint each of its keys came from, a snapshot format no "
                        "release of airflow-ckpt-provider wrote",
                        "Clear the store (`airflow-ckpt clear`) and run the job again",
                    )
                return data
        return None

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
            warm = side.submit(self.segments.warm)
            epochs_read = side.submit(self._latest_epoch, with_status)
            commit_read = side.submit(self.commits.newest_commit_record) if with_commits else None
            found = self._loose_manifests(tolerate_corrupt, keep_inline, with_attempts, keep_files)
            loose, etags, no_manifest, corrupt, ids = found
            warm.result()
            segment_state, segments, corrupt_segments = self.segments.load_all(tolerate_corrupt=tolerate_corrupt)
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

    # ------------------------------------------------------------------ one checkpoint, every key

    def checkpoint(self, checkpoint_id: str) -> Checkpoint | None:
        """One sealed checkpoint (its loose manifest, else its segment row), committed per the newest commit record."""
        manifest = self.manifest(checkpoint_id)
        if manifest is None:
            manifest = self._segment_checkpoint(checkpoint_id)
        if manifest is None or manifest.status is CheckpointStatus.COMMITTED:
            return manifest
        record = self.commits.newest_commit_record()
        if record is not None and checkpoint_id in record["checkpoint_ids"]:
            return dataclasses.replace(
                manifest, status=CheckpointStatus.COMMITTED, committed_at=str(record.get("created_at"))
            )
        return manifest

    def _segment_checkpoint(self, checkpoint_id: str) -> Checkpoint | None:
        _, segments, _ = self.segments.load_all()
        for segment in segments:
            rows = segment.manifests.filter(pc.equal(segment.manifests.column("checkpoint_id"), checkpoint_id))
            if rows.num_rows:
                return checkpoints_of(rows.slice(0, 1))[0]
        return None

    def done_keys(self) -> pa.Table:
        """Every done key (column ``key``). The keys objects of the segments the state object names are
        fetched and decoded while the state is read (the listing of loose manifests is the longest
        part of that read); a segment is immutable under its name, so what was fetched early is what
        a later read would get, and only the segments the state read names are used."""
        with ThreadPoolExecutor(max_workers=1) as side:
            warm = side.submit(self.keys.warm_segment_keys)
            # The manifests carry small checkpoints' keys: keep them rather than fetch them twice.
            state = self.read(
                with_status=False, with_commits=False, keep_inline=True, with_attempts=False, keep_files=False
            )
            warmed = warm.result()
        return self.keys.read_keys(key_sources(state), warmed)
