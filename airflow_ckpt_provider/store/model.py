"""Plain records of the checkpoint store. All are immutable and JSON-round-trippable."""

from __future__ import annotations

import base64
import dataclasses
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_ckpt_provider.store.errors import CorruptCheckpointError

#: The manifest format this version writes and reads: the attempt's parts under ``attempts/{id}/``.
MANIFEST_FORMAT = 2
#: Epoch metadata (and commit record field) naming the job a run was for: what writes one output
#: (store/rerun.py). ``store.epochs.begin`` always records one.
JOB_METADATA_KEY = "job"


class CheckpointStatus(enum.StrEnum):
    CHECKPOINTED = "checkpointed"
    COMMITTED = "committed"


class UnknownFiles(enum.StrEnum):
    """What a commit does with files under its output roots that no writer of its store recorded.

    ``FAIL`` (default): refuse the commit with :class:`RefusedError` (``unknown_output_files``) (nothing committed or
    deleted): a reader of the output would see them beside the committed files. ``KEEP``: commit,
    keep them and report them in ``CommitResult.unknown_files`` (the caller vouches for them).
    The same holds for live files of an earlier commit of the store that the commit cannot attribute
    (``earlier_output_live``, store/rerun.py): ``KEEP`` keeps them as output beside this commit's, for good.
    """

    FAIL = "fail"
    KEEP = "keep"


class RetentionPolicy(enum.StrEnum):
    """What the commit keeps of the checkpoint data.

    ``DELETE_AFTER_SUCCESS``: per-run resume. After a successful commit every
    checkpoint of the store is deleted; the next run starts from nothing.
    ``RETAIN``: incremental processing (job bookmarks). Committed keys stay,
    compacted into one snapshot so that a run reads one object, not every checkpoint.
    """

    DELETE_AFTER_SUCCESS = "delete_after_success"
    RETAIN = "retain"


@dataclass(frozen=True)
class FileMetadata:
    """An output file a checkpoint produced. ``path`` is an absolute URI (``file:///…`` or ``s3://…``)."""

    path: str
    size_bytes: int
    num_rows: int
    format: str = "parquet"

    def to_json(self) -> dict[str, Any]:
        # Not dataclasses.asdict (a deep copy per field): a commit writes one per output file.
        return {"path": self.path, "size_bytes": self.size_bytes, "num_rows": self.num_rows, "format": self.format}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FileMetadata:
        return cls(
            path=str(data["path"]),
            size_bytes=int(data["size_bytes"]),
            num_rows=int(data["num_rows"]),
            format=str(data.get("format", "parquet")),
        )


@dataclass(frozen=True)
class Checkpoint:
    """A sealed checkpoint (its manifest)."""

    checkpoint_id: str
    status: CheckpointStatus
    epoch: int
    partition: int | None
    created_at: str
    sealed_at: str
    committed_at: str | None
    key_parts: tuple[str, ...]
    file_parts: tuple[str, ...]
    num_keys: int
    key_type: str | None
    num_files: int
    num_bytes: int
    num_rows: int
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: Copies of small key sets (Arrow IPC stream) and file lists carried in the manifest, so a
    #: reader needs one request per checkpoint instead of one per part. The parts stay the source.
    inline_keys: bytes | None = field(default=None, repr=False, compare=False)
    inline_files: tuple[FileMetadata, ...] | None = field(default=None, repr=False, compare=False)

    def to_json(self, *, manifest: bool = False) -> dict[str, Any]:
        """The record as JSON. ``manifest=True``: the stored form, with the inline copies."""
        data = dataclasses.asdict(self)
        data["status"] = self.status.value
        data["key_parts"] = list(self.key_parts)
        data["file_parts"] = list(self.file_parts)
        data["metadata"] = dict(self.metadata)
        data.pop("inline_keys")
        data.pop("inline_files")
        data["format_version"] = MANIFEST_FORMAT
        if manifest:
            if self.inline_keys is not None:
                data["inline_keys"] = base64.b64encode(self.inline_keys).decode()
            if self.inline_files is not None:
                data["inline_files"] = [f.to_json() for f in self.inline_files]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Checkpoint:
        format_version = data.get("format_version")
        if format_version != MANIFEST_FORMAT:
            raise CorruptCheckpointError(
                f"the manifest of checkpoint {data.get('checkpoint_id')!r} has format {format_version}, which this "
                f"version does not read (it reads format {MANIFEST_FORMAT}): another airflow-ckpt-provider wrote it. "
                "Nothing was changed; upgrade every process that reads this store (Airflow workers, the API server, "
                "the Spark job's environment) to one version, then run `airflow-ckpt check`",
                reason="corrupt",
            )
        return cls(
            checkpoint_id=str(data["checkpoint_id"]),
            status=CheckpointStatus(data["status"]),
            epoch=int(data["epoch"]),
            partition=None if data.get("partition") is None else int(data["partition"]),
            created_at=str(data["created_at"]),
            sealed_at=str(data["sealed_at"]),
            committed_at=data.get("committed_at"),
            key_parts=tuple(str(p) for p in data["key_parts"]),
            file_parts=tuple(str(p) for p in data["file_parts"]),
            num_keys=int(data["num_keys"]),
            key_type=data.get("key_type"),
            num_files=int(data["num_files"]),
            num_bytes=int(data["num_bytes"]),
            num_rows=int(data["num_rows"]),
            metadata=dict(data.get("metadata") or {}),
            inline_keys=None if data.get("inline_keys") is None else base64.b64decode(data["inline_keys"]),
            inline_files=(
                None
                if data.get("inline_files") is None
                else tuple(FileMetadata.from_json(f) for f in data["inline_files"])
            ),
        )


