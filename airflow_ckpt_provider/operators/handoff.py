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
    """A job result from JSON text. Only scalar values are kept: the result goes to XCom
    and logs, and a job should never put more than counts and flags in it."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    return {
        str(k): v
        for k, v in data.items()
        if isinstance(v, bool | int | str) or (isinstance(v, float) and math.isfinite(v))
    }
