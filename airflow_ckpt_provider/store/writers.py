"""Writers: intents, staged keys and files, and the manifest that seals a checkpoint.

A checkpoint is visible iff ``checkpoints/{id}/manifest.json`` exists and is not empty; the manifest
is written (create-if-absent) only after every part it names is durable. The parts and
intents go under ``attempts/{id}/`` (store/layout.py), so a reader of the state lists
manifests only. Each
writer call goes through the circuit breaker: a store failure skips checkpointing
(the run is degraded) instead of failing the user's job.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.store.breaker import CircuitBreaker
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.deletion_guard import name_marker_refusal, parse_location
from airflow_ckpt_provider.store.epochs import EpochLog
from airflow_ckpt_provider.store.errors import (
    EpochConflictError,
    InvalidArgumentError,
    PreconditionFailedError,
    StoreUnavailableError,
)
from airflow_ckpt_provider.store.keys import INLINE_MAX_FILES, INLINE_MAX_KEYS, as_key_array, ipc_bytes
from airflow_ckpt_provider.store.layout import attempt_prefix, manifest_key, validate_checkpoint_id
from airflow_ckpt_provider.store.model import (
    Checkpoint,
    CheckpointStatus,
    FileMetadata,
    sequence_of_files,
)
from airflow_ckpt_provider.store.records import PendingCheckpoint, dumps, now
from airflow_ckpt_provider.store.state import StateReader
from airflow_ckpt_provider.store.tail import LooseTail


class CheckpointWriters:
    """What task attempts write: intents before output files, key and file parts, the sealing manifest."""

    def __init__(
        self,
        context: StoreContext,
        breaker: CircuitBreaker,
        epochs: EpochLog,
        reader: StateReader,
        tail: LooseTail | None = None,
    ) -> None:
        self._context = context
        self._tail = tail
        self._blobs = context.blobs
        self._breaker = breaker
        self._epochs = epochs
        self._reader = reader
        self._pending: dict[str, PendingCheckpoint] = {}
        #: Manifests this process sealed: a re-seal returns them even after a compaction moved them to a segment.
        self._sealed_here: dict[str, Checkpoint] = {}
        self._lock = threading.Lock()

    @property
    def poisoned(self) -> bool:
        """True once a failed stage left a checkpoint of this process unsealable."""
        return any(p.poisoned for p in self._pending.values())

    def _guarded(self, checkpoint_id: str, what: str, action: Callable[[], None]) -> bool:
        """Run a store write through the breaker. False if it was skipped or failed."""
        if self._breaker.tripped:
            return False
        with self._lock:
            pending = self._pending.setdefault(checkpoint_id, PendingCheckpoint())
            if pending.poisoned:
                return False
        try:
            action()
        except (StoreUnavailableError, OSError) as exc:
            with self._lock:
                pending.poisoned = True
            self._breaker.record_failure(f"{what} {checkpoint_id}", exc)
            return False
        self._breaker.record_success()
        return True

    def _check_not_sealed(self, checkpoint_id: str) -> None:
        if checkpoint_id in self._sealed_here:
            raise EpochConflictError(
                f"checkpoint {checkpoint_id} is sealed: stage into a new checkpoint (new_checkpoint_id())",
                reason="already_sealed",
            )

    def record_intent(self, checkpoint_id: str, paths: Sequence[str], *, epoch: int | None) -> bool:
        validate_checkpoint_id(checkpoint_id)
        self._check_not_sealed(checkpoint_id)
        paths = [str(p) for p in paths]
        if not paths:
            return True

        def write() -> None:
            with self._lock:
                pending = self._pending[checkpoint_id]
                part = pending.intent_parts
                pending.intent_parts += 1
            record = {"checkpoint_id": checkpoint_id, "epoch": epoch, "paths": paths, "created_at": now()}
            self._blobs.put(f"{attempt_prefix(checkpoint_id)}intents/{part:04d}.json", dumps(record))

        return self._guarded(checkpoint_id, "record_intent", write)

    def record_name_intent(self, write_id: str, root: str, marker: str, *, epoch: int | None) -> None:
        validate_checkpoint_id(write_id)
        refusal = name_marker_refusal(marker)
        if refusal is not None:
            raise InvalidArgumentError(
                f"{refusal}: use a random token (the native writer uses 19 characters)", reason="out_of_range"
            )
        location = parse_location(str(root))
        if location is None:
            raise InvalidArgumentError(
                f"{root!r} is not an absolute file:// or s3:// directory without '..'", reason="output_root"
            )
        record: dict[str, Any] = {
            "checkpoint_id": write_id,
            "epoch": epoch,
            "paths": [],
            "root": location.uri,
            "name_marker": marker,
            "created_at": now(),
        }
        self._blobs.put(f"{attempt_prefix(write_id)}intents/0000.json", dumps(record), if_absent=True)

    def stage_keys(self, checkpoint_id: str, keys: pa.Array | pa.ChunkedArray | Sequence[Any]) -> bool:
        validate_checkpoint_id(checkpoint_id)
        self._check_not_sealed(checkpoint_id)
        array = as_key_array(keys)
        type_name = str(array.type)
        with self._lock:
            pending = self._pending.setdefault(checkpoint_id, PendingCheckpoint())
            if pending.key_type is not None and pending.key_type != type_name:
                raise InvalidArgumentError(
                    f"checkpoint {checkpoint_id} already holds keys of type {pending.key_type}, "
                    f"not {type_name}: cast the key column to one type",
                    reason="key_type_mismatch",
                )
        if len(array) == 0:
            return True
        payload = ipc_bytes([array])

        def write() -> None:
            with self._lock:
                part = len(pending.key_parts)
                name = f"keys/{part:04d}.arrow"
                pending.key_parts.append(name)
            try:
                self._blobs.put(attempt_prefix(checkpoint_id) + name, payload)
            except BaseException:
                with self._lock:
                    pending.key_parts.remove(name)
                raise
            failpoint("store.after_stage_keys")
            with self._lock:
                pending.num_keys += len(array)
                pending.key_type = type_name
                if pending.inline_keys is not None:
                    pending.inline_keys.append(array)
                    if pending.num_keys > INLINE_MAX_KEYS:
                        pending.inline_keys = None

        return self._guarded(checkpoint_id, "stage_keys", write)

    def stage_files(self, checkpoint_id: str, files: Sequence[FileMetadata | Mapping[str, Any]]) -> bool:
        validate_checkpoint_id(checkpoint_id)
        self._check_not_sealed(checkpoint_id)
        metas = sequence_of_files(files)
        if not metas:
            return True

        def write() -> None:
            with self._lock:
                pending = self._pending[checkpoint_id]
                part = len(pending.file_parts)
                name = f"files/{part:04d}.json"
                pending.file_parts.append(name)
            try:
                self._blobs.put(attempt_prefix(checkpoint_id) + name, dumps([m.to_json() for m in metas]))
            except BaseException:
                with self._lock:
                    pending.file_parts.remove(name)
                raise
            failpoint("store.after_stage_files")
            with self._lock:
                if pending.inline_files is not None:
                    pending.inline_files.extend(metas)
                    if len(pending.inline_files) > INLINE_MAX_FILES:
                        pending.inline_files = None
                pending.num_files += len(metas)
                pending.num_bytes += sum(m.size_bytes for m in metas)
                pending.num_rows += sum(m.num_rows for m in metas)

        return self._guarded(checkpoint_id, "stage_files", write)

    def checkpoint(
        self, checkpoint_id: str, *, epoch: int, partition: int | None, metadata: Mapping[str, Any] | None
    ) -> Checkpoint | None:
        validate_checkpoint_id(checkpoint_id)
        result: list[Checkpoint] = []
        if self._tail is not None and not self._breaker.tripped:
            self._tail.before_seal()  # keeps the loose manifests under their bound (store/tail.py)

        def seal() -> None:
            with self._lock:
                pending = self._pending.setdefault(checkpoint_id, PendingCheckpoint())
            if not (pending.key_parts or pending.file_parts):
                # Nothing staged by this process: a re-seal (idempotent), or an empty checkpoint.
                with self._lock:
                    sealed_here = self._sealed_here.get(checkpoint_id)
                if sealed_here is not None:
                    result.append(sealed_here)
                    return
                existing = self._reader.manifest(checkpoint_id)
                if existing is not None:
                    result.append(existing)
                    return
                foreign = self._blobs.list(attempt_prefix(checkpoint_id))
                if any("/keys/" in b.key or "/files/" in b.key for b in foreign):
                    raise EpochConflictError(
                        f"checkpoint {checkpoint_id} has parts staged by another process; "
                        "each attempt must seal its own new_checkpoint_id()",
                        reason="already_sealed",
                    )
            if not self._epochs.is_current(epoch):
                raise EpochConflictError(
                    f"epoch {epoch} of {self._context.uri} was superseded by a newer submit; checkpoint "
                    f"{checkpoint_id} is not sealed (its work will be redone by the newer run)",
                    reason="epoch_fenced",
                )
            failpoint("store.checkpoint.before_manifest")
            manifest = Checkpoint(
                checkpoint_id=checkpoint_id,
                status=CheckpointStatus.CHECKPOINTED,
                epoch=epoch,
                partition=partition,
                created_at=pending.created_at,
                sealed_at=now(),
                committed_at=None,
                key_parts=tuple(pending.key_parts),
                file_parts=tuple(pending.file_parts),
                num_keys=pending.num_keys,
                key_type=pending.key_type,
                num_files=pending.num_files,
                num_bytes=pending.num_bytes,
                num_rows=pending.num_rows,
                metadata=dict(metadata or {}),
                inline_keys=ipc_bytes(pending.inline_keys) if pending.inline_keys else None,
                inline_files=None if pending.inline_files is None else tuple(pending.inline_files),
            )
            try:
                # An empty manifest (this attempt's upload cut short) counts as absent (BlobStore.put).
                self._blobs.put(manifest_key(checkpoint_id), dumps(manifest.to_json(manifest=True)), if_absent=True)
            except PreconditionFailedError:
                existing = self._reader.manifest(checkpoint_id)
                if existing is not None and (existing.key_parts, existing.file_parts, existing.epoch) == (
                    manifest.key_parts,
                    manifest.file_parts,
                    manifest.epoch,
                ):
                    result.append(existing)
                    return
                raise EpochConflictError(
                    f"checkpoint {checkpoint_id} is already sealed with other parts; "
                    "each attempt must use its own new_checkpoint_id()",
                    reason="already_sealed",
                ) from None
            failpoint("store.checkpoint.after_manifest")
            with self._lock:
                self._sealed_here[checkpoint_id] = dataclasses.replace(manifest, inline_keys=None)
            result.append(manifest)

        sealed = self._guarded(checkpoint_id, "checkpoint", seal)
        if not sealed:
            self._epochs.mark_degraded(epoch, f"checkpoint {checkpoint_id} not sealed: store failures")
            return None
        with self._lock:
            self._pending.pop(checkpoint_id, None)
        return result[0] if result else None
