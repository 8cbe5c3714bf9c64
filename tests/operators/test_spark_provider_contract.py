"""What the package needs from the Spark provider beyond its public interface, pinned: if an upgrade
of ``apache-airflow-providers-apache-spark`` renames or drops one of these, this test says which,
before a submit goes wrong at run time.

operators/spark_provider.py is the one module that uses the provider's private members; its docstring
says why it needs each. Here: it touches exactly the members listed below (a new one must be added
here), each is still defined by the installed provider (its source is read), and the few behaviours
the adapter builds on still hold.
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.apache.spark.hooks import spark_submit as provider_hook
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators import spark_submit as provider_operator
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_ckpt_provider.contract import Handoff
from airflow_ckpt_provider.operators import spark_provider
from airflow_ckpt_provider.operators.spark_provider import SubmitHookOperator

pytestmark = pytest.mark.airflow

#: name -> (provider class, "field" set in its __init__ | "method" it defines)
PINNED: dict[str, tuple[type, str]] = {
    "_process_spark_submit_log": (SparkSubmitHook, "method"),
    "_conf": (SparkSubmitHook, "field"),
    "_env_vars": (SparkSubmitHook, "field"),
    "_is_yarn": (SparkSubmitHook, "field"),
    "_is_kubernetes": (SparkSubmitHook, "field"),
    "_driver_status": (SparkSubmitHook, "field"),
    "_connection": (SparkSubmitHook, "field"),
    "_get_hook": (SparkSubmitOperator, "method"),
    "_hook": (SparkSubmitOperator, "field"),
    "_conn_id": (SparkSubmitOperator, "field"),
    "_deploy_mode": (SparkSubmitOperator, "field"),
    "_yarn_track_via_rm_api": (SparkSubmitOperator, "field"),
    "_track_driver_via_k8s_api": (SparkSubmitOperator, "field"),
}


def _private_members_touched(source: str) -> set[str]:
    """Every ``_name`` the module reads, writes, overrides or names in ``getattr``, except the
    class-level attributes it defines itself."""
    tree = ast.parse(source)
    own = {
        target.id
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for stmt in cls.body
        for target in (stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)])
        if isinstance(target, ast.Name)
    }
    touched: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            touched.add(node.attr)
        elif isinstance(node, ast.FunctionDef):
            touched.add(node.name)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr"):
            touched.update(a.value for a in node.args[1:2] if isinstance(a, ast.Constant) and isinstance(a.value, str))
    return {name for name in touched if name.startswith("_") and not name.startswith("__") and name not in own}


def test_the_provider_version_is_one_this_package_supports() -> None:
    version = importlib.metadata.version("apache-airflow-providers-apache-spark")
    major = int(version.split(".")[0])
    assert major == 6, f"pyproject pins the Spark provider to 6.x; {version} is installed: re-check this file"


def test_the_adapter_touches_exactly_the_pinned_members_and_says_why() -> None:
    assert _private_members_touched(inspect.getsource(spark_provider)) == set(PINNED)
    doc = spark_provider.__doc__ or ""
    assert [name for name in PINNED if f"``{name}``" not in doc] == [], "the adapter's docstring must name each"


def test_no_other_module_of_the_package_reaches_the_submit_hook() -> None:
    package = Path(inspect.getfile(spark_provider)).parents[1]
    hook_import = re.compile(r"^\s*from airflow\.providers\.apache\.spark\.hooks\.spark_submit ", re.M)
    offenders = [
        str(p) for p in package.rglob("*.py") if p.name != "spark_provider.py" and hook_import.search(p.read_text())
    ]
    assert offenders == []
    operator_source = (package / "operators" / "spark_submit.py").read_text()
    assert "airflow.providers.apache.spark" not in operator_source, "the submit operator goes through the adapter"


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_installed_provider_still_defines(name: str) -> None:
    cls, kind = PINNED[name]
    module = provider_hook if cls is SparkSubmitHook else provider_operator
    where = f"{cls.__name__} in {inspect.getfile(module)}"
    if kind == "method":
        assert re.search(rf"^    def {name}\(self\b", inspect.getsource(cls), re.M), (
            f"{where} no longer defines {name}()"
        )
    else:
        init = inspect.getsource(cls.__init__)
        assert re.search(rf"^\s+self\.{name}\s*(:[^=\n]+)?=", init, re.M), f"{where} no longer sets self.{name}"


def test_the_behaviours_the_adapter_builds_on() -> None:
    hook_source = inspect.getsource(SparkSubmitHook)
    submit = inspect.getsource(SparkSubmitHook.submit)
    # submit(application, **kwargs): kwargs (env) go to subprocess.Popen, the log goes through the tap.
    params = inspect.signature(SparkSubmitHook.submit).parameters
    assert "application" in params and any(p.kind is p.VAR_KEYWORD for p in params.values())
    assert "**kwargs" in submit and "self._process_spark_submit_log(" in submit
    # With env_vars (client mode) the provider builds the child's environment from them alone.
    assert "self._env = self._env_vars" in hook_source
    # _conf becomes --conf flags when the command is built (after our submit() added the store's).
    assert re.search(r"for key in self\._conf:", hook_source)
    # execute() builds its hook through _get_hook() and keeps it in _hook.
    assert "self._hook = self._get_hook()" in inspect.getsource(SparkSubmitOperator.execute)
    # The adapter's own public names do not shadow anything of the provider's operator.
    ours = [n for n in vars(SubmitHookOperator) if not n.startswith("_")]
    assert [n for n in ours if hasattr(SparkSubmitOperator, n)] == []


class _Probe(SubmitHookOperator):
    def before_submit(self) -> Handoff:  # pragma: no cover - never submitted here
        raise AssertionError("no submit in this test")


@pytest.fixture
def spark_conn(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONTRACT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    return "spark_contract"


def test_the_hook_is_rebuilt_with_every_field_the_provider_resolved(spark_conn: str) -> None:
    kwargs: dict[str, Any] = {"conn_id": spark_conn, "conf": {"a": "b"}, "env_vars": {"X": "1"}}
    probe = _Probe(task_id="probe", **kwargs)
    base = SparkSubmitOperator(task_id="base", **kwargs)._get_hook()
    hook = probe._get_hook()
    assert isinstance(hook, SparkSubmitHook) and type(hook) is not SparkSubmitHook
    assert not hasattr(SparkSubmitHook, "__slots__"), "the hook is cloned through its __dict__"
    assert set(vars(base)) <= set(vars(hook))
    assert vars(hook)["_conf"] == {"a": "b"} and vars(hook)["_env_vars"] == {"X": "1"}
    assert vars(hook)["_is_yarn"] is False and vars(hook)["_is_kubernetes"] is False
    assert vars(hook)["_driver_status"] is None
    # The master and deploy mode the refusal of an unshared store reads (hooks/store_visibility.py).
    assert (vars(hook)["_connection"]["master"], vars(hook)["_connection"]["deploy_mode"]) == ("local[2]", None)
    placement = _Probe(task_id="p", conn_id=spark_conn, deploy_mode="cluster").spark_placement()
    assert (placement.master, placement.deploy_mode) == ("local[2]", "cluster")
    assert probe.last_driver_status() == "" and probe.driver_result_line() is None  # no hook yet
    probe._hook = hook
    assert probe.driver_ref("driver-1").to_json() == {
        "conn_id": spark_conn,
        "external_id": "driver-1",
        "deploy_mode": None,
        "yarn_track_via_rm_api": False,
        "track_driver_via_k8s_api": False,
    }
