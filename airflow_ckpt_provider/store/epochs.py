"""Epochs: the fencing between submits (docs/store-api.md, "Invariants" 3).

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
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.errors import EpochConflictError, PreconditionFailedError
from airflow_ckpt_provider.store.layout import (
    DEGRADED_RE,
    EPOCH_END_RE,
    EPOCH_EXPECTED_RE,
    EPOCH_RE,
    epoch_key,
)
from airflow_ckpt_provider.store.model import Epoch, EpochStatus
from airflow_ckpt_provider.store.records import dumps, now
from airflow_ckpt_provider.store.reprocess.maintenance import refuse_unfinished_maintenance

if TYPE_CHECKING:
    from airflow_ckpt_provider.store.state import StoreState

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EpochFiles:
    """One listing of ``epochs/``: record keys by epoch number, end records, expected counts, degraded epochs."""

    records: dict[int, str]
    ends: dict[int, str]
    expected: dict[int, str]
    degraded: set[int]


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
        for info in self._blobs.list("epochs/"):
            name = info.key.rsplit("/", 1)[-1]
            for regex, target in ((EPOCH_RE, records), (EPOCH_END_RE, ends), (EPOCH_EXPECTED_RE, expected)):
                match = regex.match(name)
                if match:
                    target[int(match.group(1))] = info.key
                    break
            else:
                match = DEGRADED_RE.match(name)
                if match:
                    degraded.add(int(match.group(1)))
        return EpochFiles(records, ends, expected, degraded)

    def load(self, number: int, files: EpochFiles) -> Epoch:
        """Epoch ``number`` with its status, expected count and degraded flag from ``files``."""
        record = Epoch.from_json(self._context.read_json(epoch_key(number)))
        changes: dict[str, Any] = {"degraded": number in files.degraded}
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

    def all(self) -> list[Epoch]:
        files = self.list_files()
        return self._context.map(lambda n: self.load(n, files), sorted(files.records))

    def is_degraded(self, epoch: int) -> bool:
        return any(True for _ in self._blobs.list(epoch_key(epoch, ".degraded-")))

    def is_current(self, epoch: int) -> bool:
        return not self._blobs.exists(epoch_key(epoch + 1))

    def begin(
        self,
        state: StoreState,
        *,
        owner: str | None,
        expected_partitions: int | None,
        metadata: Mapping[str, Any] | None,
        takeover: bool,
    ) -> Epoch:
        """Open the epoch after ``state.latest`` with ``state``'s valid checkpoints as its base."""
        latest = state.latest
        refuse_unfinished_maintenance(self._context.uri, latest, "submit")
        held_by_other = latest is not None and (owner is None or latest.owner != owner)
        if latest is not None and latest.status is EpochStatus.OPEN and not takeover and held_by_other:
            raise EpochConflictError(
                f"epoch {latest.number} of {self._context.uri} is still open (owner {latest.owner!r}, opened "
                f"{latest.created_at}): another submit may be running on this store. Wait for it. If it is "
                "dead, take its epoch over and keep its finished work (CheckpointedSparkSubmitOperator("
                "takeover_open_epoch=True)), or end it and drop its uncommitted work "
                f"(`airflow-ckpt discard {self._context.uri}`)"
            )
        number = (latest.number if latest else 0) + 1
        snapshot_number = None if state.snapshot is None else int(state.snapshot["snapshot"])
        folded = set(state.snapshot["checkpoint_ids"]) if state.snapshot else set()
        base_checkpoints = [c for c in state.valid if c.checkpoint_id not in folded]
        base = tuple(sorted(c.checkpoint_id for c in base_checkpoints))
        epoch = Epoch(
            number=number,
            owner=owner,
            created_at=now(),
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
            self._blobs.put(epoch_key(number), dumps(epoch.to_json()), if_absent=True)
        except PreconditionFailedError:
            raise EpochConflictError(
                f"another submit opened epoch {number} of {self._context.uri} at the same time; only one run may "
                "use a store at once. Retry after it finishes, or give each run its own checkpoint_uri"
            ) from None
        failpoint("store.begin_epoch.after_create")
        if latest is not None and latest.status is EpochStatus.OPEN:
            self.write_end(latest.number, EpochStatus.FAILED, {"reason": f"superseded by epoch {number}"})
        log.info("opened epoch %d of %s with %d base checkpoints", number, self._context.uri, len(base))
        return epoch

    def create_fencing_epoch(self, epoch: Epoch, conflict_message: str) -> None:
        """Create ``epoch`` (create-if-absent) to fence every writer; :class:`EpochConflictError` if a submit won."""
        try:
            self._blobs.put(epoch_key(epoch.number), dumps(epoch.to_json()), if_absent=True)
        except PreconditionFailedError:
            raise EpochConflictError(conflict_message) from None

    def set_expected_partitions(self, epoch: int, count: int) -> None:
        self._blobs.put(epoch_key(epoch, ".expected.json"), dumps({"expected_partitions": int(count)}))

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
