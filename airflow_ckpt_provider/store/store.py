"""The checkpoint store: engine-agnostic logic over a :class:`BlobStore`.

Visibility, validity and cleanup follow DESIGN.md's invariants:

1. A checkpoint is visible iff ``checkpoints/{id}/manifest.json`` exists; the
   manifest is written (create-if-absent) only after every part it names is durable.
2. Checkpoint ids are fresh UUIDs per task attempt; nothing is overwritten under a
   new meaning (the only rewrite is the manifest's status, guarded by ``If-Match``).
3. Each submit opens epoch *n+1* (create-if-absent). Valid checkpoints are the base
   of the latest epoch plus those sealed in it, one per partition.
5. ``commit`` is the only authority over output files; it deletes only files that a
   writer of this store recorded an intent for and that no valid checkpoint owns.
6. Writer calls go through a circuit breaker; a tripped breaker degrades the run.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import logging
import re
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.store.blobs.base import BlobNotFoundError, BlobStore
from airflow_ckpt_provider.store.breaker import CircuitBreaker
from airflow_ckpt_provider.store.errors import (
    CheckpointAlreadySealedError,
    CheckpointError,
    CommitRefusedError,
    CorruptCheckpointError,
    EpochConflictError,
    EpochFencedError,
    InvalidCheckpointIdError,
    InvalidKeysError,
    KeyTypeMismatchError,
    NoEpochError,
    OverlappingKeysError,
    PreconditionFailedError,
    StoreUnavailableError,
    UnknownCheckpointError,
)
from airflow_ckpt_provider.store.model import (
    Checkpoint,
    CheckpointStatus,
    ClearResult,
    CommitResult,
    ConsistencyReport,
    Epoch,
    EpochStatus,
    FileMetadata,
    KeySource,
    Progress,
    RetentionPolicy,
    sequence_of_files,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

KEY_COLUMN = "key"
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_EPOCH_RE = re.compile(r"^(\d{8})\.json$")
_EPOCH_END_RE = re.compile(r"^(\d{8})\.end\.json$")
_EPOCH_EXPECTED_RE = re.compile(r"^(\d{8})\.expected\.json$")
_COMMIT_RE = re.compile(r"^commits/\d{8}\.json$")
_DEGRADED_RE = re.compile(r"^(\d{8})\.degraded-[0-9a-f]+\.json$")
_HIDDEN_PREFIXES = ("_", ".")
#: Checkpoints up to this many keys / files carry a copy in their manifest (one read instead of many).
INLINE_MAX_KEYS = 4096
INLINE_MAX_FILES = 256


def new_checkpoint_id() -> str:
    """A fresh, unique checkpoint id (UUID4). Each task attempt must use its own."""
    return str(uuid.uuid4())


def validate_checkpoint_id(checkpoint_id: str) -> str:
    """Return ``checkpoint_id`` if it is a safe id, else raise :class:`InvalidCheckpointIdError`."""
    if not isinstance(checkpoint_id, str) or not _ID_RE.match(checkpoint_id) or ".." in checkpoint_id:
        raise InvalidCheckpointIdError(
            f"{checkpoint_id!r} is not a checkpoint id: ids are 1-128 characters of letters, digits, "
            "'_', '-', '.', with no '/' or '..'; use new_checkpoint_id() to make one"
        )
    return checkpoint_id


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _epoch_key(number: int, suffix: str = ".json") -> str:
    return f"epochs/{number:08d}{suffix}"


def _dumps(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def _under_root(path: str, roots: Sequence[str]) -> bool:
    return any(path.startswith(root.rstrip("/") + "/") for root in roots)


@dataclass(frozen=True)
class _NamePattern:
    """A write's intent for every file under ``root`` whose name holds ``marker`` (a native Spark write)."""

    root: str
    marker: str
    checkpoint_id: str
    epoch: int | None

    def matches(self, path: str) -> bool:
        if not path.startswith(self.root.rstrip("/") + "/"):
            return False
        return self.marker in path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class _Intents:
    """Every intent record: exact output paths, and name patterns of native writes."""

    paths: dict[str, tuple[str, int | None]]
    patterns: tuple[_NamePattern, ...]

    def owner(self, path: str) -> tuple[str, int | None] | None:
        """Who intended to write ``path``: (checkpoint id, epoch), or None."""
        found = self.paths.get(path)
        if found is not None:
            return found
        for pattern in self.patterns:
            if pattern.matches(path):
                return pattern.checkpoint_id, pattern.epoch
        return None


@dataclass
class _Pending:
    """What this process staged into a checkpoint that it has not sealed yet."""

    created_at: str = field(default_factory=_now)
    key_parts: list[str] = field(default_factory=list)
    file_parts: list[str] = field(default_factory=list)
    intent_parts: int = 0
    num_keys: int = 0
    key_type: str | None = None
    num_files: int = 0
    num_bytes: int = 0
    num_rows: int = 0
    poisoned: bool = False
    inline_keys: list[pa.Array] | None = field(default_factory=list)
    inline_files: list[FileMetadata] | None = field(default_factory=list)


@dataclass
class _State:
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


