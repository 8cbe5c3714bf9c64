"""The contract between the Airflow operator and the Spark job it submits, defined once.

Both sides import it: the submit operator writes what the job reads
(``airflow_ckpt_provider.spark`` parses it in ``job_settings.py``), the job writes
what the operator reads back. It imports neither Airflow nor pyspark. See
docs/design.md, "Operator and job contract".

* **Spark confs** (non-secret; they show on the command line and in the Spark UI):
  set by the operator on every submit: :data:`CONF_STORE_URI`, :data:`CONF_EPOCH`,
  :data:`CONF_STORE_OPTIONS`, :data:`CONF_RESULT_PATH`, :data:`CONF_RESULT_LINE`; optional, set by users:
  :data:`CONF_BROADCAST_THRESHOLD`, :data:`CONF_WRITER_ENGINE`; a default the user's ``conf`` may
  override: :data:`CONF_PYTHON_DAEMON` (:func:`with_submit_defaults`).
* **Credentials** only in the ``spark-submit`` process environment, :data:`ENV_SECRETS`
  (a JSON object): never on a command line (``ps``), in the submit log or in the Spark UI.
* **The job's result**: a JSON object, written to the file at :data:`CONF_RESULT_PATH` and, only
  when :data:`CONF_RESULT_LINE` asks for it, printed as one stdout line ``CKPT_RESULT {json}``
  (:func:`format_result_line`) for an operator that reads the driver's output; a job run by a
  library user prints nothing. :func:`parse_result_line` is the line's one parser,
  :func:`flatten_result` the result's XCom form.
* **XCom and task-state keys** the operators and the UI read: :data:`PLAN_XCOM_KEY`,
  :data:`RESULT_XCOM_KEY`, :data:`RETURN_XCOM_KEY`, :data:`EPOCH_STATE_KEY` and the result fields ``XCOM_*``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Root of the checkpoint store: ``s3://bucket/prefix``, ``file:///abs/dir`` or ``/abs/dir``.
CONF_STORE_URI = "spark.ckpt.store.uri"
#: The epoch the operator opened for this submit; tasks of an older epoch are fenced.
CONF_EPOCH = "spark.ckpt.epoch"
#: JSON object of the non-secret store options (``endpoint_url``, ``region_name``, ``timeout_seconds``...).
CONF_STORE_OPTIONS = "spark.ckpt.store.options"
#: Where the driver writes its JSON result for the operator (a local path or ``s3://`` URI).
CONF_RESULT_PATH = "spark.ckpt.result.path"
#: ``true``: the driver also prints its result as the stdout line ``CKPT_RESULT {json}``, for an operator
#: that reads the driver's output (the submit operator, from spark-submit's log); ``false`` or unset: it
#: prints nothing, so a library user's job (a notebook, a script without Airflow) keeps its stdout.
CONF_RESULT_LINE = "spark.ckpt.result.line"
#: Optional, set by users: up to this many done keys ``skip_completed`` broadcasts them (default 1,000,000).
CONF_BROADCAST_THRESHOLD = "spark.ckpt.broadcast.threshold"
#: Optional, set by users: ``auto`` (default), ``spark`` or ``arrow``, the default engine of ``write_parquet``.
CONF_WRITER_ENGINE = "spark.ckpt.writer.engine"
#: The confs the operator sets on every submit.
OPERATOR_CONFS = (CONF_STORE_URI, CONF_EPOCH, CONF_STORE_OPTIONS, CONF_RESULT_PATH, CONF_RESULT_LINE)
#: Every ``spark.ckpt.*`` conf a job reads.
ALL_CONFS = (*OPERATOR_CONFS, CONF_BROADCAST_THRESHOLD, CONF_WRITER_ENGINE)

#: Spark's own conf naming the Python worker daemon module; the operator sets :data:`WORKER_DAEMON_MODULE`
#: unless the user's ``conf`` names one (``pyspark.daemon`` is PySpark's own).
CONF_PYTHON_DAEMON = "spark.python.daemon.module"
#: The worker daemon that makes each Python task cheaper (``airflow_ckpt_provider/spark/worker_daemon.py``).
WORKER_DAEMON_MODULE = "airflow_ckpt_provider.spark.worker_daemon"

#: Environment variable of the ``spark-submit`` process: JSON object of the secret store options.
ENV_SECRETS = "CKPT_STORE_SECRETS"

#: Start of the stdout line the driver prints its result on (when :data:`CONF_RESULT_LINE` asks for it).
RESULT_LINE_PREFIX = "CKPT_RESULT "

#: XCom key of what the submit skips (pushed by the submit operator before the job starts).
PLAN_XCOM_KEY = "checkpoint_plan"
#: XCom key of the job's summary (store URI, epoch, ``degraded``, counts), pushed by both Spark operators
#: when the job ends; what store-facing tasks read first.
RESULT_XCOM_KEY = "checkpoint_result"
#: XCom key of an operator's return value (Airflow's own name). A ``CheckpointedPySparkOperator``'s is the
#: user's function's; store-facing tasks read the submit operator's summary there when no
#: :data:`RESULT_XCOM_KEY` was pushed.
RETURN_XCOM_KEY = "return_value"
#: task_state_store key holding the epoch (and result file) of the submitted driver.
EPOCH_STATE_KEY = "ckpt_epoch"
#: Fields of the plan and of the operators' return values that other tasks and the UI read.
XCOM_STORE_URI = "checkpoint_uri"
XCOM_AWS_CONN_ID = "aws_conn_id"
XCOM_DEGRADED = "degraded"


@dataclass(frozen=True)
class Handoff:
    """Everything one submit passes to the job."""

    store_uri: str
    epoch: int
    public_options: Mapping[str, Any]
    secret_options: Mapping[str, Any]
    result_path: str
    #: Whether the driver prints its result line (the operator reads the driver's output).
    result_line: bool = False

    def spark_conf(self) -> dict[str, str]:
        return {
            CONF_STORE_URI: self.store_uri,
            CONF_EPOCH: str(self.epoch),
            CONF_STORE_OPTIONS: json.dumps(dict(self.public_options), sort_keys=True, separators=(",", ":")),
            CONF_RESULT_PATH: self.result_path,
            CONF_RESULT_LINE: "true" if self.result_line else "false",
        }

    def secret_env(self) -> dict[str, str]:
        if not self.secret_options:
            return {}
        return {ENV_SECRETS: json.dumps(dict(self.secret_options))}


def with_submit_defaults(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The user's submit ``conf`` with the defaults it does not set (the worker daemon)."""
    return {CONF_PYTHON_DAEMON: WORKER_DAEMON_MODULE, **conf}


