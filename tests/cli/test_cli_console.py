"""The installed ``airflow-ckpt`` script in a subprocess: help, tables, errors, Airflow task instances."""

from __future__ import annotations

import json
from pathlib import Path

from airflow_ckpt_provider.hooks.default_location import JobIdentity, default_location
from tests.cli.console import airflow_ckpt
from tests.cli.sample_store import fill_store


def test_help_lists_every_subcommand() -> None:
    result = airflow_ckpt("--help")
    assert result.code == 0
    for command in ("list", "show", "progress", "epochs", "keys", "commit", "clear", "discard", "check"):
        assert command in result.out
    assert "Exit codes" in result.out


def test_progress_of_a_local_store(tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    fill_store(uri, (tmp_path / "out").as_uri())
    table = airflow_ckpt("progress", uri)
    assert table.code == 0, table.err
    assert "keys done:         150" in table.out and "partitions sealed: 3/4" in table.out
    as_json = airflow_ckpt("progress", str(tmp_path / "store"), "--json")  # a plain path works too
    assert json.loads(as_json.out)["keys_done"] == 150


def test_bad_uri_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = airflow_ckpt("list", "not/absolute")
    assert result.code == 2 and result.out == ""
    assert result.err.count("\n") == 1 and "relative paths are ambiguous" in result.err


def test_clear_without_terminal_needs_yes(tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    fill_store(uri, (tmp_path / "out").as_uri())
    refused = airflow_ckpt("clear", uri)
    assert refused.code == 2 and "pass --yes" in refused.err
    done = airflow_ckpt("clear", uri, "--yes")
    assert done.code == 0 and "checkpoints deleted: 3" in done.out


def test_task_instance_resolves_to_the_operators_default_store(tmp_path: Path) -> None:
    home = tmp_path / "airflow_home"
    run_id = "manual__2024-01-01T00:00:00+00:00"
    # Without a metadata DB the run's logical date is unknown: the default of a run without one,
    # $AIRFLOW_HOME/checkpoints/{dag_id}/{task_id}/run={run_id} (hooks/default_location.py), and
    # /map_index={i} for each mapped instance.
    root = Path(default_location(str(home / "checkpoints"), JobIdentity("etl", "spark_job", run_id)))
    assert root.name.startswith("run=manual__2024-01-01T00_00_00_00_00~")
    fill_store(root.as_uri(), (tmp_path / "out").as_uri(), partitions=2)
    fill_store((root / "map_index=1").as_uri(), (tmp_path / "out1").as_uri(), partitions=3)
    argv = ["progress", "--dag-id", "etl", "--task-id", "spark_job", "--run-id", run_id]
    result = airflow_ckpt(*argv, "--json", env={"AIRFLOW_HOME": str(home)})
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert data["store_uri"] == f"file://{root}"
    assert data["keys_done"] == 100
    mapped = airflow_ckpt(*argv, "--map-index", "1", "--json", env={"AIRFLOW_HOME": str(home)})
    assert mapped.code == 0, mapped.err
    assert json.loads(mapped.out)["store_uri"] == f"file://{root}/map_index=1"
    assert json.loads(mapped.out)["keys_done"] == 150
    alone = airflow_ckpt("progress", str(root), "--map-index", "1", env={"AIRFLOW_HOME": str(home)})
    assert alone.code == 2 and "--map-index names a mapped task instance" in alone.err


def test_task_instance_under_a_configured_base_uri(tmp_path: Path) -> None:
    base = tmp_path / "elsewhere"
    fill_store((base / "etl" / "load" / "run=run_1").as_uri(), (tmp_path / "out").as_uri(), partitions=1)
    env = {"AIRFLOW_HOME": str(tmp_path / "home"), "AIRFLOW__CKPT__BASE_URI": base.as_uri()}
    result = airflow_ckpt("list", "--dag-id", "etl", "--task-id", "load", "--run-id", "run_1", "--json", env=env)
    assert result.code == 0, result.err
    assert len(json.loads(result.out)) == 1


def test_undefined_connection_exit_3(tmp_path: Path) -> None:
    result = airflow_ckpt("progress", "s3://bucket/p", "--aws-conn-id", "nope", env={"AIRFLOW_HOME": str(tmp_path)})
    assert result.code == 3
    last = result.err.strip().splitlines()[-1]
    assert last.startswith("airflow-ckpt: error: no usable credentials from connection 'nope'")