class CheckpointStore:
    """A checkpoint store rooted at ``blobs.uri``. Thread-safe; one instance per process is enough.

    Build one with :func:`airflow_ckpt_provider.store.open_store`.
    """

    def __init__(
        self,
        blobs: BlobStore,
        *,
        options: Mapping[str, Any] | None = None,
        breaker_max_failures: int = 3,
        max_workers: int = 16,
        blob_opener: Callable[[str], BlobStore] | None = None,
    ) -> None:
        self.blobs = blobs
        self.options: dict[str, Any] = dict(options or {})
        self.breaker = CircuitBreaker(breaker_max_failures)
        self.max_workers = max_workers
        self._blob_opener = blob_opener
        self._pending: dict[str, _Pending] = {}
        self._sealed_here: set[str] = set()
        self._lock = threading.Lock()
        self._degraded_epochs_marked: set[int] = set()
        self._output_blobs: dict[str, BlobStore] = {}

    # ------------------------------------------------------------------ basics

    @property
    def uri(self) -> str:
        return self.blobs.uri

    @property
    def degraded(self) -> bool:
        """True once a store failure made this process skip checkpointing (breaker or a failed stage)."""
        return (
            self.breaker.tripped
            or any(p.poisoned for p in self._pending.values())
            or bool(self._degraded_epochs_marked)
        )

    def __repr__(self) -> str:
        return f"CheckpointStore({self.uri!r})"

    def close(self) -> None:
        self.blobs.close()
        for blobs in self._output_blobs.values():
            blobs.close()

    def _map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if len(items) <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(items))) as pool:
            return list(pool.map(fn, items))

    def _read_json(self, key: str) -> dict[str, Any]:
        data, _ = self.blobs.get(key)
        return self._parse_json(key, data)

    def _parse_json(self, key: str, data: bytes) -> dict[str, Any]:
        try:
            parsed = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptCheckpointError(
                f"{self.blobs.child_uri(key)} is corrupt or truncated ({exc}). Nothing was changed; "
                "run `airflow-ckpt check` on the store, then delete or restore that object"
            ) from exc
        if not isinstance(parsed, dict):
            raise CorruptCheckpointError(f"{self.blobs.child_uri(key)} does not hold a JSON object")
        return parsed

    def _output_store(self, uri: str) -> BlobStore:
        """A blob store rooted at an output directory (same credentials as the store)."""
        root = uri.rstrip("/")
        with self._lock:
            blobs = self._output_blobs.get(root)
            if blobs is None:
                if self._blob_opener is None:
                    raise CheckpointError("this store cannot open output locations (no blob opener)")
                blobs = self._blob_opener(root)
                self._output_blobs[root] = blobs
            return blobs

    # ------------------------------------------------------------------ writers (breaker-guarded)

    def _guarded(self, checkpoint_id: str, what: str, action: Callable[[], None]) -> bool:
        """Run a store write through the breaker. False if it was skipped or failed."""
        if self.breaker.tripped:
            return False
        with self._lock:
            pending = self._pending.setdefault(checkpoint_id, _Pending())
            if pending.poisoned:
                return False
        try:
            action()
        except (StoreUnavailableError, OSError) as exc:
            with self._lock:
                pending.poisoned = True
            self.breaker.record_failure(f"{what} {checkpoint_id}", exc)
            return False
        self.breaker.record_success()
        return True

    def _check_not_sealed(self, checkpoint_id: str) -> None:
        if checkpoint_id in self._sealed_here:
            raise CheckpointAlreadySealedError(
                f"checkpoint {checkpoint_id} is sealed: stage into a new checkpoint (new_checkpoint_id())"
            )

    def record_intent(self, checkpoint_id: str, paths: Sequence[str], *, epoch: int | None = None) -> bool:
        """Record that checkpoint ``checkpoint_id`` is about to create the output files ``paths``.

        Call it *before* creating each file. The record lets :meth:`commit` delete
        the file if the checkpoint never becomes valid; a file with no record is
        never deleted automatically. Visible to ``commit`` and ``check`` at once.
        Not idempotent (each call appends a record; duplicates are harmless).
        Returns False when the breaker skipped it (the file is then unrecorded).
        Raises :class:`InvalidCheckpointIdError`, :class:`CheckpointAlreadySealedError`.
        """
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
            record = {"checkpoint_id": checkpoint_id, "epoch": epoch, "paths": paths, "created_at": _now()}
            self.blobs.put(f"checkpoints/{checkpoint_id}/intents/{part:04d}.json", _dumps(record))

        return self._guarded(checkpoint_id, "record_intent", write)

    def record_name_intent(self, write_id: str, root: str, marker: str, *, epoch: int | None = None) -> None:
        """Record that a write is about to create files under ``root`` whose names contain ``marker``.

        For writers that cannot record each file before creating it (Spark's own
        Parquet writer, whose tasks have no store client): the driver records one
        pattern before the job, and the commit treats every matching file that no
        valid checkpoint owns as an orphan. ``marker`` must be unique to this write
        (at least 12 characters; a random token) so that no other writer's file
        matches. ``write_id`` is a fresh :func:`new_checkpoint_id` that is never
        sealed; the commit deletes its record with the other unsealed directories.
        Not breaker-guarded: without the record the write must not start.
        Raises :class:`InvalidCheckpointIdError`, :class:`StoreUnavailableError`.
        """
        validate_checkpoint_id(write_id)
        if len(marker) < 12 or "/" in marker:
            raise ValueError(f"name marker {marker!r} must be a unique token of at least 12 characters, without '/'")
        record: dict[str, Any] = {
            "checkpoint_id": write_id,
            "epoch": epoch,
            "paths": [],
            "root": str(root).rstrip("/"),
            "name_marker": marker,
            "created_at": _now(),
        }
        self.blobs.put(f"checkpoints/{write_id}/intents/0000.json", _dumps(record), if_absent=True)

    def stage_keys(self, checkpoint_id: str, keys: pa.Array | pa.ChunkedArray | Sequence[Any]) -> bool:
        """Append a batch of input keys to checkpoint ``checkpoint_id``.

        Invisible to every reader until :meth:`checkpoint` seals it. Not idempotent:
        each call appends a part (staging a key twice is harmless). Returns False when
        the breaker skipped it. Raises :class:`InvalidKeysError` (nulls, nested
        arrays), :class:`KeyTypeMismatchError` (a type other than this checkpoint's
        earlier keys), :class:`CheckpointAlreadySealedError`.
        """
        validate_checkpoint_id(checkpoint_id)
        self._check_not_sealed(checkpoint_id)
        array = _as_key_array(keys)
        type_name = str(array.type)
        with self._lock:
            pending = self._pending.setdefault(checkpoint_id, _Pending())
            if pending.key_type is not None and pending.key_type != type_name:
                raise KeyTypeMismatchError(
                    f"checkpoint {checkpoint_id} already holds keys of type {pending.key_type}, "
                    f"not {type_name}: cast the key column to one type"
                )
        if len(array) == 0:
            return True
        payload = _ipc_bytes([array])

        def write() -> None:
            with self._lock:
                part = len(pending.key_parts)
                name = f"keys/{part:04d}.arrow"
                pending.key_parts.append(name)
            try:
                self.blobs.put(f"checkpoints/{checkpoint_id}/{name}", payload)
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
        """Append output-file metadata to checkpoint ``checkpoint_id``.

        Invisible until sealed. Not idempotent (a second call appends the same files
        again; don't). Returns False when the breaker skipped it. Raises
        :class:`CheckpointAlreadySealedError`, :class:`InvalidCheckpointIdError`.
        """
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
                self.blobs.put(f"checkpoints/{checkpoint_id}/{name}", _dumps([m.to_json() for m in metas]))
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
        self,
        checkpoint_id: str,
        *,
        epoch: int,
        partition: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Checkpoint | None:
        """Seal checkpoint ``checkpoint_id``: write its manifest, naming every staged part.

        After it returns, every reader sees the checkpoint (and it is valid if
        ``epoch`` is still the latest epoch and no other attempt of ``partition``
        sealed first). Idempotent: sealing again with the same parts returns the
        existing manifest. Returns None when the breaker skipped it (nothing
        sealed; the run is degraded). Raises :class:`EpochFencedError` if a newer
        epoch began (this attempt is a zombie: give up),
        :class:`CheckpointAlreadySealedError` if it was sealed with other parts.
        """
        validate_checkpoint_id(checkpoint_id)
        result: list[Checkpoint] = []

        def seal() -> None:
            with self._lock:
                pending = self._pending.setdefault(checkpoint_id, _Pending())
            if not (pending.key_parts or pending.file_parts):
                # Nothing staged by this process: a re-seal (idempotent), or an empty checkpoint.
                existing = self._get_manifest(checkpoint_id)
                if existing is not None:
                    result.append(existing)
                    return
                foreign = self.blobs.list(f"checkpoints/{checkpoint_id}/")
                if any("/keys/" in b.key or "/files/" in b.key for b in foreign):
                    raise CheckpointAlreadySealedError(
                        f"checkpoint {checkpoint_id} has parts staged by another process; "
                        "each attempt must seal its own new_checkpoint_id()"
                    )
            if not self.is_current_epoch(epoch):
                raise EpochFencedError(
                    f"epoch {epoch} of {self.uri} was superseded by a newer submit; checkpoint "
                    f"{checkpoint_id} is not sealed (its work will be redone by the newer run)"
                )
            failpoint("store.checkpoint.before_manifest")
            manifest = Checkpoint(
                checkpoint_id=checkpoint_id,
                status=CheckpointStatus.CHECKPOINTED,
                epoch=epoch,
                partition=partition,
                created_at=pending.created_at,
                sealed_at=_now(),
                committed_at=None,
                key_parts=tuple(pending.key_parts),
                file_parts=tuple(pending.file_parts),
                num_keys=pending.num_keys,
                key_type=pending.key_type,
                num_files=pending.num_files,
                num_bytes=pending.num_bytes,
                num_rows=pending.num_rows,
                metadata=dict(metadata or {}),
                inline_keys=_ipc_bytes(pending.inline_keys) if pending.inline_keys else None,
                inline_files=None if pending.inline_files is None else tuple(pending.inline_files),
            )
            key = f"checkpoints/{checkpoint_id}/manifest.json"
            try:
                self.blobs.put(key, _dumps(manifest.to_json(manifest=True)), if_absent=True)
            except PreconditionFailedError:
                existing = self._get_manifest(checkpoint_id)
                if existing is not None and (existing.key_parts, existing.file_parts, existing.epoch) == (
                    manifest.key_parts,
                    manifest.file_parts,
                    manifest.epoch,
                ):
                    result.append(existing)
                    return
                raise CheckpointAlreadySealedError(
                    f"checkpoint {checkpoint_id} is already sealed with other parts; "
                    "each attempt must use its own new_checkpoint_id()"
                ) from None
            failpoint("store.checkpoint.after_manifest")
            with self._lock:
                self._sealed_here.add(checkpoint_id)
            result.append(manifest)

        sealed = self._guarded(checkpoint_id, "checkpoint", seal)
        if not sealed:
            self.mark_degraded(epoch, f"checkpoint {checkpoint_id} not sealed: store failures")
            return None
        with self._lock:
            self._pending.pop(checkpoint_id, None)
        return result[0] if result else None

    def mark_committed(self, checkpoint_ids: Iterable[str]) -> None:
        """Set the status of sealed checkpoints to committed (``If-Match`` on the manifest).

        Visible to every reader at once: committed checkpoints no longer appear in
        :meth:`get_checkpointed_files` but their keys stay done. Idempotent. Raises
        :class:`UnknownCheckpointError` for an id with no manifest.
        """
        self._mark_committed([validate_checkpoint_id(i) for i in checkpoint_ids], {})

    def _mark_committed(self, ids: Sequence[str], known: Mapping[str, tuple[Checkpoint, str]]) -> None:
        """``known``: manifests and etags already read (saves one GET each; a stale etag just retries)."""

        def one(checkpoint_id: str) -> None:
            key = f"checkpoints/{checkpoint_id}/manifest.json"
            cached = known.get(checkpoint_id)
            for _ in range(10):
                if cached is None:
                    found = self._get_manifest_and_etag(checkpoint_id)
                    if found is None:
                        raise UnknownCheckpointError(
                            f"checkpoint {checkpoint_id} is not sealed in {self.uri}: only sealed checkpoints commit"
                        )
                    cached = found
                manifest, etag = cached
                if manifest.status is CheckpointStatus.COMMITTED:
                    return
                updated = manifest.to_json(manifest=True) | {"status": "committed", "committed_at": _now()}
                try:
                    self.blobs.put(key, _dumps(updated), if_match=etag)
                    return
                except PreconditionFailedError:
                    cached = None  # somebody else changed it: re-read and retry
            raise CheckpointError(f"could not mark {checkpoint_id} committed: the manifest keeps changing")

        self._map(one, ids)

    # ------------------------------------------------------------------ epochs

    def _list_epoch_files(self) -> tuple[dict[int, str], dict[int, str], dict[int, str], set[int]]:
        """One listing of ``epochs/``: records, end records, expected counts, degraded epochs."""
        records: dict[int, str] = {}
        ends: dict[int, str] = {}
        expected: dict[int, str] = {}
        degraded: set[int] = set()
        for info in self.blobs.list("epochs/"):
            name = info.key.rsplit("/", 1)[-1]
            for regex, target in (
                (_EPOCH_RE, records),
                (_EPOCH_END_RE, ends),
                (_EPOCH_EXPECTED_RE, expected),
            ):
                match = regex.match(name)
                if match:
                    target[int(match.group(1))] = info.key
                    break
            else:
                match = _DEGRADED_RE.match(name)
                if match:
                    degraded.add(int(match.group(1)))
        return records, ends, expected, degraded

    def _load_epoch(
        self, number: int, ends: Mapping[int, str], expected: Mapping[int, str], degraded: set[int]
    ) -> Epoch:
        record = Epoch.from_json(self._read_json(_epoch_key(number)))
        changes: dict[str, Any] = {"degraded": number in degraded}
        if number in ends:
            end = self._read_json(ends[number])
            changes["status"] = EpochStatus(end["status"])
            changes["ended_at"] = end.get("ended_at")
        if number in expected:
            changes["expected_partitions"] = int(self._read_json(expected[number])["expected_partitions"])
        return _replace(record, **changes)

    def current_epoch(self) -> Epoch | None:
        """The latest epoch (with its status and degraded flag), or None before the first submit."""
        records, ends, expected, degraded = self._list_epoch_files()
        if not records:
            return None
        return self._load_epoch(max(records), ends, expected, degraded)

    def list_epochs(self) -> list[Epoch]:
        """Every epoch record still in the store, oldest first."""
        records, ends, expected, degraded = self._list_epoch_files()
        return self._map(lambda n: self._load_epoch(n, ends, expected, degraded), sorted(records))

    def is_degraded(self, epoch: int) -> bool:
        """Whether ``epoch`` recorded that checkpointing was off somewhere (one listing of its degraded markers)."""
        prefix = _epoch_key(epoch, ".degraded-")
        return any(True for _ in self.blobs.list(prefix))

    def is_current_epoch(self, epoch: int) -> bool:
        """True while no newer epoch exists (one HEAD request). Writers check it before writing."""
        return not self.blobs.exists(_epoch_key(epoch + 1))

    def begin_epoch(
        self,
        *,
        owner: str | None = None,
        expected_partitions: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        takeover: bool = False,
    ) -> Epoch:
        """Open the next epoch (create-if-absent) with the valid checkpoints as its base.

        From the moment it returns, every checkpoint sealed in an older epoch is a
        zombie (never valid) and writers of older epochs are fenced. If the latest
        epoch is still open and held by another owner (or by no owner), raises
        :class:`EpochConflictError` unless ``takeover``; an owner may always take over
        its own open epoch (a retry of the same task). Two racing callers: exactly
        one wins, the other gets :class:`EpochConflictError`. Not idempotent.
        """
        state = self._state()
        latest = state.latest
        held_by_other = latest is not None and (owner is None or latest.owner != owner)
        if latest is not None and latest.status is EpochStatus.OPEN and not takeover and held_by_other:
            raise EpochConflictError(
                f"epoch {latest.number} of {self.uri} is still open (owner {latest.owner!r}, opened "
                f"{latest.created_at}): another submit may be running on this store. Wait for it, or if it "
                "is dead, take over (operator takeover_open_epoch=True, or `airflow-ckpt` with --takeover)"
            )
        number = (latest.number if latest else 0) + 1
        snapshot_number = None if state.snapshot is None else int(state.snapshot["snapshot"])
        folded = set(state.snapshot["checkpoint_ids"]) if state.snapshot else set()
        base_checkpoints = [c for c in state.valid if c.checkpoint_id not in folded]
        base = tuple(sorted(c.checkpoint_id for c in base_checkpoints))
        epoch = Epoch(
            number=number,
            owner=owner,
            created_at=_now(),
            base=base,
            base_snapshot=snapshot_number,
            # Counted as progress() counts them, so a submit need not read every manifest again to say what it skips.
            base_keys=(int(state.snapshot["num_keys"]) if state.snapshot else 0)
            + sum(c.num_keys for c in base_checkpoints),
            base_rows=sum(c.num_rows for c in base_checkpoints),
            expected_partitions=expected_partitions,
            metadata=dict(metadata or {}),
        )
        failpoint("store.begin_epoch.before_create")
        try:
            self.blobs.put(_epoch_key(number), _dumps(epoch.to_json()), if_absent=True)
        except PreconditionFailedError:
            raise EpochConflictError(
                f"another submit opened epoch {number} of {self.uri} at the same time; only one run may use "
                "a store at once. Retry after it finishes, or give each run its own checkpoint_uri"
            ) from None
        failpoint("store.begin_epoch.after_create")
        if latest is not None and latest.status is EpochStatus.OPEN:
            self._write_epoch_end(latest.number, EpochStatus.FAILED, {"reason": f"superseded by epoch {number}"})
        log.info("opened epoch %d of %s with %d base checkpoints", number, self.uri, len(base))
        return epoch

    def set_expected_partitions(self, epoch: int, count: int) -> None:
        """Record how many partitions the job of ``epoch`` will seal (for progress). Idempotent."""
        self.blobs.put(_epoch_key(epoch, ".expected.json"), _dumps({"expected_partitions": int(count)}))

    def _write_epoch_end(self, epoch: int, status: EpochStatus, summary: Mapping[str, Any] | None) -> None:
        record = {"status": status.value, "ended_at": _now(), "summary": dict(summary or {})}
        self.blobs.put(_epoch_key(epoch, ".end.json"), _dumps(record))

    def end_epoch(self, epoch: int, *, status: EpochStatus, summary: Mapping[str, Any] | None = None) -> None:
        """Record how the submit of ``epoch`` ended (succeeded or failed). Idempotent (last write wins).

        A failed epoch cannot be committed; an ended epoch no longer blocks other owners.
        """
        self._write_epoch_end(epoch, EpochStatus(status), summary)

    def mark_degraded(self, epoch: int, reason: str) -> None:
        """Record, best effort, that ``epoch`` ran with checkpointing off somewhere.

        The commit of a degraded epoch keeps every file it cannot prove orphaned.
        Never raises: when the store is down the caller must report the degraded
        state through the job's result instead.
        """
        with self._lock:
            if epoch in self._degraded_epochs_marked:
                return
            self._degraded_epochs_marked.add(epoch)
        try:
            self.blobs.put(
                _epoch_key(epoch, f".degraded-{uuid.uuid4().hex}.json"),
                _dumps({"epoch": epoch, "reason": reason, "at": _now()}),
            )
        except Exception as exc:  # the store is likely down; the job result carries the flag
            log.info("could not record degraded epoch %d in %s: %s", epoch, self.uri, exc)

    # ------------------------------------------------------------------ reading state

    def _get_manifest(self, checkpoint_id: str) -> Checkpoint | None:
        found = self._get_manifest_and_etag(checkpoint_id)
        return None if found is None else found[0]

    def _get_manifest_and_etag(self, checkpoint_id: str) -> tuple[Checkpoint, str] | None:
        key = f"checkpoints/{checkpoint_id}/manifest.json"
        found = self.blobs.get_if_exists(key)
        if found is None:
            return None
        data = self._parse_json(key, found[0])
        try:
            return Checkpoint.from_json(data), found[1]
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptCheckpointError(
                f"{self.blobs.child_uri(key)} is not a valid manifest ({exc!r}); nothing was changed. "
                "Run `airflow-ckpt check` and delete that checkpoint directory"
            ) from exc

    def _read_snapshot(self, latest: Epoch | None) -> dict[str, Any] | None:
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
            key = f"snapshots/{number:08d}/manifest.json"
            found = self.blobs.get_if_exists(key)
            if found is not None:
                return self._parse_json(key, found[0])
        return None

    def _newest_commit_record(self) -> dict[str, Any] | None:
        keys = sorted(i.key for i in self.blobs.list("commits/") if _COMMIT_RE.search(i.key))
        return self._read_json(keys[-1]) if keys else None

    def _state(
        self,
        *,
        tolerate_corrupt: bool = False,
        with_status: bool = True,
        with_commits: bool = True,
        keep_inline: bool = False,
    ) -> _State:
        """Read the store's metadata once.

        ``with_status=False`` skips the latest epoch's end and expected-count records and
        ``with_commits=False`` the commit record (validity depends on neither): fewer
        requests for key readers. ``keep_inline`` keeps the manifests' inline key copies
        (the commit needs every key; other callers drop them to save memory).
        """
        records, ends, expected, degraded = self._list_epoch_files()
        if not with_status:
            ends, expected = {}, {}
        epochs: dict[int, Epoch] = {}
        latest = self._load_epoch(max(records), ends, expected, degraded) if records else None
        if latest is not None:
            epochs[latest.number] = latest
        ids = self.blobs.list_dirs("checkpoints/")
        corrupt: dict[str, str] = {}

        def load(checkpoint_id: str) -> tuple[str, tuple[Checkpoint, str] | None, str | None]:
            try:
                found = self._get_manifest_and_etag(checkpoint_id)
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
        for checkpoint_id, found, error in self._map(load, ids):
            if error is not None:
                corrupt[checkpoint_id] = error
            elif found is None:
                unsealed.append(checkpoint_id)
            else:
                manifests[checkpoint_id], etags[checkpoint_id] = found
        commit_record = self._newest_commit_record() if with_commits else None
        if commit_record is not None:
            # The newest commit record is the authority on what is committed (one atomic write).
            committed_at = str(commit_record.get("created_at"))
            for checkpoint_id in commit_record["checkpoint_ids"]:
                manifest = manifests.get(checkpoint_id)
                if manifest is not None and manifest.status is not CheckpointStatus.COMMITTED:
                    manifests[checkpoint_id] = dataclasses.replace(
                        manifest, status=CheckpointStatus.COMMITTED, committed_at=committed_at
                    )
        snapshot = self._read_snapshot(latest)
        valid = _valid_checkpoints(latest, manifests, snapshot)
        return _State(epochs, latest, manifests, unsealed, corrupt, valid, snapshot, degraded, etags, commit_record)

    def get_checkpoint(self, checkpoint_id: str) -> Checkpoint | None:
        """The manifest of a sealed checkpoint (valid or not), or None. Raises :class:`CorruptCheckpointError`."""
        manifest = self._get_manifest(validate_checkpoint_id(checkpoint_id))
        if manifest is None or manifest.status is CheckpointStatus.COMMITTED:
            return manifest
        record = self._newest_commit_record()
        if record is not None and checkpoint_id in record["checkpoint_ids"]:
            return dataclasses.replace(
                manifest, status=CheckpointStatus.COMMITTED, committed_at=str(record.get("created_at"))
            )
        return manifest

    def list_checkpoints(self) -> list[Checkpoint]:
        """Every sealed checkpoint in the store (valid or not), by seal time."""
        manifests = self._state(with_status=False).manifests.values()
        return sorted(manifests, key=lambda c: (c.sealed_at, c.checkpoint_id))

    def valid_checkpoints(self) -> list[Checkpoint]:
        """The checkpoints whose keys count as done: base of the latest epoch + sealed in it, one per partition."""
        return self._state(with_status=False).valid

    def key_sources(self) -> list[KeySource]:
        """Parts holding every done key (snapshot and valid checkpoints); picklable, for parallel reads."""
        return _key_sources(self._state(with_status=False, with_commits=False))

    def read_key_source(self, source: KeySource) -> pa.Table:
        """Read one part (on any machine that can open this store). Raises :class:`CorruptCheckpointError`."""
        data = source.data if source.data else self.blobs.get(source.key)[0]
        try:
            if source.format == "manifest" and not source.data:
                inline = Checkpoint.from_json(self._parse_json(source.key, data)).inline_keys
                if inline is None:
                    raise CorruptCheckpointError(f"{self.blobs.child_uri(source.key)} carries no inline keys")
                data = inline
            if source.format == "parquet":
                table = pq.read_table(pa.BufferReader(data))
            else:
                with ipc.open_stream(pa.BufferReader(data)) as reader:
                    table = reader.read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            raise CorruptCheckpointError(
                f"{self.blobs.child_uri(source.key)} is corrupt or truncated ({exc}); nothing was changed. "
                "Run `airflow-ckpt check`; discard that checkpoint to reprocess its keys"
            ) from exc
        if KEY_COLUMN not in table.column_names:
            raise CorruptCheckpointError(f"{self.blobs.child_uri(source.key)} has no '{KEY_COLUMN}' column")
        return table.select([KEY_COLUMN])

    def _read_keys(self, sources: Sequence[KeySource]) -> pa.Table:
        tables = self._map(self.read_key_source, sources)
        types = {str(t.schema.field(KEY_COLUMN).type) for t in tables}
        if len(types) > 1:
            raise KeyTypeMismatchError(
                f"the checkpoints of {self.uri} hold keys of different types {sorted(types)}: the key column "
                "changed type between runs. Cast it back to the earlier type, or clear the store to start over"
            )
        if not tables:
            return pa.table({KEY_COLUMN: pa.array([], pa.string())})
        return pa.concat_tables(tables)

    def get_checkpointed_keys(self) -> pa.Table:
        """Every done key: a table with one column ``key``.

        Done means held by the snapshot or by a valid checkpoint (checkpointed or
        committed). Reads are parallel. Raises :class:`KeyTypeMismatchError`,
        :class:`CorruptCheckpointError`.
        """
        # The manifests carry small checkpoints' keys: keep them rather than fetch them twice.
        return self._read_keys(_key_sources(self._state(with_status=False, with_commits=False, keep_inline=True)))

    def key_type(self) -> str | None:
        """The Arrow type (as a string) of the store's done keys, or None if there are none."""
        state = self._state(with_status=False, with_commits=False)
        types = {c.key_type for c in state.valid if c.key_type}
        if state.snapshot and state.snapshot.get("key_type"):
            types.add(state.snapshot["key_type"])
        if len(types) > 1:
            raise KeyTypeMismatchError(f"the checkpoints of {self.uri} hold keys of types {sorted(types)}")
        return types.pop() if types else None

    def _files_of(self, checkpoints: Sequence[Checkpoint]) -> list[FileMetadata]:
        def load(checkpoint: Checkpoint) -> list[FileMetadata]:
            if checkpoint.inline_files is not None:
                return list(checkpoint.inline_files)
            files: list[FileMetadata] = []
            for part in checkpoint.file_parts:
                key = f"checkpoints/{checkpoint.checkpoint_id}/{part}"
                try:
                    data, _ = self.blobs.get(key)
                except BlobNotFoundError:
                    raise CorruptCheckpointError(
                        f"{self.blobs.child_uri(key)} is named by its manifest but missing; nothing was "
                        "changed. Run `airflow-ckpt check`"
                    ) from None
                try:
                    files.extend(FileMetadata.from_json(item) for item in json.loads(data))
                except (ValueError, KeyError, TypeError) as exc:
                    raise CorruptCheckpointError(f"{self.blobs.child_uri(key)} is corrupt ({exc!r})") from exc
            return files

        return [f for files in self._map(load, list(checkpoints)) for f in files]

    def get_checkpointed_files(self) -> list[FileMetadata]:
        """Output files of valid checkpoints that are sealed but not yet committed."""
        state = self._state(with_status=False)
        return self._files_of([c for c in state.valid if c.status is CheckpointStatus.CHECKPOINTED])

    # ------------------------------------------------------------------ commit

    def _intents(self, skip: Iterable[str] = ()) -> _Intents:
        """Recorded output path → (checkpoint id, epoch) that intended to write it, and name patterns.

        ``skip``: checkpoints whose records are not needed (valid ones: their files are
        authoritative anyway), so a healthy commit reads almost no intent records.
        """
        skipped = set(skip)
        infos = [
            i for i in self.blobs.list("checkpoints/") if "/intents/" in i.key and i.key.split("/")[1] not in skipped
        ]

        def load(key: str) -> dict[str, Any]:
            try:
                return self._read_json(key)
            except (BlobNotFoundError, CorruptCheckpointError) as exc:
                # A torn intent record names nothing we could act on; keep going (check() reports it).
                log.warning("ignoring unreadable intent record %s: %s", key, exc)
                return {}

        out: dict[str, tuple[str, int | None]] = {}
        patterns: list[_NamePattern] = []
        for record in self._map(load, [i.key for i in infos]):
            for path in record.get("paths", []):
                out[str(path)] = (str(record["checkpoint_id"]), record.get("epoch"))
            if record.get("name_marker") and record.get("root"):
                patterns.append(
                    _NamePattern(
                        root=str(record["root"]).rstrip("/"),
                        marker=str(record["name_marker"]),
                        checkpoint_id=str(record["checkpoint_id"]),
                        epoch=record.get("epoch"),
                    )
                )
        return _Intents(out, tuple(patterns))

    def commit(self, output_roots: Sequence[str] | None = None, *, degraded: bool = False) -> CommitResult:
        """Make the latest epoch's output authoritative, then delete its orphans.

        Phase 1 writes ``commits/{n}.json`` (every file of every valid checkpoint),
        after verifying that the valid checkpoints' keys are pairwise disjoint, and
        marks those checkpoints committed. Phase 2 deletes orphans under
        ``output_roots`` (default: the roots writers recorded): files some writer of
        this store recorded an intent for that no valid checkpoint owns; aborts
        their incomplete uploads; deletes unsealed and invalid checkpoint
        directories. A file with no intent record is reported in ``unknown_files``,
        never deleted. In a degraded epoch (``degraded=True`` or a recorded trip),
        files of that epoch's unsealed checkpoints are kept (``kept_unprovable``).

        Idempotent and resumable: rerun after a crash in either phase finishes the
        job. Raises :class:`NoEpochError`, :class:`CommitRefusedError` (failed epoch,
        overlapping keys) — nothing deleted in that case.
        """
        state = self._state(keep_inline=True)
        epoch = state.latest
        if epoch is None:
            raise NoEpochError(f"{self.uri} has no epoch: nothing ran against it, so there is nothing to commit")
        commit_key = f"commits/{epoch.number:08d}.json"
        done_key = f"commits/{epoch.number:08d}.done.json"
        done = self.blobs.get_if_exists(done_key)
        if done is not None:
            return _commit_result_from_json(self._parse_json(done_key, done[0]), already=True)

        existing = self.blobs.get_if_exists(commit_key)
        if existing is not None:
            record = self._parse_json(commit_key, existing[0])
        else:
            if epoch.status is EpochStatus.FAILED:
                raise CommitRefusedError(
                    f"epoch {epoch.number} of {self.uri} failed: run the job again to completion (it resumes), "
                    "then commit. Nothing was deleted"
                )
            self._check_disjoint(state)
            files = self._files_of(state.valid)
            record = {
                "epoch": epoch.number,
                "checkpoint_ids": [c.checkpoint_id for c in state.valid],
                "files": [f.to_json() for f in files],
                "degraded": bool(degraded or epoch.degraded),
                "created_at": _now(),
            }
            try:
                self.blobs.put(commit_key, _dumps(record), if_absent=True)
            except PreconditionFailedError:  # a concurrent commit won; use its record
                record = self._read_json(commit_key)
        # Writing the record marked every checkpoint it names committed, in one atomic write:
        # readers take the newest commit record as the authority (manifests are not rewritten).
        failpoint("store.commit.between_phases")
        result = self._delete_orphans(
            state, record, output_roots, degraded=bool(record.get("degraded")) or degraded or epoch.degraded
        )
        self.blobs.put(done_key, _dumps(result.to_json()))
        self._write_epoch_end(epoch.number, EpochStatus.COMMITTED, result.summary())
        return result

    def _check_disjoint(self, state: _State) -> None:
        sources = _key_sources(state)
        if len(sources) <= 1:
            return
        keys = self._read_keys(sources)
        duplicates = _duplicate_keys(keys)
        if not duplicates:
            return
        raise CommitRefusedError(
            f"the valid checkpoints of {self.uri} overlap: {duplicates[0]} keys are held twice "
            f"(e.g. {duplicates[1]!r}); the output would hold their rows twice. This happens when the input's "
            "order is not deterministic or keys were split across tasks. Nothing was deleted; discard the "
            "uncommitted work (`airflow-ckpt discard`) and rerun"
        ) from OverlappingKeysError(repr(duplicates[1]))

    def _committed_paths(self) -> set[str]:
        """Every output path any commit record of this store names."""
        keys = [i.key for i in self.blobs.list("commits/") if not i.key.endswith(".done.json")]
        records = self._map(self._read_json, keys)
        return {str(f["path"]) for record in records for f in record.get("files", [])}

    def _delete_recorded(
        self,
        roots: Sequence[str],
        doomed: Mapping[str, str],
        known: set[str],
        doomed_by_name: Callable[[str], bool] = lambda path: False,
    ) -> tuple[list[str], list[str], list[str], int]:
        """List each output root once; delete files in ``doomed`` (or that ``doomed_by_name`` picks);
        report the unrecorded ones.

        Returns (deleted, aborted uploads, unknown files, bytes freed). ``known``: paths
        that are authoritative or recorded, so not reported as unknown.
        """
        deleted: list[str] = []
        unknown: list[str] = []
        aborted: list[str] = []
        bytes_freed = 0
        # Listing is recursive: a root under another root would list (and delete) twice.
        roots = [r for r in roots if not _under_root(r, [o for o in roots if o != r])]
        for root in roots:
            blobs = self._output_store(root)
            to_delete: list[str] = []
            for info in blobs.list(""):
                path = blobs.child_uri(info.key)
                if path in doomed or (path not in known and doomed_by_name(path)):
                    to_delete.append(info.key)
                    bytes_freed += info.size
                elif path not in known and not _hidden(info.key):
                    unknown.append(path)
            failpoint("store.commit.before_delete_orphans")
            for start in range(0, len(to_delete), 1000):
                chunk = to_delete[start : start + 1000]
                blobs.delete_many(chunk)
                deleted.extend(blobs.child_uri(k) for k in chunk)
                failpoint("store.commit.during_delete_orphans")
            for upload in blobs.list_pending_uploads(""):
                upload_path = blobs.child_uri(upload.key)
                if upload_path in doomed or (upload_path not in known and doomed_by_name(upload_path)):
                    blobs.abort_upload(upload)
                    aborted.append(blobs.child_uri(upload.key))
        return deleted, aborted, unknown, bytes_freed

    def _delete_orphans(
        self,
        state: _State,
        record: Mapping[str, Any],
        output_roots: Sequence[str] | None,
        *,
        degraded: bool,
    ) -> CommitResult:
        epoch_number = int(record["epoch"])
        committed_files = tuple(FileMetadata.from_json(f) for f in record["files"])
        authoritative = {f.path for f in committed_files}
        valid_ids = {c.checkpoint_id for c in state.valid} | set(record["checkpoint_ids"])
        recorded = self._intents(skip=valid_ids)
        intents = recorded.paths
        # Normalized like the writers' paths (file:///abs, s3://bucket/key), whatever form the caller used.
        roots = [self._output_store(r).uri for r in (output_roots or [])] or sorted(
            ({p.rsplit("/", 1)[0] for p in intents} | {p.root for p in recorded.patterns}) - {""}
        )

        def unprovable(checkpoint_id: str, epoch: int | None) -> bool:
            # In a degraded epoch a task may have finished its output but failed to seal.
            if not degraded or checkpoint_id in state.manifests:
                return False
            return epoch is None or epoch == epoch_number

        candidates: dict[str, str] = {}
        kept: list[str] = []
        for path, (checkpoint_id, epoch) in intents.items():
            if path in authoritative or checkpoint_id in valid_ids:
                continue
            if unprovable(checkpoint_id, epoch):
                kept.append(path)
            elif _under_root(path, roots):
                candidates[path] = checkpoint_id

        known = authoritative | set(intents) | self._committed_paths()
        kept_by_name: dict[str, str] = {}

        def doomed_by_name(path: str) -> bool:
            # A native write's file: an orphan unless a valid checkpoint owns it (then it is in ``known``).
            for pattern in recorded.patterns:
                if pattern.matches(path) and _under_root(path, roots):
                    if unprovable(pattern.checkpoint_id, pattern.epoch):
                        kept_by_name[path] = pattern.checkpoint_id
                        return False
                    return True
            return False

        deleted, aborted, unknown, bytes_freed = self._delete_recorded(roots, candidates, known, doomed_by_name)
        unknown = [p for p in unknown if p not in kept_by_name]
        kept.extend(sorted(kept_by_name))

        kept_ids = {intents[p][0] for p in kept if p in intents} | set(kept_by_name.values())
        stale_ids = sorted(({c for c in state.manifests if c not in valid_ids} | set(state.unsealed)) - kept_ids)
        self._delete_checkpoint_dirs(stale_ids)
        return CommitResult(
            epoch=epoch_number,
            committed_checkpoints=tuple(record["checkpoint_ids"]),
            committed_files=committed_files,
            deleted_files=tuple(sorted(deleted)),
            deleted_checkpoints=tuple(stale_ids),
            aborted_uploads=tuple(sorted(aborted)),
            unknown_files=tuple(sorted(unknown)),
            kept_unprovable=tuple(sorted(kept)),
            bytes_freed=bytes_freed,
            degraded=degraded,
            already_committed=False,
        )

    def _delete_checkpoint_dirs(self, checkpoint_ids: Iterable[str]) -> None:
        """Delete checkpoint directories: every manifest first (so a half-deleted checkpoint is
        never visible), then the rest, in batches of 1000 whatever the number of checkpoints."""
        ids = sorted(set(checkpoint_ids))
        if not ids:
            return
        for start in range(0, len(ids), 1000):
            self.blobs.delete_many([f"checkpoints/{i}/manifest.json" for i in ids[start : start + 1000]])
        if len(ids) > 20:  # one listing of everything beats a listing per checkpoint
            wanted = set(ids)
            keys = [i.key for i in self.blobs.list("checkpoints/") if i.key.split("/")[1] in wanted]
        else:
            keys = [info.key for i in ids for info in self.blobs.list(f"checkpoints/{i}/")]
        for start in range(0, len(keys), 1000):
            self.blobs.delete_many(keys[start : start + 1000])

    # ------------------------------------------------------------------ retention and clearing

    def cleanup(self, policy: RetentionPolicy | str) -> list[str]:
        """Apply a retention policy after a successful commit; returns the checkpoint ids removed.

        ``delete_after_success``: every checkpoint directory and snapshot is deleted
        (the next run of this store starts from nothing). ``retain``: committed keys
        are compacted into one snapshot (``snapshots/{n}``), then the compacted
        checkpoints are deleted, so later reads fetch one object. Never deletes
        output files. Idempotent. Raises :class:`CommitRefusedError` if the latest
        epoch is not committed (nothing deleted).
        """
        policy = RetentionPolicy(policy)
        state = self._state()
        epoch = state.latest
        if epoch is None:
            return []
        if not self.blobs.exists(f"commits/{epoch.number:08d}.done.json"):
            raise CommitRefusedError(
                f"epoch {epoch.number} of {self.uri} is not committed: commit first, then clean up"
            )
        failpoint("store.cleanup.start")
        if policy is RetentionPolicy.DELETE_AFTER_SUCCESS:
            ids = sorted(set(state.manifests) | set(state.unsealed))
            self._delete_checkpoint_dirs(ids)
            self._delete_snapshots(keep=None)
            return ids
        return self._compact(state)

    def _compact(self, state: _State) -> list[str]:
        assert state.latest is not None
        committed = [c for c in state.valid if c.status is CheckpointStatus.COMMITTED]
        folded_before = set(state.snapshot["checkpoint_ids"]) if state.snapshot else set()
        new = [c for c in committed if c.checkpoint_id not in folded_before]
        if not new:
            leftovers = sorted(folded_before & (set(state.manifests) | set(state.unsealed)))
            self._delete_checkpoint_dirs(leftovers)
            return leftovers
        number = state.latest.number
        sources = _key_sources(state, only=[c.checkpoint_id for c in new])
        keys = self._read_keys(sources)
        sink = io.BytesIO()
        pq.write_table(keys, sink, compression="zstd")
        prefix = f"snapshots/{number:08d}/"
        self.blobs.put(prefix + "keys.parquet", sink.getvalue())
        failpoint("store.cleanup.after_snapshot_keys")
        manifest = {
            "snapshot": number,
            "checkpoint_ids": sorted(c.checkpoint_id for c in new),
            "num_keys": keys.num_rows,
            "key_type": str(keys.schema.field(KEY_COLUMN).type) if keys.num_rows else None,
            "created_at": _now(),
            "format": "parquet",
        }
        self.blobs.put(prefix + "manifest.json", _dumps(manifest))
        failpoint("store.cleanup.after_snapshot_manifest")
        ids = sorted(c.checkpoint_id for c in new)
        self._delete_checkpoint_dirs(ids)
        self._delete_snapshots(keep=number)
        self._prune_epochs(keep_from=number)
        return ids

    def _delete_snapshots(self, keep: int | None) -> None:
        for name in self.blobs.list_dirs("snapshots/"):
            if keep is not None and name == f"{keep:08d}":
                continue
            prefix = f"snapshots/{name}/"
            self.blobs.delete_many([prefix + "manifest.json"])
            self.blobs.delete_many([i.key for i in self.blobs.list(prefix)])

    def _prune_epochs(self, keep_from: int) -> None:
        """Drop epoch records older than ``keep_from`` - 10 so listings stay short (commit records stay)."""
        cutoff = keep_from - 10
        old = [i.key for i in self.blobs.list("epochs/") if int(i.key[7:15]) < cutoff]
        self.blobs.delete_many(old)

    def cleanup_older_than(self, age: dt.timedelta) -> list[str]:
        """Delete store metadata older than ``age`` that no reader needs; returns what was deleted.

        Removes epoch and degraded records older than ``age`` (never the latest
        epoch's) and invalid or unsealed checkpoint directories whose records are
        all older than ``age`` *and* whose recorded output files are gone (else the
        next commit still needs the record to delete them). Keeps commit records
        (the history of authoritative output). Never deletes output files. Idempotent.
        """
        cutoff = dt.datetime.now(dt.UTC) - age
        state = self._state()
        latest = state.latest.number if state.latest else 0
        deleted: list[str] = []
        for info in self.blobs.list("epochs/"):
            if int(info.key[7:15]) >= latest:
                continue
            record = self.blobs.get_if_exists(info.key)
            created = _record_time(record[0]) if record else None
            if created is not None and created < cutoff:
                deleted.extend(self.blobs.delete_many([info.key]))
        valid_ids = {c.checkpoint_id for c in state.valid}
        recorded = self._intents(skip=valid_ids)
        intents = recorded.paths
        for checkpoint_id in sorted((set(state.manifests) - valid_ids) | set(state.unsealed)):
            records = [i.key for i in self.blobs.list(f"checkpoints/{checkpoint_id}/") if i.key.endswith(".json")]
            times = [_record_time(self.blobs.get(key)[0]) for key in records]
            if any(t is None or t >= cutoff for t in times):
                continue
            paths = [p for p, (cid, _) in intents.items() if cid == checkpoint_id]
            if any(self._output_exists(p) for p in paths):
                continue
            if any(p.checkpoint_id == checkpoint_id and self._pattern_has_files(p) for p in recorded.patterns):
                continue
            self._delete_checkpoint_dirs([checkpoint_id])
            deleted.append(f"checkpoints/{checkpoint_id}/")
        return deleted

    def _pattern_has_files(self, pattern: _NamePattern) -> bool:
        """Whether any file a native write's name pattern covers exists (True when unsure: keep the record)."""
        try:
            blobs = self._output_store(pattern.root)
            return any(pattern.matches(blobs.child_uri(i.key)) for i in blobs.list(""))
        except CheckpointError:
            return True

    def _output_exists(self, path: str) -> bool:
        root, _, name = path.rpartition("/")
        try:
            return self._output_store(root).exists(name)
        except CheckpointError:
            return True  # cannot tell: keep the record

    def _discard(self, *, keep_committed: bool, owner: str) -> ClearResult:
        state = self._state(tolerate_corrupt=True)
        committed = [c for c in state.valid if c.status is CheckpointStatus.COMMITTED] if keep_committed else []
        keep_ids = {c.checkpoint_id for c in committed}
        # Fence every writer first: a new epoch whose base is what survives.
        latest_number = state.latest.number if state.latest else 0
        number = latest_number + 1
        snapshot = state.snapshot if keep_committed else None
        folded = set(snapshot["checkpoint_ids"]) if snapshot else set()
        epoch = Epoch(
            number=number,
            owner=owner,
            created_at=_now(),
            base=tuple(sorted(keep_ids - folded)),
            base_snapshot=None if snapshot is None else int(snapshot["snapshot"]),
            expected_partitions=None,
            metadata={"action": owner},
        )
        try:
            self.blobs.put(_epoch_key(number), _dumps(epoch.to_json()), if_absent=True)
        except PreconditionFailedError:
            raise EpochConflictError(
                f"a submit opened epoch {number} of {self.uri} while clearing; nothing was deleted. Retry"
            ) from None
        if state.latest is not None and state.latest.status is EpochStatus.OPEN:
            self._write_epoch_end(state.latest.number, EpochStatus.FAILED, {"reason": f"{owner} (epoch {number})"})
        committed_paths = self._committed_paths() | {f.path for f in self._files_of(committed)}
        recorded = self._intents(skip=keep_ids)
        doomed = {p: cid for p, (cid, _) in recorded.paths.items() if cid not in keep_ids and p not in committed_paths}
        patterns = [p for p in recorded.patterns if p.checkpoint_id not in keep_ids]
        roots = sorted({p.rsplit("/", 1)[0] for p in doomed} | {p.root for p in patterns})

        def doomed_by_name(path: str) -> bool:
            return any(p.matches(path) for p in patterns)

        deleted, _, _, bytes_freed = self._delete_recorded(roots, doomed, committed_paths, doomed_by_name)
        drop_ids = sorted((set(state.manifests) | set(state.unsealed) | set(state.corrupt)) - keep_ids)
        self._delete_checkpoint_dirs(drop_ids)
        snapshots: list[int] = []
        if not keep_committed:
            snapshots = [int(n) for n in self.blobs.list_dirs("snapshots/")]
            self._delete_snapshots(keep=None)
        self._write_epoch_end(number, EpochStatus.CLEARED, {"action": owner})
        return ClearResult(
            epoch=number,
            deleted_checkpoints=tuple(drop_ids),
            deleted_files=tuple(sorted(deleted)),
            deleted_snapshots=tuple(snapshots),
            bytes_freed=bytes_freed,
        )

    def discard_uncommitted(self) -> ClearResult:
        """Drop every checkpoint that is not committed, and the output files they recorded.

        Opens a new epoch first (so running writers are fenced), whose base is the
        committed checkpoints. Committed checkpoints and committed output stay.
        Idempotent. Raises :class:`EpochConflictError` if a submit races it.
        """
        return self._discard(keep_committed=True, owner="discard_uncommitted")

    def clear(self) -> ClearResult:
        """Reset the store: the next run reprocesses every key.

        Opens a new epoch with an empty base (fencing running writers), deletes
        uncommitted output files the store recorded, every checkpoint and snapshot.
        Committed output files are never deleted. Idempotent.
        """
        return self._discard(keep_committed=False, owner="clear")

    # ------------------------------------------------------------------ inspection

    def progress(self) -> Progress:
        """Where the store stands: epoch, sealed/expected partitions, keys, files, commit."""
        state = self._state()
        epoch = state.latest
        sealed_now = len([c for c in state.valid if epoch is not None and c.epoch == epoch.number])
        snapshot_keys = int(state.snapshot["num_keys"]) if state.snapshot else 0
        last_commit: dict[str, Any] | None = None
        committed = False
        commits = sorted(i.key for i in self.blobs.list("commits/") if i.key.endswith(".done.json"))
        if commits:
            done = self._read_json(commits[-1])
            last_commit = _commit_result_from_json(done, already=False).summary()
            committed = epoch is not None and commits[-1] == f"commits/{epoch.number:08d}.done.json"
        types = {c.key_type for c in state.valid if c.key_type}
        return Progress(
            store_uri=self.uri,
            epoch=epoch,
            sealed_partitions=sealed_now,
            expected_partitions=epoch.expected_partitions if epoch else None,
            valid_checkpoints=len(state.valid),
            keys_done=snapshot_keys + sum(c.num_keys for c in state.valid),
            files=sum(c.num_files for c in state.valid),
            bytes=sum(c.num_bytes for c in state.valid),
            rows=sum(c.num_rows for c in state.valid),
            committed=committed,
            last_commit=last_commit,
            degraded_epochs=tuple(sorted(state.degraded_epochs)),
            key_type=types.pop() if len(types) == 1 else (state.snapshot or {}).get("key_type"),
        )

    def check(self, *, verify_output: bool = True) -> ConsistencyReport:
        """Audit the store without changing it (the consistency checker).

        Problems (guarantees at risk): manifests, epoch, commit or snapshot records
        that do not parse; parts a manifest names that are missing; base checkpoints
        of an uncommitted epoch with no manifest; overlapping keys among valid
        checkpoints; and (``verify_output``) output files missing from their location,
        both of valid checkpoints and of every commit record. Notes (expected after
        crashes, removed by the next commit): dangling unsealed checkpoint
        directories, duplicate sealed attempts of one partition.
        """
        problems: list[str] = []
        notes: list[str] = []
        try:
            state = self._state(tolerate_corrupt=True, keep_inline=True)
        except CorruptCheckpointError as exc:
            return ConsistencyReport(store_uri=self.uri, problems=(f"corrupt store record: {exc}",), notes=())
        for checkpoint_id, error in sorted(state.corrupt.items()):
            problems.append(f"corrupt manifest: {checkpoint_id}: {error}")
        for checkpoint_id in sorted(state.unsealed):
            notes.append(f"dangling (unsealed) checkpoint directory: {checkpoint_id}")
        existing = {i.key for i in self.blobs.list("checkpoints/")}
        for checkpoint in state.manifests.values():
            for part in (*checkpoint.key_parts, *checkpoint.file_parts):
                if f"checkpoints/{checkpoint.checkpoint_id}/{part}" not in existing:
                    problems.append(f"missing part: {checkpoint.checkpoint_id}/{part}")
        seen: dict[tuple[int, int], list[str]] = defaultdict(list)
        for checkpoint in state.manifests.values():
            if checkpoint.partition is not None:
                seen[(checkpoint.epoch, checkpoint.partition)].append(checkpoint.checkpoint_id)
        for (epoch, partition), ids in sorted(seen.items()):
            if len(ids) > 1:
                notes.append(f"duplicate attempts of partition {partition} in epoch {epoch}: {sorted(ids)}")
        latest = state.latest
        if latest is not None and latest.status not in (EpochStatus.COMMITTED, EpochStatus.CLEARED):
            # After a commit, retention may delete the base on purpose; before it, the base must exist.
            folded = set(state.snapshot["checkpoint_ids"]) if state.snapshot else set()
            for checkpoint_id in latest.base:
                if checkpoint_id not in state.manifests and checkpoint_id not in folded:
                    problems.append(f"base checkpoint without manifest: {checkpoint_id}")
        if not problems:
            try:
                self._check_disjoint(state)
            except (CommitRefusedError, KeyTypeMismatchError, CorruptCheckpointError) as exc:
                problems.append(f"keys: {exc}")
        if verify_output and not problems:
            try:
                expected = {f.path for f in self._files_of(state.valid)} | self._committed_paths()
            except CorruptCheckpointError as exc:
                problems.append(f"corrupt store record: {exc}")
            else:
                problems.extend(f"missing output file: {p}" for p in sorted(self._missing_outputs(expected)))
        return ConsistencyReport(store_uri=self.uri, problems=tuple(problems), notes=tuple(notes))

    def _missing_outputs(self, paths: Iterable[str]) -> set[str]:
        """The paths that do not exist, listing each output directory once (not one request per file)."""
        by_dir: dict[str, set[str]] = defaultdict(set)
        for path in paths:
            by_dir[path.rsplit("/", 1)[0]].add(path)
        missing: set[str] = set()
        for directory, wanted in by_dir.items():
            try:
                blobs = self._output_store(directory)
                present = {blobs.child_uri(i.key) for i in blobs.list("") if "/" not in i.key}
            except CheckpointError:
                continue  # cannot tell (unreachable, or not a location we can open): not a finding
            missing |= wanted - present
        return missing


