"""Spark's errors from a checkpointed write, told as the package's typed errors (what to do next)."""

from __future__ import annotations

from airflow_ckpt_provider.spark.errors import (
    KeyNotUniqueError,
    NullKeyError,
    SparkConnectUnavailableError,
    WriterContractError,
)
from airflow_ckpt_provider.spark.keys import NULL_KEY_MARKER
from airflow_ckpt_provider.store import EpochFencedError


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
        return SparkConnectUnavailableError(
            f"the Spark Connect server went away (or the channel to it was cut) while epoch {epoch} of {store_uri} "
            "was writing: every task that finished is sealed, and an operation the server still runs is a "
            "zombie that the next run fences. Run the job again when the server answers: it resumes"
        )
    text = spark_error_text(exc)
    if NULL_KEY_MARKER in text:
        columns = list(row_key or ())
        return NullKeyError(
            f"some rows have a null key {columns}: keys identify input, so they cannot be null. Filter or "
            "fill them before skip_completed/write. Those rows' tasks wrote nothing"
        )
    if "EpochFencedError" in text:
        return EpochFencedError(
            f"epoch {epoch} of {store_uri} was superseded while this job ran: a newer submit took "
            "over the store; this run's remaining work is the new run's"
        )
    if "WriterContractError" in text:
        start = text.find("WriterContractError")
        return WriterContractError(text[start : start + 600])
    if "KeyNotUniqueError" in text:
        start = text.find("KeyNotUniqueError")
        return KeyNotUniqueError(text[start + len("KeyNotUniqueError: ") : start + 600])
    return None


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
