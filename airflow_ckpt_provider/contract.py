"""What the operator hands to the Spark job, and what the job hands back.

The names are the contract with ``airflow_ckpt_provider.spark`` (which reads them
through ``CheckpointedJob.from_spark``). Non-secret values travel as Spark confs;
credentials travel only in the ``spark-submit`` process environment, so they never
show on a command line (``ps``), in the submit log or in the Spark UI.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

STORE_URI_CONF = "spark.ckpt.store.uri"
EPOCH_CONF = "spark.ckpt.epoch"
STORE_OPTIONS_CONF = "spark.ckpt.store.options"
RESULT_PATH_CONF = "spark.ckpt.result.path"
#: JSON object of the secret store options (``aws_access_key_id``, ...).
SECRETS_ENV = "CKPT_STORE_SECRETS"
#: The driver also prints its result as one stdout line ``CKPT_RESULT {json}``.
RESULT_LINE_PREFIX = "CKPT_RESULT "

#: XCom key of what the submit skips (pushed by the submit operator before the job starts).
PLAN_XCOM_KEY = "checkpoint_plan"
#: task_state_store key holding the epoch (and result file) of the submitted driver.
EPOCH_STATE_KEY = "ckpt_epoch"


@dataclass(frozen=True)
class Handoff:
    """Everything one submit passes to the job."""

    store_uri: str
    epoch: int
    public_options: Mapping[str, Any]
    secret_options: Mapping[str, Any]
    result_path: str

    def spark_conf(self) -> dict[str, str]:
        return {
            STORE_URI_CONF: self.store_uri,
            EPOCH_CONF: str(self.epoch),
            STORE_OPTIONS_CONF: json.dumps(dict(self.public_options), sort_keys=True, separators=(",", ":")),
            RESULT_PATH_CONF: self.result_path,
        }

    def secret_env(self) -> dict[str, str]:
        if not self.secret_options:
            return {}
        return {SECRETS_ENV: json.dumps(dict(self.secret_options))}


def read_job_result(path: str) -> dict[str, Any] | None:
    """The job's JSON result file, or None if the job wrote none (it failed early, or its
    driver ran on another machine in cluster mode)."""
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return parse_job_result(handle.read())
    except OSError:
        return None


def parse_job_result(text: str) -> dict[str, Any] | None:
    """A job result from JSON text, flattened for XCom and logs: scalar values, and the
    scalars of nested objects as ``{outer}_{inner}`` (``input.files_read`` becomes
    ``input_files_read``). Lists are dropped: a result carries counts and flags only."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update({f"{key}_{k}": v for k, v in value.items() if _is_scalar(v)})
        elif _is_scalar(value):
            flat[str(key)] = value
    return flat


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | str) or (isinstance(value, float) and math.isfinite(value))