# ---------------------------------------------------------------------- helpers


def _replace(epoch: Epoch, **changes: Any) -> Epoch:
    return dataclasses.replace(epoch, **changes)


def _hidden(key: str) -> bool:
    return any(part.startswith(_HIDDEN_PREFIXES) for part in key.split("/"))


def _record_time(data: bytes) -> dt.datetime | None:
    try:
        record = json.loads(data)
    except ValueError:
        return None
    for field_name in ("ended_at", "created_at", "sealed_at", "at"):
        value = record.get(field_name) if isinstance(record, dict) else None
        if isinstance(value, str):
            try:
                return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                return None
    return None


def _as_key_array(keys: pa.Array | pa.ChunkedArray | Sequence[Any]) -> pa.Array:
    if isinstance(keys, pa.ChunkedArray):
        array = keys.combine_chunks()
    elif isinstance(keys, pa.Array):
        array = keys
    else:
        try:
            array = pa.array(list(keys))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise InvalidKeysError(f"keys must be of one type: {exc}") from exc
    if array.null_count:
        raise InvalidKeysError(
            f"{array.null_count} keys are null: a key identifies input, so it can't be null. "
            "Filter or fill nulls before checkpointing"
        )
    if pa.types.is_nested(array.type) and not pa.types.is_struct(array.type):
        raise InvalidKeysError(f"keys of type {array.type} are not supported: use scalars or a struct")
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array


