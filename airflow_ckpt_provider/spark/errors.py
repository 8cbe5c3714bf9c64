"""Typed errors of the Spark side. Each says what happened and what to do next.

They are raised on the driver before any output is written (configuration, key
columns, key types) or translated there from a failed Spark job (null keys).
The store's own errors (``KeyTypeMismatchError``, ``EpochFencedError``, ...) are
reused where they fit.
"""

from __future__ import annotations

from airflow_ckpt_provider.store.errors import CheckpointError


class MissingStoreConfigError(CheckpointError):
    """``CheckpointedJob.from_spark`` found no ``spark.ckpt.store.uri`` conf."""


class InvalidSparkConfError(CheckpointError, ValueError):
    """A ``spark.ckpt.*`` conf or the ``CKPT_STORE_SECRETS`` variable does not parse, or holds a secret."""


class KeyColumnNotFoundError(CheckpointError, ValueError):
    """The key column(s) named for ``skip_completed``/``write_*`` are not in the DataFrame."""


class NullKeyError(CheckpointError, ValueError):
    """A row's key is null: a key identifies input, so it cannot be null."""


class SourceKeyLostError(CheckpointError):
    """The hidden source-key column was dropped between the source and the writer.

    A global aggregation, a ``select`` without it, or a join that rebuilt the rows
    loses which input key each output row came from.
    """


class KeyDefinitionConflictError(CheckpointError, ValueError):
    """The writer's ``key`` differs from the one the source was read with, or file and row keys are mixed."""


class WriterContractError(CheckpointError):
    """A ``writer_fn`` given to ``CheckpointedJob.write`` broke its contract.

    It must consume every batch, call ``ctx.record_intent(path)`` before creating
    each file, and return the :class:`FileMetadata` of every file it created.
    """


class InputFilesError(CheckpointError, ValueError):
    """``read_parquet`` cannot determine the input: no files and no ``schema``, or an unreadable file."""


class NativeWriterUnavailableError(CheckpointError):
    """``write_parquet(engine="spark")`` cannot use Spark's own writer for this DataFrame or output."""


class InvalidPathError(CheckpointError, ValueError):
    """A path names no file: empty, an ``s3://`` URI without a bucket, or a ``file://`` URI of another host."""


class InvalidOptionError(CheckpointError, ValueError):
    """An argument or ``spark.ckpt.*`` conf that takes one of a few values got another (``engine``, ``reader``)."""


class InvalidKeyColumnsError(CheckpointError, ValueError):
    """``key`` names no column, or names a column twice: give one column name or a list of distinct names."""


class WritePlanMismatchError(CheckpointError):
    """Spark ran a write with other tasks than its plan showed (a planned task never reported, or an
    unplanned one). Nothing of those tasks is sealed: their input stays pending and a rerun redoes it."""


class KeyNotUniqueError(CheckpointError, ValueError):
    """``skip_completed(..., unique=True)`` was told each key has one row, but a task met a key twice.

    With unique keys no exchange groups a key's rows, so a repeated key could be split
    between a sealed and a failed task; the task is not sealed and the job fails.
    """


class TaskKeysLostError(CheckpointError, OSError):
    """The driver could not keep the keys a committed write task recorded (its driver-local key file).

    Nothing of that task is sealed: its input stays pending and a rerun redoes it. Check the
    driver's local disk (``spark.local.dir``: free space, permissions), then run the job again.
    """


class SparkConnectUnsupportedError(CheckpointError):
    """An option that needs classic PySpark (the JVM in the driver's process) was used on a Spark Connect
    session (``read_parquet(reader="spark")``). Raised before anything is read or written: use the
    default (``reader="auto"``), or run the job with classic PySpark (``spark-submit``)."""


class ServerPackageError(CheckpointError):
    """The Spark Connect server's Python workers cannot run this package: it is not installed there, or
    another version (or another Python minor version) is. Install the same wheel on the server's Python;
    nothing was written."""


class SparkConnectUnavailableError(CheckpointError):
    """The Spark Connect server went away (or the channel to it was cut) while the job ran. Every task
    that finished is sealed; run the job again when the server is back: it resumes."""
