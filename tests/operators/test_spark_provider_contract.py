"""What ``CheckpointedSparkSubmitOperator`` needs from the Spark provider beyond its public interface,
pinned: if an upgrade of ``apache-airflow-providers-apache-spark`` renames or drops one of these, this
test says which, before a submit goes wrong at run time.

The operator subclasses ``SparkSubmitOperator`` and its hook (operators/spark_submit.py):
* the hook is rebuilt as our subclass from ``SparkSubmitOperator._get_hook()``'s ``__dict__``;
* ``SparkSubmitHook.submit`` is the one place every deploy mode submits through (epoch opened there);
* ``_process_spark_submit_log`` is tapped for the driver's result line (client mode);
* ``_conf`` gets the store confs, ``_env_vars`` the store credentials (and ``_is_yarn`` /
  ``_is_kubernetes`` refuse to put them on a command line);
* ``_driver_status`` tells whether a cluster driver of a failed attempt may still run;
* ``SparkSubmitOperator._hook`` holds the hook after ``execute``, ``poll_until_complete`` is the
  durable mode's wait.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator

pytestmark = pytest.mark.airflow

HOOK_METHODS = ("submit", "_process_spark_submit_log")
HOOK_FIELDS = ("_conf", "_env_vars", "_is_yarn", "_is_kubernetes", "_driver_status")


def test_the_provider_version_is_one_this_package_supports() -> None:
    version = importlib.metadata.version("apache-airflow-providers-apache-spark")
    major = int(version.split(".")[0])
    assert major == 6, f"pyproject pins the Spark provider to 6.x; {version} is installed: re-check this file"


def test_the_hook_members_the_operator_uses_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONTRACT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    hook = SparkSubmitHook(conn_id="spark_contract", conf={"a": "b"}, env_vars={"X": "1"})
    for name in HOOK_METHODS:
        assert callable(getattr(SparkSubmitHook, name, None)), f"SparkSubmitHook.{name} is gone"
    for name in HOOK_FIELDS:
        assert name in vars(hook), f"SparkSubmitHook no longer sets self.{name} in __init__"
    assert vars(hook)["_conf"] == {"a": "b"} and vars(hook)["_env_vars"] == {"X": "1"}
    assert vars(hook)["_is_yarn"] is False and vars(hook)["_is_kubernetes"] is False
    # submit(application, **kwargs): the operator passes kwargs (env) through to subprocess.Popen.
    params = inspect.signature(SparkSubmitHook.submit).parameters
    assert "application" in params and any(p.kind is p.VAR_KEYWORD for p in params.values())


def test_the_operator_members_it_overrides_exist() -> None:
    for name in ("_get_hook", "poll_until_complete", "execute"):  # overridden by ours: they must still be called
        assert callable(getattr(SparkSubmitOperator, name, None)), f"SparkSubmitOperator.{name} is gone"
        assert name in vars(CheckpointedSparkSubmitOperator)
    source = inspect.getsource(SparkSubmitOperator)
    assert "self._hook" in source, "SparkSubmitOperator no longer keeps its hook in self._hook"
