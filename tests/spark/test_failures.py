"""``spark/job/failures.py``: a package error a Spark task raised comes back to the driver as the same
class and reason, found in the task's error text (no Spark needed)."""

from __future__ import annotations

import traceback

import pytest

from airflow_ckpt_provider.spark.job.failures import translate_failure
from airflow_ckpt_provider.spark.writers.arrow_task import REASON_NOTE
from airflow_ckpt_provider.store.errors import CheckpointError, EpochConflictError, InvalidArgumentError


def _task_failure(error: CheckpointError) -> Exception:
    """What the driver gets: Spark's error whose text holds the task's traceback (noted as a task notes it)."""
    try:
        raise error
    except CheckpointError as exc:
        exc.add_note(f"{REASON_NOTE}{exc.reason}")
        text = "".join(traceback.format_exception(exc))
    return RuntimeError(f"Job aborted due to stage failure: Task 3 failed: PythonException: {text}\n\tat org...")


@pytest.mark.parametrize("reason", ["writer_contract", "key_not_unique"])
def test_a_task_error_keeps_its_class_reason_and_message(reason: str) -> None:
    message = f"the task broke the rule ({reason}); do this instead"
    translated = translate_failure(
        _task_failure(InvalidArgumentError(message, reason=reason)), row_key=None, epoch=4, store_uri="file:///s"
    )
    assert isinstance(translated, InvalidArgumentError)
    assert (translated.reason, str(translated)) == (reason, message)


def test_a_fenced_task_or_jvm_writer_is_a_fenced_run() -> None:
    fenced = _task_failure(EpochConflictError("epoch 4 was superseded", reason="epoch_fenced"))
    jvm = RuntimeError("org.apache.spark.SparkException: EpochFencedError: epochs/00000005.json exists: ...")
    for failure in (fenced, jvm):
        translated = translate_failure(failure, row_key=None, epoch=4, store_uri="file:///s")
        assert isinstance(translated, EpochConflictError) and translated.reason == "epoch_fenced"
        assert "superseded" in str(translated)


def test_other_errors_are_not_translated() -> None:
    other = _task_failure(EpochConflictError("epoch 5 is still open", reason="epoch_open"))
    assert translate_failure(other, row_key=None, epoch=4, store_uri="file:///s") is None
    assert translate_failure(ValueError("boom"), row_key=None, epoch=4, store_uri="file:///s") is None
