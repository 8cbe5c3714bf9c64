"""Reading the store's state: which checkpoints are sealed, which are valid, and their keys and files.

Validity (docs/store-api.md, "Invariants" 3): the valid checkpoints are the base of the
latest epoch plus those sealed in it, one per partition; the newest commit record is
the authority on which of them are committed; a snapshot holds keys compacted by
``retain``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from airflow_ckpt_provider.store.blobs.base import BlobNotFoundError
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.deletion_guard import canonical_uri
from airflow_ckpt_provider.store.epochs import EpochLog
from airflow_ckpt_provider.store.errors import CorruptCheckpointError, KeyTypeMismatchError
from airflow_ckpt_provider.store.keys import KEY_COLUMN
from airflow_ckpt_provider.store.layout import COMMIT_RE, manifest_key, snapshot_prefix
from airflow_ckpt_provider.store.model import Checkpoint, CheckpointStatus, Epoch, FileMetadata, KeySource
from airflow_ckpt_provider.store.reprocess.records import retracted_paths


@dataclass
class StoreState:
    """One consistent read of the store's metadata."""

    epochs: dict[int, Epoch]
    latest: Epoch | None
    manifests: dict[str, Checkpoint]
    unsealed: list[str]
    corrupt: dict[str, str]
    valid: list[Checkpoint]
    snapshot: dict[str, Any] | None
    degraded_epochs: set[int]
    etags: dict[str, str] = field(default_factory=dict)
    commit_record: dict[str, Any] | None = None

    @property
    def folded(self) -> set[str]:
        """Ids of the checkpoints whose keys the snapshot holds (their manifests may be gone)."""
        return set(self.snapshot["checkpoint_ids"]) if self.snapshot else set()