class EpochStatus(enum.StrEnum):
    OPEN = "open"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    COMMITTED = "committed"
    CLEARED = "cleared"
    #: A reprocess, rewind or purge finished: keys are pending, a run must come before a commit.
    RETRACTED = "retracted"
    #: An undo of a reprocess finished: the store holds what it held before the reprocess.
    RESTORED = "restored"


@dataclass(frozen=True)
class Epoch:
    """One submit's view of the store.

    ``base`` is the exact set of checkpoint ids considered done when the epoch
    began; ``base_snapshot`` the snapshot (compacted committed keys) it builds on.
    ``base_keys`` / ``base_rows``: how many keys (snapshot included) and rows that
    base holds, counted when the epoch began (None in records written before 0.1's
    stores recorded them), so a submit can report what it skips without reading
    every manifest again. ``output_roots``: where the side that opened the epoch (the
    operator) declared its job writes output; deletions never reach beyond them and the
    store root (docs/design.md, section 7). None: not declared (the driver may still
    declare each write's root). ``keys_deleted``: the epoch's commit was followed by a
    ``delete_after_success`` cleanup, which recorded it before deleting anything: none of
    its checkpoints counts any more, whatever the cleanup left (read from the listing, never
    written into the record, like ``degraded``).
    """

    number: int
    owner: str | None
    created_at: str
    base: tuple[str, ...]
    base_snapshot: int | None
    expected_partitions: int | None
    metadata: Mapping[str, Any]
    status: EpochStatus = EpochStatus.OPEN
    degraded: bool = False
    ended_at: str | None = None
    base_keys: int | None = None
    base_rows: int | None = None
    output_roots: tuple[str, ...] | None = None
    keys_deleted: bool = False

    @property
    def job(self) -> str | None:
        """The job the run of this epoch was for (``JOB_METADATA_KEY``); None for an epoch no run opened
        (a reprocess, a clear) and for a record written before every epoch recorded its job."""
        value = self.metadata.get(JOB_METADATA_KEY)
        return value if isinstance(value, str) and value else None

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": 1,
            "epoch": self.number,
            "owner": self.owner,
            "created_at": self.created_at,
            "base": list(self.base),
            "base_snapshot": self.base_snapshot,
            "base_keys": self.base_keys,
            "base_rows": self.base_rows,
            "expected_partitions": self.expected_partitions,
            "metadata": dict(self.metadata),
            "output_roots": None if self.output_roots is None else list(self.output_roots),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Epoch:
        return cls(
            number=int(data["epoch"]),
            owner=data.get("owner"),
            created_at=str(data["created_at"]),
            base=tuple(str(i) for i in data["base"]),
            base_snapshot=None if data.get("base_snapshot") is None else int(data["base_snapshot"]),
            expected_partitions=(None if data.get("expected_partitions") is None else int(data["expected_partitions"])),
            metadata=dict(data.get("metadata") or {}),
            base_keys=None if data.get("base_keys") is None else int(data["base_keys"]),
            base_rows=None if data.get("base_rows") is None else int(data["base_rows"]),
            output_roots=_roots(data.get("output_roots")),
        )


