"""Spark's errors from a checkpointed write, told as the package's typed errors (what to do next)."""

from __future__ import annotations

from airflow_ckpt_provider.spark.keys import NULL_KEY_MARKER
from airflow_ckpt_provider.spark.writers.arrow_task import REASON_NOTE
from airflow_ckpt_provider.store.errors import EpochConflictError, IncompleteRunError, InvalidArgumentError


def spark_error_text(exc: BaseException) -> str:
    """The Python message and, for a Py4J error, the Java exception's (where a task's error text is)."""
    parts = [str(exc)]
    java = getattr(exc, "java_exception", None)
    if java is not None:
        parts.append(str(java))
    return "\n".join(parts)


def translate_failure(
    exc: BaseException, *, row_key: tuple[str, ...] | None, epoch: int, store_uri: str
) -> Exception | None:
    """The typed error ``exc`` stands for (None: not one of ours, re-raise it as it is)."""
    if connect_channel_lost(exc):
        return IncompleteRunError(
            f"the Spark Connect server went away (or the channel to it was cut) while epoch {epoch} of {store_uri} "
            "was writing: every task that finished is sealed, and an operation the server still runs is a "
            "zombie that the next run fences. Run the job again when the server answers: it resumes",
            reason="connect_unavailable",
        )
    text = spark_error_text(exc)
    if NULL_KEY_MARKER in text:
        columns = list(row_key or ())
        return InvalidArgumentError(
            f"some rows have a null key {columns}: keys identify input, so they cannot be null. Filter or "
            "fill them before skip_completed/write. Those rows' tasks wrote nothing",
            reason="null_key",
        )
    if "EpochFencedError: " in text or _task_error(text, "epoch_fenced") is not None:  # the JVM writer says the former
        return EpochConflictError(
            f"epoch {epoch} of {store_uri} was superseded while this job ran: a newer submit took "
            "over the store; this run's remaining work is the new run's",
            reason="epoch_fenced",
        )
    for reason in ("writer_contract", "key_not_unique"):
        message = _task_error(text, reason)
        if message is not None:
            return InvalidArgumentError(message, reason=reason)
    return None


def _task_error(text: str, reason: str) -> str | None:
    """The message of the package error with ``reason`` that a Spark task raised, found in the task's
    error text (its traceback, where the task noted the reason), or None."""
    end = text.find(f"{REASON_NOTE}{reason}")
    if end < 0:
        return None
    start = text.rfind("Error: ", 0, end)
    return " ".join(text[start + len("Error: ") : end].split())[:600]


def connect_channel_lost(exc: BaseException) -> bool:
    """A Spark Connect call failed with gRPC ``UNAVAILABLE`` after the client's retries (the server is gone)."""
    for accessor in ("getGrpcStatusCode", "code"):  # pyspark's SparkConnectGrpcException, or a raw grpc.RpcError
        method = getattr(exc, accessor, None)
        if not callable(method):
            continue
        try:
            status = method()
        except Exception:
            continue
        if getattr(status, "name", None) == "UNAVAILABLE":
            return True
    return False
