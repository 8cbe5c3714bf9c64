"""The provider as Airflow sees it: registered, configured, and its example DAGs import cleanly."""

from __future__ import annotations

import configparser
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.provider_info import CONFIG_OPTIONS
from tests.support.airflow_harness import AirflowHarness

pytestmark = pytest.mark.airflow

EXAMPLES = Path(__file__).resolve().parents[1] / "dags_examples"
EXAMPLE_DAG_IDS = {
    "ckpt_daily_events",
    "ckpt_incremental_ingest",
    "ckpt_cluster_sensor",
    "ckpt_rewind_incremental",
    "ckpt_tenant_orders",
    "ckpt_connect_orders",
}


def _json_output(stdout: str) -> Any:
    """The JSON an ``airflow ... --output json`` printed (after any warnings on stdout)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(("[", "{")))
    return json.loads("\n".join(lines[start:]))


def test_airflow_providers_list_shows_the_provider(airflow_harness: AirflowHarness) -> None:
    proc = airflow_harness.airflow("providers", "list", "--output", "json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    providers = {p["package_name"]: p for p in _json_output(proc.stdout)}
    assert providers["airflow-ckpt-provider"]["version"] == "0.1.0"


def test_ckpt_config_section_has_the_provider_defaults(airflow_harness: AirflowHarness) -> None:
    """Airflow's ``[ckpt]`` defaults are the ones ``provider_info.CONFIG_OPTIONS`` declares (as are the
    README's table and ``hooks/config.py``'s: tests/test_readme.py)."""
    proc = airflow_harness.airflow("config", "list", "--section", "ckpt", "--show-values", "--color", "off")
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = configparser.ConfigParser(interpolation=None)
    shown.read_string(proc.stdout[proc.stdout.index("[ckpt]") :])
    assert dict(shown["ckpt"]) == {option.name: option.default for option in CONFIG_OPTIONS}


def test_example_dags_parse_without_import_errors(airflow_harness: AirflowHarness, tmp_path: Path) -> None:
    # A DAGs folder of its own, so that DAG files other tests installed do not count here.
    folder = tmp_path / "dags"
    shutil.copytree(EXAMPLES, folder, ignore=shutil.ignore_patterns("__pycache__"))
    env = {"AIRFLOW__CORE__DAGS_FOLDER": str(folder)}
    errors = airflow_harness.airflow("dags", "list-import-errors", "--local", "--output", "json", env=env)
    assert errors.returncode == 0, errors.stdout[-3000:] + errors.stderr[-3000:]
    assert _json_output(errors.stdout) == []
    listing = airflow_harness.airflow("dags", "list", "--local", "--output", "json", env=env)
    assert listing.returncode == 0, listing.stderr[-3000:]
    assert {d["dag_id"] for d in _json_output(listing.stdout)} == EXAMPLE_DAG_IDS


def test_every_module_under_dags_examples_imports() -> None:
    # Job scripts too: their imports must resolve (they run only under __main__).
    modules = sorted(str(p) for p in EXAMPLES.rglob("*.py"))
    code = "import runpy, sys\nfor path in sys.argv[1:]:\n    runpy.run_path(path, run_name='imported_by_test')\n"
    proc = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(modules) >= 5  # three DAGs and two job scripts


def test_the_checkpointed_pyspark_decorator_is_registered(airflow_harness: AirflowHarness) -> None:
    """``@task.checkpointed_pyspark`` resolves through the provider's ``task-decorators``, as ``@task.pyspark``."""
    code = (
        "from airflow.sdk import task\n"
        "print(task.checkpointed_pyspark.__module__, task.checkpointed_pyspark.__name__)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=airflow_harness.env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-2:] == ["airflow_ckpt_provider.taskflow.decorator", "checkpointed_pyspark_task"]