class StateReader:
    """Reads manifests, snapshots and commit records into a :class:`StoreState`, and keys and files from it."""

    def __init__(self, context: StoreContext, epochs: EpochLog) -> None:
        self._context = context
        self._blobs = context.blobs
        self._epochs = epochs

    @property
    def uri(self) -> str:
        return self._context.uri

    # ------------------------------------------------------------------ records

    def manifest(self, checkpoint_id: str) -> Checkpoint | None:
        found = self.manifest_and_etag(checkpoint_id)
        return None if found is None else found[0]

    def manifest_and_etag(self, checkpoint_id: str) -> tuple[Checkpoint, str] | None:
        key = manifest_key(checkpoint_id)
        found = self._blobs.get_if_exists(key)
        if found is None:
            return None
        data = self._context.parse_json(key, found[0])
        try:
            return Checkpoint.from_json(data), found[1]
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptCheckpointError(
                f"{self._blobs.child_uri(key)} is not a valid manifest ({exc!r}); nothing was changed. "
                "Run `airflow-ckpt check` and delete that checkpoint directory"
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

    def newest_commit_record(self) -> dict[str, Any] | None:
        keys = sorted(i.key for i in self._blobs.list("commits/") if COMMIT_RE.search(i.key))
        return self._context.read_json(keys[-1]) if keys else None

    def committed_paths(self) -> set[str]:
        """Every output path any commit record of this store names (canonical URIs)."""
        keys = [i.key for i in self._blobs.list("commits/") if COMMIT_RE.search(i.key)]
        records = self._context.map(self._context.read_json, keys)
        committed = {canonical_uri(str(f["path"])) for record in records for f in record.get("files", [])}
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
    ) -> StoreState:
        """Read the store's metadata once.

        ``with_status=False`` skips the latest epoch's end and expected-count records and
        ``with_commits=False`` the commit record (validity depends on neither): fewer
        requests for key readers. ``keep_inline`` keeps the manifests' inline key copies
        (the commit needs every key; other callers drop them to save memory).
        """
        files = self._epochs.list_files()
        if not with_status:
            files = dataclasses.replace(files, ends={}, expected={})
        epochs: dict[int, Epoch] = {}
        latest = self._epochs.load(max(files.records), files) if files.records else None
        if latest is not None:
            epochs[latest.number] = latest
        ids = self._blobs.list_dirs("checkpoints/")
        corrupt: dict[str, str] = {}

        def load(checkpoint_id: str) -> tuple[str, tuple[Checkpoint, str] | None, str | None]:
            try:
                found = self.manifest_and_etag(checkpoint_id)
                if found is not None and found[0].inline_keys is not None and not keep_inline:
                    found = (dataclasses.replace(found[0], inline_keys=b""), found[1])  # b"": inline, not kept
                return checkpoint_id, found, None
            except CorruptCheckpointError as exc:
                if not tolerate_corrupt:
                    raise
                return checkpoint_id, None, str(exc)

        manifests: dict[str, Checkpoint] = {}
        etags: dict[str, str] = {}
        unsealed: list[str] = []
        for checkpoint_id, found, error in self._context.map(load, ids):
            if error is not None:
                corrupt[checkpoint_id] = error
            elif found is None:
                unsealed.append(checkpoint_id)
            else:
                manifests[checkpoint_id], etags[checkpoint_id] = found
        commit_record = self.newest_commit_record() if with_commits else None
        if commit_record is not None:
            # The newest commit record is the authority on what is committed (one atomic write).
            committed_at = str(commit_record.get("created_at"))
            for checkpoint_id in commit_record["checkpoint_ids"]:
                manifest = manifests.get(checkpoint_id)
                if manifest is not None and manifest.status is not CheckpointStatus.COMMITTED:
                    manifests[checkpoint_id] = dataclasses.replace(
                        manifest, status=CheckpointStatus.COMMITTED, committed_at=committed_at
                    )
        snapshot = self.snapshot(latest)
        valid = valid_checkpoints(latest, manifests, snapshot)
        return StoreState(
            epochs, latest, manifests, unsealed, corrupt, valid, snapshot, files.degraded, etags, commit_record
        )

    def checkpoint(self, checkpoint_id: str) -> Checkpoint | None:
        """One manifest with its committed status from the newest commit record."""
        manifest = self.manifest(checkpoint_id)
        if manifest is None or manifest.status is CheckpointStatus.COMMITTED:
            return manifest
        record = self.newest_commit_record()
        if record is not None and checkpoint_id in record["checkpoint_ids"]:
            return dataclasses.replace(
                manifest, status=CheckpointStatus.COMMITTED, committed_at=str(record.get("created_at"))
            )
        return manifest

    # ------------------------------------------------------------------ keys

    def read_key_source(self, source: KeySource) -> pa.Table:
        data = source.data if source.data else self._blobs.get(source.key)[0]
        try:
            if source.format == "manifest" and not source.data:
                inline = Checkpoint.from_json(self._context.parse_json(source.key, data)).inline_keys
                if inline is None:
                    raise CorruptCheckpointError(f"{self._blobs.child_uri(source.key)} carries no inline keys")
                data = inline
            if source.format == "parquet":  # a snapshot: key, and which checkpoint each came from
                table = pq.read_table(pa.BufferReader(data), columns=[KEY_COLUMN])
            else:
                with ipc.open_stream(pa.BufferReader(data)) as reader:
                    table = reader.read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            raise CorruptCheckpointError(
                f"{self._blobs.child_uri(source.key)} is corrupt or truncated ({exc}); nothing was changed. "
                "Run `airflow-ckpt check`; discard that checkpoint to reprocess its keys"
            ) from exc
        if KEY_COLUMN not in table.column_names:
            raise CorruptCheckpointError(f"{self._blobs.child_uri(source.key)} has no '{KEY_COLUMN}' column")
        return table.select([KEY_COLUMN])

    def read_keys(self, sources: Sequence[KeySource]) -> pa.Table:
        """Every key of ``sources`` in one table; :class:`KeyTypeMismatchError` if their types differ."""
        tables = self._context.map(self.read_key_source, sources)
        types = {str(t.schema.field(KEY_COLUMN).type) for t in tables}
        if len(types) > 1:
            raise KeyTypeMismatchError(
                f"the checkpoints of {self._context.uri} hold keys of different types {sorted(types)}: the key "
                "column changed type between runs. Cast it back to the earlier type, or clear the store to start over"
            )
        if not tables:
            return pa.table({KEY_COLUMN: pa.array([], pa.string())})
        return pa.concat_tables(tables)

    def key_type(self, state: StoreState) -> str | None:
        types = {c.key_type for c in state.valid if c.key_type}
        if state.snapshot and state.snapshot.get("key_type"):
            types.add(state.snapshot["key_type"])
        if len(types) > 1:
            raise KeyTypeMismatchError(f"the checkpoints of {self._context.uri} hold keys of types {sorted(types)}")
        return types.pop() if types else None

    # ------------------------------------------------------------------ files

    def files_of(self, checkpoints: Sequence[Checkpoint]) -> list[FileMetadata]:
        """The output files of ``checkpoints`` (inline in the manifest, else from its file parts)."""

        def load(checkpoint: Checkpoint) -> list[FileMetadata]:
            if checkpoint.inline_files is not None:
                return list(checkpoint.inline_files)
            files: list[FileMetadata] = []
            for part in checkpoint.file_parts:
                key = f"checkpoints/{checkpoint.checkpoint_id}/{part}"
                try:
                    data, _ = self._blobs.get(key)
                except BlobNotFoundError:
                    raise CorruptCheckpointError(
                        f"{self._blobs.child_uri(key)} is named by its manifest but missing; nothing was "
                        "changed. Run `airflow-ckpt check`"
                    ) from None
                try:
                    files.extend(FileMetadata.from_json(item) for item in json.loads(data))
                except (ValueError, KeyError, TypeError) as exc:
                    raise CorruptCheckpointError(f"{self._blobs.child_uri(key)} is corrupt ({exc!r})") from exc
            return files

        return [f for files in self._context.map(load, list(checkpoints)) for f in files]