def _valid_checkpoints(
    latest: Epoch | None, manifests: Mapping[str, Checkpoint], snapshot: Mapping[str, Any] | None
) -> list[Checkpoint]:
    """DESIGN invariant 3: base of the latest epoch + sealed in it, one per partition."""
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


def _key_sources(state: _State, only: Sequence[str] | None = None) -> list[KeySource]:
    """The snapshot (if it holds keys) and the keys of the valid checkpoints (or of ``only``).

    A checkpoint whose manifest carries its keys is one source (the manifest, with the
    bytes when the state kept them); others contribute each key part.
    """
    sources: list[KeySource] = []
    if state.snapshot is not None and int(state.snapshot.get("num_keys", 0)):
        number = int(state.snapshot["snapshot"])
        sources.append(KeySource(key=f"snapshots/{number:08d}/keys.parquet", format="parquet"))
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


def _ipc_bytes(arrays: Sequence[pa.Array]) -> bytes:
    """Keys as an Arrow IPC stream with one column ``key``."""
    table = pa.table({KEY_COLUMN: pa.chunked_array(arrays)})
    sink = io.BytesIO()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _duplicate_keys(keys: pa.Table) -> tuple[int, list[Any]] | None:
    """(number of surplus keys, a few examples) if any key appears twice, else None."""
    flat = keys.flatten()
    counts = flat.group_by(flat.column_names).aggregate([([], "count_all")])
    if counts.num_rows == keys.num_rows:
        return None
    surplus = keys.num_rows - counts.num_rows
    dupes = counts.filter(pc.greater(counts.column("count_all"), 1)).drop_columns(["count_all"])
    return surplus, dupes.slice(0, 5).to_pylist()


def _commit_result_from_json(data: Mapping[str, Any], *, already: bool) -> CommitResult:
    return CommitResult(
        epoch=int(data["epoch"]),
        committed_checkpoints=tuple(data["committed_checkpoints"]),
        committed_files=tuple(FileMetadata.from_json(f) for f in data["committed_files"]),
        deleted_files=tuple(data["deleted_files"]),
        deleted_checkpoints=tuple(data["deleted_checkpoints"]),
        aborted_uploads=tuple(data.get("aborted_uploads", ())),
        unknown_files=tuple(data.get("unknown_files", ())),
        kept_unprovable=tuple(data.get("kept_unprovable", ())),
        bytes_freed=int(data.get("bytes_freed", 0)),
        degraded=bool(data.get("degraded", False)),
        already_committed=already,
    )
