"""``airflow-ckpt`` where Airflow is installed: connections from the metadata DB, the store a task
instance was configured with, secrets kept out of stderr, paths that need escaping.

The tool runs as a subprocess with an isolated Airflow (its own AIRFLOW_HOME and SQLite
metadata DB, tests/support/airflow_harness.py) and the suite's real SeaweedFS server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from airflow_ckpt_provider.store import open_store
from ckpt_testkit.seaweed import SeaweedServer
from tests.cli.console import airflow_ckpt
from tests.cli.sample_store import fill_store
from tests.support.airflow_harness import AirflowHarness
from tests.support.api_server import free_port

pytestmark = pytest.mark.airflow

DAG_ID = "cli_configured_store"

DAG_SOURCE = """
import pendulum
from airflow.sdk import DAG

from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1), catchup=False):
    CheckpointedSparkSubmitOperator(task_id="named", application="job.py", checkpoint_uri={named!r})
    CheckpointedSparkSubmitOperator(task_id="templated", application="job.py", checkpoint_uri={templated!r})
    CheckpointedSparkSubmitOperator(task_id="default", application="job.py")
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowHarness]:
    home = tmp_path_factory.mktemp("cli_airflow_home")
    harness = AirflowHarness.create(home)
    (harness.dags_folder / f"{DAG_ID}.py").write_text(
        DAG_SOURCE.format(
            dag_id=DAG_ID,
            named=str(home / "stores" / "named store#1"),
            templated=str(home / "stores" / "{{ run_id }}"),
        )
    )
    proc = harness.airflow("dags", "reserialize")
    assert proc.returncode == 0, proc.stderr[-3000:]
    yield harness


def _db_connection(harness: AirflowHarness, conn_id: str, options: dict[str, Any]) -> None:
    proc = harness.airflow(
        "connections",
        "add",
        conn_id,
        "--conn-type",
        "aws",
        "--conn-login",
        options["aws_access_key_id"],
        "--conn-password",
        options["aws_secret_access_key"],
        "--conn-extra",
        json.dumps({"endpoint_url": options["endpoint_url"], "region_name": "us-east-1"}),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.s3
def test_a_connection_stored_in_the_metadata_db_is_used(
    harness: AirflowHarness, s3_server: SeaweedServer, s3_bucket: str, s3_options: dict[str, Any]
) -> None:
    uri = f"s3://{s3_bucket}/stores/db-conn"
    fill_store(uri, f"s3://{s3_bucket}/out", options=s3_options)
    _db_connection(harness, "ckpt_db_conn", s3_options)
    result = airflow_ckpt("progress", uri, "--aws-conn-id", "ckpt_db_conn", "--json", env=harness.env)
    assert result.code == 0, result.err
    assert json.loads(result.out)["keys_done"] == 150
    assert s3_options["aws_secret_access_key"] not in result.out + result.err


def test_an_undefined_connection_is_a_clear_error_naming_where_it_was_looked_for(harness: AirflowHarness) -> None:
    result = airflow_ckpt("progress", "s3://bucket/p", "--aws-conn-id", "nope", env=harness.env)
    assert result.code == 3, result.err
    last = result.err.strip().splitlines()[-1]
    assert "'nope'" in last and "metadata DB" in last
    assert "AttributeError" not in result.err and "Traceback" not in result.err


def test_without_an_airflow_db_an_undefined_connection_says_so(tmp_path: Path) -> None:
    env = {"AIRFLOW_HOME": str(tmp_path), "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path}/none.db"}
    result = airflow_ckpt("progress", "s3://bucket/p", "--aws-conn-id", "nope", env=env)
    assert result.code == 3
    last = result.err.strip().splitlines()[-1]
    assert "'nope'" in last and "AIRFLOW_CONN_NOPE" in last
    assert "AttributeError" not in result.err and "Traceback" not in result.err


def test_a_task_instance_resolves_to_the_store_its_operator_names(harness: AirflowHarness) -> None:
    named = harness.home / "stores" / "named store#1"
    fill_store(named.as_uri(), (harness.home / "out-named").as_uri(), partitions=2)
    argv = ["progress", "--dag-id", DAG_ID, "--task-id", "named", "--run-id", "manual__1", "--json"]
    result = airflow_ckpt(*argv, env=harness.env)
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert Path(unquote(urlsplit(data["store_uri"]).path)) == named
    assert data["keys_done"] == 100
    # Without an operator-named location the configured default applies (this run is not in the DB, so it
    # has no logical date: the location of a run without one).
    default = airflow_ckpt(*argv[:4], "default", *argv[5:], env=harness.env)
    assert default.code == 0, default.err
    assert json.loads(default.out)["store_uri"].endswith(f"/checkpoints/{DAG_ID}/default/run=manual__1")


def test_a_templated_location_of_a_task_that_never_ran_is_an_error_not_a_guess(harness: AirflowHarness) -> None:
    argv = ["clear", "--dag-id", DAG_ID, "--task-id", "templated", "--run-id", "manual__2", "--yes"]
    result = airflow_ckpt(*argv, env=harness.env)
    assert result.code == 2
    assert "templated" in result.err and "rendered" in result.err
    assert not (harness.home / "stores" / "{{ run_id }}").exists()


def test_a_password_in_the_endpoint_url_never_reaches_stderr(tmp_path: Path) -> None:
    endpoint = f"http://someone:endpoint-pw-4711@127.0.0.1:{free_port()}"
    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AIRFLOW_HOME": str(tmp_path)}
    argv = ["progress", "s3://bucket/p", "--endpoint-url", endpoint, "--region", "us-east-1", "--timeout", "1"]
    result = airflow_ckpt(*argv, env=env)
    assert result.code == 3
    assert "endpoint-pw-4711" not in result.err + result.out
    assert "127.0.0.1" in result.err  # still says which endpoint failed


def test_a_path_that_needs_escaping_names_exactly_that_store(tmp_path: Path) -> None:
    odd = tmp_path / "store#2 ?x=%2F y \u00fc"
    sibling = tmp_path / "store"
    fill_store(odd.as_uri(), (tmp_path / "odd-out").as_uri(), partitions=2)
    fill_store(sibling.as_uri(), (tmp_path / "sibling-out").as_uri(), partitions=3)
    shown = airflow_ckpt("progress", str(odd), "--json")
    assert shown.code == 0, shown.err
    data = json.loads(shown.out)
    assert data["keys_done"] == 100
    assert Path(unquote(urlsplit(data["store_uri"]).path)) == odd  # the URI it prints names that store
    cleared = airflow_ckpt("clear", data["store_uri"], "--yes")
    assert cleared.code == 0, cleared.err
    assert open_store(str(odd)).inspection.list_checkpoints() == []
    assert len(open_store(str(sibling)).inspection.list_checkpoints()) == 3