def valid_checkpoints(
    latest: Epoch | None, manifests: Mapping[str, Checkpoint], snapshot: Mapping[str, Any] | None
) -> list[Checkpoint]:
    """Base of the latest epoch + sealed in it, one per partition (docs/store-api.md, "Invariants" 3)."""
    if latest is None:
        return []
    folded = set(snapshot["checkpoint_ids"]) if snapshot else set()
    valid = {i: manifests[i] for i in latest.base if i in manifests and i not in folded}
    by_partition: dict[int, Checkpoint] = {}
    for checkpoint in manifests.values():
        if checkpoint.epoch != latest.number or checkpoint.checkpoint_id in folded:
            continue
        if checkpoint.partition is None:
            valid[checkpoint.checkpoint_id] = checkpoint
            continue
        current = by_partition.get(checkpoint.partition)
        # Deterministic winner among duplicate attempts: first sealed, then smallest id.
        if current is None or (checkpoint.sealed_at, checkpoint.checkpoint_id) < (
            current.sealed_at,
            current.checkpoint_id,
        ):
            by_partition[checkpoint.partition] = checkpoint
    for checkpoint in by_partition.values():
        valid[checkpoint.checkpoint_id] = checkpoint
    return sorted(
        valid.values(),
        key=lambda c: (c.epoch, c.partition if c.partition is not None else -1, c.checkpoint_id),
    )


def key_sources(state: StoreState, only: Sequence[str] | None = None) -> list[KeySource]:
    """The snapshot (if it holds keys) and the keys of the valid checkpoints (or of ``only``).

    A checkpoint whose manifest carries its keys is one source (the manifest, with the
    bytes when the state kept them); others contribute each key part.
    """
    sources: list[KeySource] = []
    if state.snapshot is not None and int(state.snapshot.get("num_keys", 0)):
        number = int(state.snapshot["snapshot"])
        sources.append(KeySource(key=snapshot_prefix(number) + "keys.parquet", format="parquet"))
    wanted = None if only is None else set(only)
    for checkpoint in state.valid:
        if wanted is not None and checkpoint.checkpoint_id not in wanted:
            continue
        prefix = f"checkpoints/{checkpoint.checkpoint_id}/"
        if checkpoint.inline_keys is not None:
            sources.append(
                KeySource(key=prefix + "manifest.json", format="manifest", data=checkpoint.inline_keys or None)
            )
        else:
            sources.extend(KeySource(key=prefix + part, format="arrow") for part in checkpoint.key_parts)
    return sources
