"""Pure-Python parts of the Spark side (no Spark needed): confs, file keys, key types, file groups, hive names."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from airflow_ckpt_provider.spark import InvalidSparkConfError, MissingStoreConfigError, file_key, parse_result_line
from airflow_ckpt_provider.spark.job_settings import settings_from_conf
from airflow_ckpt_provider.spark.keys import distinct_keys, key_columns, normalize_key_type
from airflow_ckpt_provider.spark.readers.arrow import SourceFile, plan_groups
from airflow_ckpt_provider.spark.writers.arrow_parquet import hive_value


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
    with pytest.raises(MissingStoreConfigError, match=r"CheckpointedJob\(spark, store_uri="):
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
    with pytest.raises(InvalidSparkConfError, match=message):
        settings_from_conf(_conf(base | confs), env)


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("/data/a.parquet", "file:///data/a.parquet"),
        ("file:/data/./a.parquet", "file:///data/a.parquet"),
        ("file:///data/x/../a.parquet", "file:///data/a.parquet"),
        ("file:///data/a%20b.parquet", "file:///data/a b.parquet"),
        ("s3a://bucket/k/a.parquet", "s3://bucket/k/a.parquet"),
        ("s3://bucket//k/a.parquet", "s3://bucket/k/a.parquet"),
    ],
)
def test_file_keys_are_normalized_uris(path: str, key: str) -> None:
    assert file_key(path) == key


def test_key_types_are_canonical() -> None:
    assert normalize_key_type(pa.large_string()) == pa.string()
    struct = pa.struct([pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.large_string())])
    assert str(normalize_key_type(struct)) == "struct<a: int64, b: string>"
    assert key_columns("id") == ("id",) and key_columns(["a", "b"]) == ("a", "b")
    with pytest.raises(ValueError):
        key_columns(["a", "a"])


def test_distinct_keys_handles_structs() -> None:
    keys = pa.array([{"a": 1, "b": "x"}, {"a": 1, "b": "x"}, {"a": 2, "b": "y"}])
    assert sorted(distinct_keys([keys, keys]).to_pylist(), key=str) == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
    assert sorted(distinct_keys([pa.array(["b", "a", "b"], pa.large_string())]).to_pylist()) == ["a", "b"]


def test_file_groups_never_split_a_file_and_keep_order() -> None:
    files = [SourceFile(i, f"/f{i}", size) for i, size in enumerate([50, 10, 10, 10, 200, 5, 5])]
    groups = plan_groups(files, max_bytes=100, min_groups=4)
    assert [f.index for g in groups for f in g] == list(range(7))
    assert all(sum(f.size for f in g) <= 100 or len(g) == 1 for g in groups)
    assert plan_groups([], max_bytes=100, min_groups=4) == []


def test_hive_directory_values_are_escaped_like_spark() -> None:
    assert hive_value("2026-01-01") == "2026-01-01"
    assert hive_value("a/b=c") == "a%2Fb%3Dc"
    assert hive_value(None) == "__HIVE_DEFAULT_PARTITION__"
    assert hive_value(True) == "true"


def test_result_line_is_found_in_a_driver_log() -> None:
    log = 'INFO start\nCKPT_RESULT {"degraded": false, "keys": 3}\nnoise CKPT_RESULT {"degraded": true, "keys": 4}\n'
    assert parse_result_line(log) == {"degraded": True, "keys": 4}
    assert parse_result_line("nothing here") is None
