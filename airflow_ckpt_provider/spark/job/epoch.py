"""The job's epoch: a new one the job opens and owns, or the operator's, checked to be the latest."""

from __future__ import annotations

from airflow_ckpt_provider.spark.backend import SparkBackend
from airflow_ckpt_provider.store import CheckpointStore
from airflow_ckpt_provider.store.errors import EpochConflictError, InvalidArgumentError


def job_epoch(store: CheckpointStore, backend: SparkBackend, epoch: int | None, owner: str | None) -> int:
    """``epoch`` if it is the store's latest; with ``epoch=None`` the next epoch, opened here (owner: ``owner``
    or ``spark-app:<app name>``, so a rerun of the same application takes over its own unfinished epoch).

    Raises :class:`InvalidArgumentError` (``no_epoch``), :class:`EpochConflictError` (``epoch_fenced``: a newer
    submit owns the store; another owner's epoch is open)."""
    if epoch is None:
        opened = store.epochs.begin(
            owner=owner or f"spark-app:{backend.app_name()}",
            metadata={"opened_by": "CheckpointedJob", **backend.epoch_metadata()},
        )
        return opened.number
    current = store.epochs.current()
    if current is None or current.number < epoch:
        raise InvalidArgumentError(
            f"epoch {epoch} does not exist in {store.uri}: the operator opens it before submitting; "
            "without Airflow, leave epoch=None so the job opens its own",
            reason="no_epoch",
        )
    if current.number != epoch:
        raise EpochConflictError(
            f"epoch {epoch} of {store.uri} was superseded by epoch {current.number}: a newer submit "
            "owns the store, so this driver stops before reading or writing anything",
            reason="epoch_fenced",
        )
    return epoch
