"""``spark/job_settings.py``: the ``spark.ckpt.*`` confs and the secrets variable, parsed and checked."""

from __future__ import annotations

import json

import pytest

from airflow_ckpt_provider.spark.job_settings import settings_from_conf
from airflow_ckpt_provider.store.errors import InvalidArgumentError
from tests.support.errors import raises_reason


def _conf(values: dict[str, str]):  # type: ignore[no-untyped-def]
    return values.get


def test_settings_come_from_confs_and_secrets_from_the_environment() -> None:
    settings = settings_from_conf(
        _conf(
            {
                "spark.ckpt.store.uri": "s3://b/p",
                "spark.ckpt.epoch": "7",
                "spark.ckpt.store.options": json.dumps({"endpoint_url": "http://127.0.0.1:9", "timeout_seconds": 3}),
                "spark.ckpt.result.path": "/tmp/r.json",
            }
        ),
        {"CKPT_STORE_SECRETS": json.dumps({"aws_access_key_id": "AK", "aws_secret_access_key": "SK"})},
    )
    assert (settings.store_uri, settings.epoch, settings.result_path) == ("s3://b/p", 7, "/tmp/r.json")
    assert settings.store_options == {
        "endpoint_url": "http://127.0.0.1:9",
        "timeout_seconds": 3,
        "aws_access_key_id": "AK",
        "aws_secret_access_key": "SK",
    }
    assert "SK" not in repr(settings), "secrets never show in a repr (logs)"


def test_missing_store_conf_says_how_to_run_without_airflow() -> None:
    with raises_reason(InvalidArgumentError, "missing_store_conf", match=r"CheckpointedJob\(spark, store_uri="):
        settings_from_conf(_conf({}), {})


@pytest.mark.parametrize(
    ("confs", "env", "message"),
    [
        ({"spark.ckpt.epoch": "x"}, {}, "not an integer"),
        ({"spark.ckpt.epoch": "0"}, {}, "epochs start at 1"),
        ({"spark.ckpt.store.options": "{"}, {}, "not valid JSON"),
        ({"spark.ckpt.store.options": "[]"}, {}, "JSON object"),
        ({"spark.ckpt.store.options": '{"aws_secret_access_key": "x"}'}, {}, "holds secrets"),
        ({}, {"CKPT_STORE_SECRETS": '{"endpoint_url": "x"}'}, "may only hold"),
    ],
)
def test_bad_confs_are_refused(confs: dict[str, str], env: dict[str, str], message: str) -> None:
    base = {"spark.ckpt.store.uri": "/tmp/s", "spark.ckpt.epoch": "1"}
    with raises_reason(InvalidArgumentError, "spark_conf", match=message):
        settings_from_conf(_conf(base | confs), env)
