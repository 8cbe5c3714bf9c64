"""Epochs: the fencing between submits (docs/design.md, invariant 3).

Each submit opens epoch *n+1* by creating ``epochs/{n+1}.json`` if absent, so two
racing submits cannot both win; a writer of an older epoch is a zombie. Beside the
record live its end record, its expected partition count and its degraded markers.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.store.blobs.base import BlobNotFoundError
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.errors import (
    CorruptCheckpointError,
    EpochConflictError,
    PreconditionFailedError,
)
from airflow_ckpt_provider.store.layout import (
    DEGRADED_RE,
    EPOCH_END_RE,
    EPOCH_EXPECTED_RE,
    EPOCH_RE,
    KEYS_DELETED_RE,
    OUTPUT_DECLARATION_RE,
    SKIP_AUDIT_RE,
    epoch_key,
    keys_deleted_key,
)
from airflow_ckpt_provider.store.model import Epoch, EpochStatus
from airflow_ckpt_provider.store.records import dumps, now
from airflow_ckpt_provider.store.reprocess.maintenance import refuse_unfinished_maintenance

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EpochFiles:
    """One listing of ``epochs/``: record keys by epoch number, end records, expected counts, degraded epochs."""

    records: dict[int, str]
    ends: dict[int, str]
    expected: dict[int, str]
    degraded: set[int]
    #: Keys of the output roots the Spark driver declared, by epoch (docs/design.md, section 7).
    outputs: dict[int, list[str]] = dataclasses.field(default_factory=dict)
    #: Keys of the skip audits the runs recorded, by epoch (store/input_audit.py).
    skip_audits: dict[int, list[str]] = dataclasses.field(default_factory=dict)
    #: Epochs whose commit a ``delete_after_success`` cleanup followed (``Epoch.keys_deleted``).
    keys_deleted: set[int] = dataclasses.field(default_factory=set)


@dataclasses.dataclass(frozen=True)
class EpochBase:
    """What a new epoch builds on: the checkpoints considered done, the snapshot holding the keys
    compacted before them, and how many keys and rows they hold (None: not counted)."""

    checkpoint_ids: tuple[str, ...] = ()
    snapshot: int | None = None
    keys: int | None = None
    rows: int | None = None


class EpochLog:
    """Reads and writes the epoch records of one store."""

    def __init__(self, context: StoreContext) -> None:
        self._context = context
        self._blobs = context.blobs
        self._lock = threading.Lock()
        self._degraded_marked: set[int] = set()

    @property
    def marked_degraded(self) -> bool:
        """True once this process recorded a degraded epoch."""
        return bool(self._degraded_marked)

    def list_files(self) -> EpochFiles:
        records: dict[int, str] = {}
        ends: dict[int, str] = {}
        expected: dict[int, str] = {}
        degraded: set[int] = set()
        outputs: dict[int, list[str]] = {}
        skip_audits: dict[int, list[str]] = {}
        keys_deleted: set[int] = set()
        for info in self._blobs.list("epochs/"):
            name = info.key.rsplit("/", 1)[-1]
            for regex, target in ((EPOCH_RE, records), (EPOCH_END_RE, ends), (EPOCH_EXPECTED_RE, expected)):
                match = regex.match(name)
                if match:
                    # Empty: a write cut short on a server whose PUT is not atomic, by a process that died.
                    # It never happened (the next begin_epoch takes an empty record's place, BlobStore.put).
                    if info.size:
                        target[int(match.group(1))] = info.key
                    break
            else:
                match = DEGRADED_RE.match(name)
                if match:
                    degraded.add(int(match.group(1)))
                match = OUTPUT_DECLARATION_RE.match(name)
                if match:
                    outputs.setdefault(int(match.group(1)), []).append(info.key)
                match = SKIP_AUDIT_RE.match(name)
                if match and info.size:
                    skip_audits.setdefault(int(match.group(1)), []).append(info.key)
                # Its presence is the record (an empty one too: the cleanup wrote it before deleting anything).
                match = KEYS_DELETED_RE.match(name)
                if match:
                    keys_deleted.add(int(match.group(1)))
        return EpochFiles(records, ends, expected, degraded, outputs, skip_audits, keys_deleted)

    def load(self, number: int, files: EpochFiles) -> Epoch:
        """Epoch ``number`` with its status, expected count and degraded flag from ``files``."""
        record = Epoch.from_json(self._context.read_json(epoch_key(number)))
        changes: dict[str, Any] = {"degraded": number in files.degraded, "keys_deleted": number in files.keys_deleted}
        if number in files.ends:
            end = self._context.read_json(files.ends[number])
            changes["status"] = EpochStatus(end["status"])
            changes["ended_at"] = end.get("ended_at")
        if number in files.expected:
            changes["expected_partitions"] = int(self._context.read_json(files.expected[number])["expected_partitions"])
        return dataclasses.replace(record, **changes)

    def current(self) -> Epoch | None:
        files = self.list_files()
        if not files.records:
            return None
        return self.load(max(files.records), files)

    def all(self, since: int | None = None) -> list[Epoch]:
        files = self.list_files()
        numbers = sorted(n for n in files.records if since is None or n >= since)
        return self._context.map(lambda n: self.load(n, files), numbers)

    def is_degraded(self, epoch: int) -> bool:
        return any(True for _ in self._blobs.list(epoch_key(epoch, ".degraded-")))

    def is_current(self, epoch: int) -> bool:
        return not self._blobs.exists(epoch_key(epoch + 1))

    def begin(
        self,
        latest: Epoch | None,
        base: EpochBase,
        *,
        owner: str | None,
        expected_partitions: int | None,
        metadata: Mapping[str, Any] | None,
        takeover: bool,
        output_roots: tuple[str, ...] | None = None,
        takeover_epoch: int | None = None,
    ) -> Epoch:
        """Open the epoch after ``latest`` on ``base`` (the valid checkpoints of the state ``latest`` was read with),
        recording ``output_roots`` (canonical: ``OutputRoots.declarable``).
        ``takeover_epoch``: take over the open latest epoch only if it is that one (the caller found its
        owner dead); the create-if-absent of the next number makes the check and the takeover one step."""
        refuse_unfinished_maintenance(self._context.uri, latest, "submit")
        held_by_other = latest is not None and (owner is None or latest.owner != owner)
        taken_over = takeover or (takeover_epoch is not None and latest is not None and latest.number == takeover_epoch)
        if latest is not None and latest.status is EpochStatus.OPEN and not taken_over and held_by_other:
            raise EpochConflictError(
                f"epoch {latest.number} of {self._context.uri} is still open (owner {latest.owner!r}, opened "
                f"{latest.created_at}): another submit may be running on this store. Wait for it. If it is "
                "dead, take its epoch over and keep its finished work (CheckpointedSparkSubmitOperator("
                "takeover_open_epoch=True)), or end it and drop its uncommitted work "
                f"(`airflow-ckpt discard {self._context.uri}`)",
                reason="epoch_open",
            )
        number = (latest.number if latest else 0) + 1
        epoch = self.open_fencing(
            number,
            owner=owner,
            base=base,
            metadata=metadata,
            expected_partitions=expected_partitions,
            output_roots=output_roots,
            conflict=(
                f"another submit opened epoch {number} of {self._context.uri} at the same time; only one run may "
                "use a store at once. Retry after it finishes, or give each run its own checkpoint_uri"
            ),
            failpoints="store.begin_epoch",
        )
        self.end_superseded(latest, f"superseded by epoch {number}")
        log.info("opened epoch %d of %s with %d base checkpoints", number, self._context.uri, len(epoch.base))
        return epoch

    def open_fencing(
        self,
        number: int,
        *,
        owner: str | None,
        base: EpochBase,
        metadata: Mapping[str, Any] | None,
        conflict: str,
        expected_partitions: int | None = None,
        output_roots: tuple[str, ...] | None = None,
        extra: Mapping[str, Any] | None = None,
        failpoints: str | None = None,
    ) -> Epoch:
        """Create epoch ``number`` (create-if-absent), the one way every epoch is opened: from then on
        every writer of an older epoch is fenced. ``extra``: fields recorded beside the epoch's own (a
        maintenance plan). ``failpoints``: the prefix of the ``before_create``/``after_create`` points.
        Raises :class:`EpochConflictError` with ``conflict`` if another caller created it first."""
        epoch = Epoch(
            number=number,
            owner=owner,
            created_at=now(),
            base=base.checkpoint_ids,
            base_snapshot=base.snapshot,
            base_keys=base.keys,
            base_rows=base.rows,
            expected_partitions=expected_partitions,
            metadata=dict(metadata or {}),
            output_roots=output_roots,
        )
        if failpoints:
            failpoint(f"{failpoints}.before_create")
        try:
            self._blobs.put(epoch_key(number), dumps(epoch.to_json() | dict(extra or {})), if_absent=True)
        except PreconditionFailedError:
            raise EpochConflictError(conflict, reason="epoch_open") from None
        if failpoints:
            failpoint(f"{failpoints}.after_create")
        return epoch

    def end_superseded(self, previous: Epoch | None, reason: str) -> None:
        """End ``previous`` as failed with ``reason`` if it is still open (a newer epoch superseded it)."""
        if previous is not None and previous.status is EpochStatus.OPEN:
            self.write_end(previous.number, EpochStatus.FAILED, {"reason": reason})

    def read_record(self, number: int) -> Epoch | None:
        data = self.read_optional(epoch_key(number))
        if not data:
            return None
        try:
            return Epoch.from_json(data)
        except (KeyError, TypeError, ValueError):
            return None  # a record that does not parse declares nothing (check() reports it)

    def read_optional(self, key: str) -> dict[str, Any] | None:
        try:
            return self._context.read_json(key)
        except (BlobNotFoundError, CorruptCheckpointError):
            return None

    def set_expected_partitions(self, epoch: int, count: int) -> None:
        self._blobs.put(epoch_key(epoch, ".expected.json"), dumps({"expected_partitions": int(count)}))

    def record_keys_deleted(self, epoch: int) -> None:
        """Record that the keys of the commit of ``epoch`` no longer count (``delete_after_success``), before
        anything is deleted: a cleanup cut short then leaves checkpoints that count for nothing, never a
        partial set of committed keys that a next run would skip (and its commit keep beside a copy).
        Idempotent."""
        self._blobs.put(keys_deleted_key(epoch), dumps({"epoch": epoch, "policy": "delete_after_success", "at": now()}))

    def write_end(self, epoch: int, status: EpochStatus, summary: Mapping[str, Any] | None) -> None:
        record = {"status": status.value, "ended_at": now(), "summary": dict(summary or {})}
        self._blobs.put(epoch_key(epoch, ".end.json"), dumps(record))

    def mark_degraded(self, epoch: int, reason: str) -> None:
        """Best effort, once per epoch and process; never raises (the job's result carries the flag)."""
        with self._lock:
            if epoch in self._degraded_marked:
                return
            self._degraded_marked.add(epoch)
        try:
            self._blobs.put(
                epoch_key(epoch, f".degraded-{uuid.uuid4().hex}.json"),
                dumps({"epoch": epoch, "reason": reason, "at": now()}),
            )
        except Exception as exc:  # the store is likely down; the job result carries the flag
            log.info("could not record degraded epoch %d in %s: %s", epoch, self._context.uri, exc)