def _roots(value: Any) -> tuple[str, ...] | None:
    """Declared output roots as recorded (a list of strings); anything else declares none."""
    if not isinstance(value, list):
        return None
    return tuple(str(v) for v in value if isinstance(v, str))


@dataclass(frozen=True)
class CommitResult:
    """What a commit did. ``unknown_files`` were found under the output roots with no
    record of any writer of this store: they are reported, never deleted.
    ``refused_records``: what intent records named outside the declared output roots (or
    with an unusable name marker): never acted on. ``undeclared_output_files``: orphans kept
    because the store declares no output root and no ``output_roots`` were given."""

    epoch: int
    committed_checkpoints: tuple[str, ...]
    committed_files: tuple[FileMetadata, ...]
    deleted_files: tuple[str, ...]
    deleted_checkpoints: tuple[str, ...]
    aborted_uploads: tuple[str, ...]
    unknown_files: tuple[str, ...]
    kept_unprovable: tuple[str, ...]
    bytes_freed: int
    degraded: bool
    already_committed: bool
    output_roots: tuple[str, ...] = ()
    refused_records: tuple[str, ...] = ()
    undeclared_output_files: tuple[str, ...] = ()
    #: Files of earlier commits of the same job that this commit retracted (a re-run replaced them).
    replaced_files: tuple[str, ...] = ()
    #: Keys the committed checkpoints hold (the snapshot's not counted).
    committed_keys: int = 0
    #: Live files of earlier commits the commit could not attribute, kept knowingly (``unknown_files="keep"``).
    kept_earlier_files: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "replaced_files": list(self.replaced_files),
            "committed_keys": self.committed_keys,
            "committed_checkpoints": list(self.committed_checkpoints),
            "committed_files": [f.to_json() for f in self.committed_files],
            "deleted_files": list(self.deleted_files),
            "deleted_checkpoints": list(self.deleted_checkpoints),
            "aborted_uploads": list(self.aborted_uploads),
            "unknown_files": list(self.unknown_files),
            "kept_unprovable": list(self.kept_unprovable),
            "bytes_freed": self.bytes_freed,
            "degraded": self.degraded,
            "already_committed": self.already_committed,
            "output_roots": list(self.output_roots),
            "refused_records": list(self.refused_records),
            "undeclared_output_files": list(self.undeclared_output_files),
            "kept_earlier_files": list(self.kept_earlier_files),
        }

    def summary(self) -> dict[str, Any]:
        """Counts only: safe for XCom and logs."""
        return {
            "epoch": self.epoch,
            "checkpoints_committed": len(self.committed_checkpoints),
            "keys_committed": self.committed_keys,
            "files_committed": len(self.committed_files),
            "rows_committed": sum(f.num_rows for f in self.committed_files),
            "bytes_committed": sum(f.size_bytes for f in self.committed_files),
            "orphans_deleted": len(self.deleted_files),
            "checkpoints_deleted": len(self.deleted_checkpoints),
            "uploads_aborted": len(self.aborted_uploads),
            "unknown_files": len(self.unknown_files),
            "kept_unprovable": len(self.kept_unprovable),
            "refused_records": len(self.refused_records),
            "undeclared_output_files": len(self.undeclared_output_files),
            "files_replaced": len(self.replaced_files),
            "earlier_files_kept": len(self.kept_earlier_files),
            "bytes_freed": self.bytes_freed,
            "degraded": self.degraded,
            "already_committed": self.already_committed,
        }