def result_json(result: Mapping[str, Any]) -> str:
    """The job's result as the JSON text of its result file and result line."""
    return json.dumps(dict(result), sort_keys=True, separators=(",", ":"))


def format_result_line(result: Mapping[str, Any]) -> str:
    """The stdout line ``CKPT_RESULT {json}`` the driver prints when :data:`CONF_RESULT_LINE` asks for it."""
    return RESULT_LINE_PREFIX + result_json(result)


def parse_result_json(text: str) -> dict[str, Any] | None:
    """A job result from its JSON text (the result file), or None if it is not a JSON object."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_result_line(log_text: str) -> dict[str, Any] | None:
    """The result on the last ``CKPT_RESULT`` line of ``log_text`` (one line or a whole driver log).

    The prefix may follow other text on the line (a log formatter's timestamp); lines whose
    JSON does not parse are skipped. None when there is no such line.
    """
    found: dict[str, Any] | None = None
    for line in log_text.splitlines():
        index = line.find(RESULT_LINE_PREFIX)
        if index >= 0:
            value = parse_result_json(line[index + len(RESULT_LINE_PREFIX) :])
            if value is not None:
                found = value
    return found


def flatten_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """A job result flattened for XCom and logs: scalar values, and the scalars of nested objects
    as ``{outer}_{inner}`` (``input.files_read`` becomes ``input_files_read``). Lists are dropped:
    a result carries counts and flags only."""
    flat: dict[str, Any] = {}
    for key, value in result.items():
        if isinstance(value, dict):
            flat.update({f"{key}_{k}": v for k, v in value.items() if _is_scalar(v)})
        elif _is_scalar(value):
            flat[str(key)] = value
    return flat


def read_job_result(path: str) -> dict[str, Any] | None:
    """The job's result file, flattened (:func:`flatten_result`), or None if the job wrote none
    (it failed early, or its driver ran on another machine in cluster mode)."""
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            result = parse_result_json(handle.read())
    except OSError:
        return None
    return None if result is None else flatten_result(result)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | str) or (isinstance(value, float) and math.isfinite(value))
