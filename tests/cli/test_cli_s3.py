"""``airflow-ckpt`` on S3 stores of the suite's real SeaweedFS server.

Credentials reach the tool the way they must in production: through the environment
(or an Airflow connection), never a flag; the tests check they are never printed.
"""

from __future__ import annotations

import io
import json
from typing import Any

import boto3
import pytest

from airflow_ckpt_provider.cli.main import EXIT_OK, EXIT_UNAVAILABLE, main
from airflow_ckpt_provider.store import open_store
from tests.cli.console import airflow_ckpt
from tests.cli.sample_store import fill_store
from tests.support.api_server import free_port

pytestmark = pytest.mark.s3

REGION = "us-east-1"


def credentials_env(options: dict[str, Any]) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": options["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": options["aws_secret_access_key"],
        "AWS_DEFAULT_REGION": REGION,
    }


def endpoint_flags(options: dict[str, Any]) -> list[str]:
    return ["--endpoint-url", options["endpoint_url"], "--region", REGION]


def output_objects(options: dict[str, Any], bucket: str, prefix: str) -> list[str]:
    client = boto3.client(
        "s3",
        endpoint_url=options["endpoint_url"],
        aws_access_key_id=options["aws_access_key_id"],
        aws_secret_access_key=options["aws_secret_access_key"],
        region_name=REGION,
    )
    return [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]


def test_console_script_reads_and_clears_an_s3_store(s3_bucket: str, s3_options: dict[str, Any]) -> None:
    uri = f"s3://{s3_bucket}/stores/job"
    fill_store(uri, f"s3://{s3_bucket}/out", options=s3_options)
    env = credentials_env(s3_options)
    flags = endpoint_flags(s3_options)

    progress = airflow_ckpt("progress", uri, *flags, "--json", env=env)
    assert progress.code == 0, progress.err
    assert json.loads(progress.out)["keys_done"] == 150
    listing = airflow_ckpt("list", uri, *flags, env=env)
    assert listing.code == 0 and listing.out.count("checkpointed") == 3
    keys = airflow_ckpt("keys", uri, *flags, "--limit", "5", env=env)
    assert keys.code == 0 and len(keys.out.splitlines()) == 5
    cleared = airflow_ckpt("clear", uri, *flags, "--output-root", f"s3://{s3_bucket}/out", "--yes", env=env)
    assert cleared.code == 0, cleared.err
    assert "checkpoints deleted: 3" in cleared.out and "files deleted:       3" in cleared.out
    for result in (progress, listing, keys, cleared):
        assert s3_options["aws_secret_access_key"] not in result.out + result.err
    assert open_store(uri, **s3_options).inspection.list_checkpoints() == []
    assert output_objects(s3_options, s3_bucket, "out/") == []


def test_show_commit_check_discard_in_process(
    s3_bucket: str, s3_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in credentials_env(s3_options).items():
        monkeypatch.setenv(name, value)
    uri = f"s3://{s3_bucket}/stores/inproc"
    store = fill_store(uri, f"s3://{s3_bucket}/out", options=s3_options, partitions=2)
    flags = endpoint_flags(s3_options)

    def run(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        return main([*argv, *flags], out=out, err=err, stdin=io.StringIO()), out.getvalue(), err.getvalue()

    checkpoint = store.inspection.list_checkpoints()[0]
    code, out, _ = run("show", uri, checkpoint.checkpoint_id)
    assert code == EXIT_OK and checkpoint.checkpoint_id in out
    code, out, _ = run("check", uri)
    assert code == EXIT_OK and "consistent" in out
    store.epochs.end(1, status="succeeded")
    code, out, err = run("commit", uri, "--output-root", f"s3://{s3_bucket}/out", "--json")
    assert code == EXIT_OK, err
    assert len(json.loads(out)["committed_checkpoints"]) == 2
    code, out, _ = run("discard", uri, "--yes")
    assert code == EXIT_OK and "Nothing to discard" in out  # everything is committed now
    assert len(output_objects(s3_options, s3_bucket, "out/")) == 2


def test_wrong_credentials_exit_3(s3_bucket: str, s3_options: dict[str, Any]) -> None:
    env = credentials_env(s3_options) | {"AWS_SECRET_ACCESS_KEY": "not-the-secret-at-all"}
    result = airflow_ckpt("progress", f"s3://{s3_bucket}/p", *endpoint_flags(s3_options), env=env)
    assert result.code == EXIT_UNAVAILABLE, result.err
    assert result.err.startswith("airflow-ckpt: error:") and result.err.count("\n") == 1
    assert "not-the-secret-at-all" not in result.err


def test_missing_bucket_exit_3(s3_options: dict[str, Any]) -> None:
    result = airflow_ckpt(
        "list", "s3://no-such-bucket-ckpt/p", *endpoint_flags(s3_options), env=credentials_env(s3_options)
    )
    assert result.code == EXIT_UNAVAILABLE
    assert "no-such-bucket-ckpt" in result.err and result.err.count("\n") == 1


def test_unreachable_endpoint_exit_3_quickly(s3_options: dict[str, Any]) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = airflow_ckpt(
        "progress",
        "s3://bucket/prefix",
        "--endpoint-url",
        closed,
        "--region",
        REGION,
        "--timeout",
        "1",
        env=credentials_env(s3_options),
    )
    assert result.code == EXIT_UNAVAILABLE
    assert "cannot be reached" in result.err or "127.0.0.1" in result.err, result.err
    assert result.err.count("\n") == 1
    assert result.seconds < 30


def test_aws_connection_supplies_credentials(s3_bucket: str, s3_options: dict[str, Any], tmp_path: Any) -> None:
    uri = f"s3://{s3_bucket}/stores/conn"
    fill_store(uri, f"s3://{s3_bucket}/out", options=s3_options, partitions=1)
    connection = {
        "conn_type": "aws",
        "login": s3_options["aws_access_key_id"],
        "password": s3_options["aws_secret_access_key"],
        "extra": {"endpoint_url": s3_options["endpoint_url"], "region_name": REGION},
    }
    env = {"AIRFLOW_HOME": str(tmp_path / "home"), "AIRFLOW_CONN_CKPT_S3": json.dumps(connection)}
    result = airflow_ckpt("progress", uri, "--aws-conn-id", "ckpt_s3", "--json", env=env)
    assert result.code == 0, result.err
    assert json.loads(result.out)["keys_done"] == 50
    assert s3_options["aws_secret_access_key"] not in result.out + result.err