@dataclass(frozen=True)
class ClearResult:
    """What ``clear()`` or ``discard_uncommitted()`` deleted, and which recorded output files it
    kept: ``undeclared_output_files`` because nothing declares an output root (no epoch of the
    store, or the DAG declares none), ``refused_records`` because a record named something outside the
    declared roots (never acted on; ``check()`` reports them)."""

    epoch: int
    deleted_checkpoints: tuple[str, ...]
    deleted_files: tuple[str, ...]
    deleted_snapshots: tuple[int, ...]
    bytes_freed: int
    output_roots: tuple[str, ...] = ()
    undeclared_output_files: tuple[str, ...] = ()
    refused_records: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {
            "deleted_checkpoints": list(self.deleted_checkpoints),
            "deleted_files": list(self.deleted_files),
            "deleted_snapshots": list(self.deleted_snapshots),
            "output_roots": list(self.output_roots),
            "undeclared_output_files": list(self.undeclared_output_files),
            "refused_records": list(self.refused_records),
        }


@dataclass(frozen=True)
class StoreContents:
    """Everything a store holds, from one read: what a clear or discard preview counts."""

    store_uri: str
    #: The latest epoch's number (None: nothing ever ran), and whether it is still open.
    epoch: int | None
    epoch_open: bool
    #: Every sealed checkpoint, valid or not.
    checkpoints: tuple[Checkpoint, ...]
    valid_ids: frozenset[str]
    #: Checkpoint directories of attempts that never sealed (leftovers the commit deletes).
    unsealed_ids: tuple[str, ...]
    #: Numbers of the compacted key snapshots present (``retain``).
    snapshots: tuple[int, ...]
    keys_done: int
    #: The output roots deletions may touch (declared when epochs opened, docs/design.md section 7);
    #: empty with ``output_roots_declared`` False when no epoch of the store declares one.
    output_roots: tuple[str, ...] = ()
    output_roots_declared: bool = False
    #: Who declares no output root when the store was opened with none (e.g. "DAG task 'd.t'"):
    #: every output file is kept. None otherwise.
    output_roots_undeclared_by: str | None = None
    #: What ``progress()`` says, from the same read (a page needs both, and reads the store once).
    progress: Progress | None = None

    @property
    def uncommitted(self) -> list[Checkpoint]:
        return [c for c in self.checkpoints if c.status is not CheckpointStatus.COMMITTED]


@dataclass(frozen=True)
class Progress:
    """A store's state at a glance (what the UI, CLI, hook and sensor show)."""

    store_uri: str
    epoch: Epoch | None
    sealed_partitions: int
    expected_partitions: int | None
    valid_checkpoints: int
    keys_done: int
    files: int
    bytes: int
    rows: int
    committed: bool
    last_commit: Mapping[str, Any] | None
    degraded_epochs: tuple[int, ...]
    key_type: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "store_uri": self.store_uri,
            "epoch": None
            if self.epoch is None
            else self.epoch.to_json() | {"status": self.epoch.status.value, "degraded": self.epoch.degraded},
            "sealed_partitions": self.sealed_partitions,
            "expected_partitions": self.expected_partitions,
            "valid_checkpoints": self.valid_checkpoints,
            "keys_done": self.keys_done,
            "files": self.files,
            "bytes": self.bytes,
            "rows": self.rows,
            "committed": self.committed,
            "last_commit": None if self.last_commit is None else dict(self.last_commit),
            "degraded_epochs": list(self.degraded_epochs),
            "key_type": self.key_type,
        }


@dataclass(frozen=True)
class KeySource:
    """One object holding done keys (a checkpoint's key part, a segment or the snapshot). Picklable."""

    key: str
    #: "arrow" (IPC stream), "parquet" (snapshot), "manifest" (keys inline in a manifest) or "segment".
    format: str = "arrow"
    data: bytes | None = field(default=None, repr=False)  # the inline keys, when the reader has them
    #: "segment" only: checkpoints whose keys the segment holds but that are not done (read without them).
    exclude: tuple[str, ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class ConsistencyReport:
    """What ``check()`` found. ``problems`` break guarantees; ``notes`` are expected leftovers
    (dangling directories of failed attempts, duplicate attempts) that the next commit removes."""

    store_uri: str
    problems: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "store_uri": self.store_uri,
            "ok": self.ok,
            "problems": list(self.problems),
            "notes": list(self.notes),
        }


def sequence_of_files(files: Sequence[FileMetadata | Mapping[str, Any]]) -> list[FileMetadata]:
    return [f if isinstance(f, FileMetadata) else FileMetadata.from_json(f) for f in files]
