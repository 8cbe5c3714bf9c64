"""The errors of the package, one class per thing the caller should do (docs/errors.md).

Each carries ``reason``, a short stable string saying which case it is (``"epoch_fenced"``,
``"key_not_unique"``, ...): test ``exc.reason`` where the finer distinction matters, catch the
class where only what to do next does. Every message says what happened and what to do next.
Nothing is deleted when one is raised: callers can fix the cause and retry.
"""

from __future__ import annotations

from typing import Any


class CheckpointError(Exception):
    """Base class of every error this package raises on purpose."""

    def __init__(self, message: str = "", *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep ``reason`` (and the refusal's paths/findings) across pickling, e.g. out of a worker process.
        return (type(self), self.args, self.__dict__)


class InvalidArgumentError(CheckpointError):
    """Fix the call or its input: an argument, option, URI, id, path, key or job definition the
    package cannot use. Nothing was read or changed beyond what the message says."""


class NotFoundError(CheckpointError):
    """What the call names does not exist: a checkpoint, keys, input files, an epoch, a commit, a
    reprocess, a task instance or its store's location. Check the name (``airflow-ckpt list``/``log``)."""


class StoreUnavailableError(CheckpointError):
    """The store cannot be reached now (network, missing bucket, credentials, a busy or slow store,
    an undefined connection): fix the access or retry later; nothing was changed."""


class CorruptCheckpointError(CheckpointError):
    """A manifest, key part or record of the store does not parse or is truncated: run
    ``airflow-ckpt check`` on the store, restore or remove what it names."""


def corrupt_record(uri: str, problem: str, next_step: str = "Run `airflow-ckpt check`") -> CorruptCheckpointError:
    """The error for a store record that does not parse: which record, what is wrong with it, that
    nothing was changed, and what to do (``reason="corrupt"``)."""
    return CorruptCheckpointError(f"{uri} {problem}; nothing was changed. {next_step}", reason="corrupt")


class EpochConflictError(CheckpointError):
    """Another run holds or took over the store (an open or newer epoch, an unfinished reprocess, a
    checkpoint sealed by another attempt, a store changed since its preview): wait for it or finish
    it; a fenced writer stops."""


class RefusedError(CheckpointError):
    """Refused for safety: going on could lose or duplicate data or touch files outside the store's
    reach. Nothing was committed or deleted; the message names the way out (often an explicit
    confirmation or another command).

    ``paths`` lists unknown files under the output roots (canonical URIs, reason
    ``unknown_output_files``); ``findings`` says what each input audit found (``input_skipped``).
    """

    def __init__(
        self, message: str = "", *, reason: str = "", paths: tuple[str, ...] = (), findings: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message, reason=reason)
        self.paths = paths
        self.findings = findings


class UnsupportedError(CheckpointError):
    """This environment or this store's history cannot do what was asked (a Spark writer or session
    kind, a server's Python packages, an S3 server's API, records an earlier version did not keep):
    use the alternative the message names."""


class IncompleteRunError(CheckpointError):
    """The Spark job ended without sealing every task (a write ran other tasks than planned, a task's
    keys were lost, the Spark Connect server went away, the watched job failed). What finished is
    sealed; run the job again: it resumes."""


# ---------------------------------------------------------------- blob layer (internal)


class PreconditionFailedError(CheckpointError):
    """A conditional write lost: the object exists (create-if-absent) or changed (if-match).

    Raised by the blob layer; the store turns it into a meaningful error.
    """

    def __init__(self, message: str = "", *, reason: str = "precondition_failed") -> None:
        super().__init__(message, reason=reason)
