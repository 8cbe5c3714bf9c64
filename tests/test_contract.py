"""``contract.py``: what the operator hands the job and the job hands back, read by the other side.

Both sides are real code: the operator's :class:`Handoff` is parsed by the Spark side's
``settings_from_conf`` (as ``CheckpointedJob.from_spark`` does), and the driver's result
line is read back as the operator reads it. No Spark or Airflow process is needed.
"""

from __future__ import annotations

import json
from pathlib import Path

from airflow_ckpt_provider import contract
from airflow_ckpt_provider.contract import (
    Handoff,
    flatten_result,
    format_result_line,
    parse_result_line,
    read_job_result,
)
from airflow_ckpt_provider.spark.job_settings import settings_from_conf
from airflow_ckpt_provider.spark.summary import write_result_file


def test_what_the_operator_hands_over_is_what_the_job_reads() -> None:
    handoff = Handoff(
        store_uri="s3://bucket/stores/run-1",
        epoch=4,
        public_options={"endpoint_url": "http://127.0.0.1:8333", "timeout_seconds": 5},
        secret_options={"aws_access_key_id": "AK", "aws_secret_access_key": "SK"},
        result_path="/tmp/result.json",
        result_line=True,
    )
    confs = handoff.spark_conf()
    assert set(confs) == set(contract.OPERATOR_CONFS)
    assert not any("SK" in value for value in confs.values()), "credentials never travel as confs"
    settings = settings_from_conf(confs.get, handoff.secret_env())
    assert (settings.store_uri, settings.epoch, settings.result_path, settings.result_line) == (
        "s3://bucket/stores/run-1",
        4,
        "/tmp/result.json",
        True,
    )
    quiet = Handoff("s3://bucket/stores/run-1", 4, {}, {}, result_path="")
    assert settings_from_conf(quiet.spark_conf().get, {}).result_line is False, "no line unless asked"
    assert settings.store_options == {**handoff.public_options, **handoff.secret_options}


def test_the_drivers_result_line_is_what_the_operator_parses(tmp_path: Path) -> None:
    result = {"degraded": True, "rows": 12, "input": {"files_read": 3, "paths": ["a", "b"]}}
    write_result_file(result, str(tmp_path / "result.json"), {})
    line = format_result_line(result)
    # The operator taps lines of the spark-submit log, where a formatter may prefix them.
    assert parse_result_line(f"26/01/01 10:00:00 INFO stdout: {line}") == result
    assert flatten_result(result) == {"degraded": True, "rows": 12, "input_files_read": 3}
    assert read_job_result(str(tmp_path / "result.json")) == flatten_result(result)


def test_the_last_result_line_of_a_driver_log_wins() -> None:
    log = 'INFO start\nCKPT_RESULT {"degraded": false, "keys": 3}\nnoise CKPT_RESULT {"degraded": true, "keys": 4}\n'
    assert parse_result_line(log) == {"degraded": True, "keys": 4}
    assert parse_result_line("CKPT_RESULT {not json\nCKPT_RESULT [1]") is None
    assert parse_result_line("nothing here") is None


def test_a_missing_or_unreadable_result_file_is_no_result(tmp_path: Path) -> None:
    assert read_job_result("") is None
    assert read_job_result(str(tmp_path / "absent.json")) is None
    (tmp_path / "bad.json").write_text(json.dumps([1, 2]))
    assert read_job_result(str(tmp_path / "bad.json")) is None


def test_every_conf_name_is_a_spark_ckpt_conf_defined_once() -> None:
    assert all(name.startswith("spark.ckpt.") for name in contract.ALL_CONFS)
    assert len(set(contract.ALL_CONFS)) == len(contract.ALL_CONFS)
    import airflow_ckpt_provider.spark as spark_side

    assert spark_side.CONF_STORE_URI is contract.CONF_STORE_URI
    assert spark_side.ENV_SECRETS is contract.ENV_SECRETS
    assert spark_side.parse_result_line is contract.parse_result_line


def test_the_worker_daemon_is_a_default_the_users_conf_overrides() -> None:
    daemon = contract.CONF_PYTHON_DAEMON
    assert contract.with_submit_defaults({"spark.executor.cores": "2"}) == {
        daemon: contract.WORKER_DAEMON_MODULE,
        "spark.executor.cores": "2",
    }
    assert contract.with_submit_defaults({daemon: "pyspark.daemon"}) == {daemon: "pyspark.daemon"}
