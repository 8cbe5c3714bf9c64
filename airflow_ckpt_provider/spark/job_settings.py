"""How the Airflow operator configures a Spark job: the confs and variable of ``contract.py``, parsed.

The operator (``CheckpointedSparkSubmitOperator``) passes, on the spark-submit
command line:

``spark.ckpt.store.uri``
    Root of the checkpoint store: ``s3://bucket/prefix``, ``file:///abs/dir`` or ``/abs/dir``.
    Required by :meth:`CheckpointedJob.from_spark`.
``spark.ckpt.epoch``
    The epoch (integer) the operator opened for this submit. Tasks of an older
    epoch are fenced: they stop before writing and never seal.
``spark.ckpt.store.options``
    JSON object of *non-secret* store options: ``endpoint_url``, ``region_name``,
    ``timeout_seconds``, ``max_attempts``, ``breaker_max_failures``, ... A secret in
    it is refused (confs show on the command line and in the Spark UI).
``spark.ckpt.result.path``
    Optional. Where the driver writes its JSON result (``degraded``, counts) for the
    operator, a local path or ``s3://`` URI.
``spark.ckpt.result.line``
    Optional, ``true`` or ``false`` (default). ``true``: the driver also prints its result as
    one stdout line ``CKPT_RESULT {json}``, which the submit operator reads from spark-submit's
    log where it cannot read the file. Nothing else prints it.
``spark.ckpt.broadcast.threshold``
    Optional, set by the user (e.g. ``conf={...}`` of the operator), not by the
    operator. Up to this many done keys, ``skip_completed`` broadcasts them; above
    it, executors read them in parallel (default 1,000,000).
``spark.ckpt.writer.engine``
    Optional, set by the user (e.g. ``conf={...}`` of the operator), not by the
    operator: ``auto`` (default), ``spark`` or ``arrow`` — the default engine of
    ``write_parquet`` (see :mod:`airflow_ckpt_provider.spark.writers.native`).

Secrets (``aws_access_key_id``, ``aws_secret_access_key``, ``aws_session_token``)
come from the driver's environment variable ``CKPT_STORE_SECRETS`` (a JSON
object), never from confs. The driver ships the options to executors inside
task closures, not through confs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_ckpt_provider.contract import (
    CONF_BROADCAST_THRESHOLD,
    CONF_EPOCH,
    CONF_RESULT_LINE,
    CONF_RESULT_PATH,
    CONF_STORE_OPTIONS,
    CONF_STORE_URI,
    ENV_SECRETS,
)
from airflow_ckpt_provider.store.errors import InvalidArgumentError
from airflow_ckpt_provider.store.opener import SECRET_OPTIONS

DEFAULT_BROADCAST_THRESHOLD = 1_000_000


@dataclass(frozen=True)
class JobSettings:
    """What the operator told the job. ``store_options`` includes the secrets: never log it."""

    store_uri: str
    epoch: int
    store_options: dict[str, Any] = field(default_factory=dict, repr=False)
    result_path: str | None = None
    result_line: bool = False
    broadcast_threshold: int = DEFAULT_BROADCAST_THRESHOLD


def _json_object(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(
            f"{where} is not valid JSON ({exc.msg}); it must be a JSON object", reason="spark_conf"
        ) from None
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{where} must be a JSON object, not {type(value).__name__}", reason="spark_conf")
    return value


def settings_from_conf(get: Callable[[str], str | None], environ: Mapping[str, str] | None = None) -> JobSettings:
    """Parse the ``spark.ckpt.*`` confs (``get(name)`` returns a conf or None) and the secrets variable."""
    environ = os.environ if environ is None else environ
    uri = (get(CONF_STORE_URI) or "").strip()
    if not uri:
        raise InvalidArgumentError(
            f"the Spark conf {CONF_STORE_URI} is not set: this job was not submitted by "
            "CheckpointedSparkSubmitOperator. To run it without Airflow, build the job with "
            "CheckpointedJob(spark, store_uri='s3://bucket/prefix' or '/abs/dir') — it then opens its own epoch — "
            f"or pass --conf {CONF_STORE_URI}=... --conf {CONF_EPOCH}=N after opening epoch N yourself",
            reason="missing_store_conf",
        )
    raw_epoch = (get(CONF_EPOCH) or "").strip()
    try:
        epoch = int(raw_epoch)
    except ValueError:
        raise InvalidArgumentError(
            f"{CONF_EPOCH}={raw_epoch!r} is not an integer epoch: the operator sets it to the epoch it opened",
            reason="spark_conf",
        ) from None
    if epoch < 1:
        raise InvalidArgumentError(
            f"{CONF_EPOCH}={epoch} is not a valid epoch (epochs start at 1)", reason="spark_conf"
        )
    options = _json_object(get(CONF_STORE_OPTIONS) or "{}", CONF_STORE_OPTIONS)
    leaked = sorted(set(options) & set(SECRET_OPTIONS))
    if leaked:
        raise InvalidArgumentError(
            f"{CONF_STORE_OPTIONS} holds secrets {leaked}: confs are visible on the command line and in the "
            f"Spark UI. Pass credentials in the driver's environment variable {ENV_SECRETS} (a JSON object)",
            reason="spark_conf",
        )
    secrets = _json_object(environ.get(ENV_SECRETS) or "{}", f"the environment variable {ENV_SECRETS}")
    unknown = sorted(set(secrets) - set(SECRET_OPTIONS))
    if unknown:
        raise InvalidArgumentError(
            f"{ENV_SECRETS} may only hold {list(SECRET_OPTIONS)}, not {unknown}; put other options in "
            f"{CONF_STORE_OPTIONS}",
            reason="spark_conf",
        )
    raw_threshold = (get(CONF_BROADCAST_THRESHOLD) or "").strip()
    try:
        threshold = int(raw_threshold) if raw_threshold else DEFAULT_BROADCAST_THRESHOLD
    except ValueError:
        raise InvalidArgumentError(
            f"{CONF_BROADCAST_THRESHOLD}={raw_threshold!r} is not an integer", reason="spark_conf"
        ) from None
    result_path = (get(CONF_RESULT_PATH) or "").strip() or None
    raw_line = (get(CONF_RESULT_LINE) or "false").strip().lower()
    if raw_line not in ("true", "false"):
        raise InvalidArgumentError(f"{CONF_RESULT_LINE}={raw_line!r} is not true or false", reason="spark_conf")
    return JobSettings(
        store_uri=uri,
        epoch=epoch,
        store_options={**options, **secrets},
        result_path=result_path,
        result_line=raw_line == "true",
        broadcast_threshold=threshold,
    )
