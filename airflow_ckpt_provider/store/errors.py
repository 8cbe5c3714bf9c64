"""Typed errors of the checkpoint store.

Every error says what happened and what to do next. Nothing is deleted when one
is raised: callers can fix the cause and retry.
"""

from __future__ import annotations


class CheckpointError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidStoreUriError(CheckpointError, ValueError):
    """The URI does not name a store (supported: ``file:///path``, a plain path, ``s3://bucket/prefix``)."""


class InvalidCheckpointIdError(CheckpointError, ValueError):
    """A checkpoint id is not an id: empty, too long, or holding ``/``, ``..`` or other unsafe characters."""


class PathOutsideRootError(CheckpointError, ValueError):
    """A path names a location outside the root it must stay under."""


class StoreUnavailableError(CheckpointError):
    """The store cannot be reached (network, missing bucket, credentials)."""


class StoreAccessDeniedError(StoreUnavailableError):
    """The store refused the credentials (wrong or missing keys, no permission)."""


class StoreNotFoundError(StoreUnavailableError):
    """The bucket (or the local root's parent directory) does not exist."""


class CorruptCheckpointError(CheckpointError):
    """A manifest, key part or record of the store does not parse or is truncated."""


class KeyTypeMismatchError(CheckpointError, TypeError):
    """Keys of a different Arrow type than the keys already in the store."""


class CheckpointAlreadySealedError(CheckpointError):
    """Staging into, or sealing differently, a checkpoint whose manifest already exists."""


class UnknownCheckpointError(CheckpointError, KeyError):
    """A checkpoint id that the store does not hold (or does not hold sealed)."""


class EpochConflictError(CheckpointError):
    """Another submit opened an epoch on this store at the same time, or holds it open."""


class EpochFencedError(CheckpointError):
    """This writer's epoch is no longer the latest: a newer submit took over the store."""


class NoEpochError(CheckpointError):
    """The store has no epoch yet: call ``begin_epoch()`` (the operator does) first."""


class OverlappingKeysError(CheckpointError):
    """Two valid checkpoints hold the same key, so the output would hold it twice."""


class CommitRefusedError(CheckpointError):
    """The commit cannot proceed safely (for example a key overlap); nothing was deleted."""


class UnknownOutputFilesError(CommitRefusedError):
    """Files under the output roots that no writer of this store recorded: a plain reader of the
    output would read them beside the committed files (duplicates the store cannot see).

    ``paths`` lists them (canonical URIs). Nothing was committed or deleted. Ways out: move them
    away and retry; retract them where they were committed (``airflow-ckpt reprocess`` on the store
    that wrote them); or keep them knowingly (``unknown_files="keep"``).
    """

    def __init__(self, message: str, paths: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.paths = paths


class InputSkippedError(CommitRefusedError):
    """A run skipped input keys that were pending: committing it would lose them (store/input_audit.py).

    A shortcut of a row-key run (skipping whole files or hash buckets by the checkpoints that vouch for
    them) was found to cover keys no valid checkpoint holds. Nothing was committed or deleted. Ways out:
    run the job again (it reads the input exactly after such a finding), then commit that run; if the run
    that found them did not read its input exactly, discard the uncommitted work first
    (``airflow-ckpt discard``). ``findings`` says what each audit found.
    """

    def __init__(self, message: str, findings: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.findings = findings


class PreconditionFailedError(CheckpointError):
    """A conditional write lost: the object exists (create-if-absent) or changed (if-match).

    Raised by the blob layer; the store turns it into a meaningful error.
    """


class InvalidKeysError(CheckpointError, ValueError):
    """Keys that cannot identify input: nulls, mixed types, unsupported nested types."""


class InvalidArgumentError(CheckpointError, ValueError):
    """A store option or argument out of its range: ``timeout_seconds``, ``max_attempts``,
    ``page_size``, ``breaker_max_failures``, a name token. The message names the allowed range."""


# ---------------------------------------------------------------- reprocess and rewind (docs/reprocess.md)


class ReprocessInProgressError(EpochConflictError, CommitRefusedError):
    """A reprocess, rewind, undo or purge of this store is unfinished: finish it first (it resumes).

    Submits get it as an :class:`EpochConflictError`, commits as a :class:`CommitRefusedError`.
    """


class StoreChangedError(CheckpointError):
    """The store changed between the preview a person confirmed and the action: nothing was changed."""


class ReprocessSelectionError(CheckpointError, ValueError):
    """Base of the errors about what a reprocess was asked to select (nothing is changed)."""


class EmptySelectionError(ReprocessSelectionError):
    """A reprocess selected nothing: give keys, files, epochs, commits or a time window."""


class UnknownKeysError(ReprocessSelectionError, KeyError):
    """Keys that no checkpoint of the store holds (pending already, misspelt, or of another type)."""


class UnknownInputFileError(UnknownKeysError):
    """Input files that no checkpoint of the store holds."""


class UnknownEpochError(ReprocessSelectionError, KeyError):
    """An epoch number this store never had."""


class UnknownCommitError(ReprocessSelectionError, KeyError):
    """A commit number this store has no (finished) commit for."""


class SelectionUnavailableError(ReprocessSelectionError):
    """The store no longer records what the selection needs (compacted by an earlier version)."""


class UnknownReprocessError(ReprocessSelectionError, KeyError):
    """No reprocess (or rewind) with that epoch number in this store."""


class UndoUnavailableError(CheckpointError):
    """The reprocess cannot be undone any more (a run began after it, purged, or files deleted)."""


class QuarantineMissingError(CheckpointError):
    """Quarantined files an undo needs are gone (deleted by hand or by a purge)."""


class UnsafePathError(PathOutsideRootError):
    """A store record names a file outside the store's root and the job's output roots: never touched."""


class OutputRootNotDeclaredError(CheckpointError):
    """A write's output root is not under the output roots the operator declared for the epoch.

    Declared roots bound what the store may ever delete (docs/design.md, section 7): add the
    root to the operator's ``output_roots``, or write under one of them. Nothing was written.
    """


class InvalidOutputRootError(CheckpointError, ValueError):
    """An output root that cannot be declared: not an absolute ``file://``/``s3://`` location, the
    filesystem root, or overlapping the store's own root."""
