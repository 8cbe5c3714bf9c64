"""``hooks/store_visibility.py``: the embedded default store is refused where another host must read it.

The matrix below is every executor and Spark master / deploy mode a submit or a TaskFlow task meets;
a store the deployment names (``[ckpt] base_uri``, ``file://`` included, or ``checkpoint_uri``) is
taken as shared. The operators refuse before spark-submit (a stand-in ``spark-submit`` on the PATH
records any call) and before a Spark session. ``dag.test()`` under a Celery configuration runs the
task in its own process and is accepted: a real run in tests/dags_examples/test_ckpt_daily_events.py
(its ``writer`` case). The distributed deployment that shows why
(a retry on another worker, the commit on either) is tests/dags_examples/test_deployment.py.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pendulum
import pytest
from airflow.sdk import DAG

from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.store_visibility import (
    IN_PROCESS_VARIABLE,
    ExecutorConfig,
    SparkPlacement,
    refuse_unshared_default,
    store_readers,
    unshared_reasons,
)
from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator
from airflow_ckpt_provider.sensors.checkpoint import CheckpointSensor
from airflow_ckpt_provider.store.errors import InvalidArgumentError
from airflow_ckpt_provider.taskflow.operator import CheckpointedPySparkOperator
from tests.support.errors import raises_reason

START = pendulum.datetime(2024, 1, 1)

#: [core] executor -> whether the default executor runs tasks on the scheduler's host.
EXECUTORS = {
    "LocalExecutor": True,
    "CeleryExecutor": False,
    "KubernetesExecutor": False,
    "airflow.providers.edge3.executors.EdgeExecutor": False,
    "airflow.providers.amazon.aws.executors.ecs.ecs_executor.AwsEcsExecutor": False,
}
#: How Spark runs the job -> whether its driver and executors all run on this host.
PLACEMENTS = {
    "submit local[2]": (SparkPlacement.of_submit("local[2]", None, {}), True),
    "submit local[*] client": (SparkPlacement.of_submit("local[*]", "client", {}), True),
    "submit local[4,2]": (SparkPlacement.of_submit("local[4,2]", None, {}), True),
    "submit local-cluster": (SparkPlacement.of_submit("local-cluster[2,1,1024]", None, {}), True),
    "submit standalone client": (SparkPlacement.of_submit("spark://10.0.0.5:7077", "client", {}), False),
    # A master reached on loopback may still have workers on other hosts (bound to every interface).
    "submit standalone on localhost": (SparkPlacement.of_submit("spark://127.0.0.1:7077", None, {}), False),
    "submit standalone cluster": (SparkPlacement.of_submit("spark://10.0.0.5:7077", "cluster", {}), False),
    "submit yarn client": (SparkPlacement.of_submit("yarn", "client", {}), False),
    "submit yarn cluster (conf)": (
        SparkPlacement.of_submit("yarn", None, {"spark.submit.deployMode": "cluster"}),
        False,
    ),
    "submit kubernetes": (SparkPlacement.of_submit("k8s://https://127.0.0.1:6443", "client", {}), False),
    "session local[*]": (SparkPlacement.of_session("local[*]", {}), True),
    "session standalone": (SparkPlacement.of_session("spark://10.0.0.5:7077", {}), False),
    "session master in config_kwargs": (SparkPlacement.of_session("local[*]", {"spark.master": "yarn"}), False),
    "connect on localhost, server master unknown": (SparkPlacement.of_session("sc://localhost:15002", {}), True),
    "connect on localhost, server local[2]": (
        SparkPlacement.of_session("sc://127.0.0.1:15002", {}).with_server_master("local[2]"),
        True,
    ),
    "connect on localhost, server on a cluster": (
        SparkPlacement.of_session("sc://localhost:15002", {}).with_server_master("spark://10.0.0.5:7077"),
        False,
    ),
    "connect elsewhere": (SparkPlacement.of_session("sc://spark-connect.internal:15002/;user_id=a", {}), False),
    "connect elsewhere (spark.remote)": (
        SparkPlacement.of_session("local[*]", {"spark.remote": "sc://10.1.1.1:15002"}),
        False,
    ),
}


@pytest.mark.parametrize(
    ("executor", "placement"), list(itertools.product(EXECUTORS, PLACEMENTS)), ids=lambda value: str(value)
)
def test_each_executor_and_spark_placement(executor: str, placement: str) -> None:
    spark, spark_here = PLACEMENTS[placement]
    executor_here = EXECUTORS[executor]
    reasons = unshared_reasons([("submit", None), ("commit", None)], spark, ExecutorConfig.parse(executor))
    # Each process off this host is named once: both tasks' executor, the Spark side.
    assert len(reasons) == (0 if executor_here else 2) + (0 if spark_here else 1), reasons
    if not executor_here:
        assert f"task 'submit' runs on {executor.rsplit('.', 1)[-1]}" in reasons[0]
    # dags test / tasks test run every try and task in their own process: only Spark can be elsewhere.
    in_process = unshared_reasons([("submit", None)], spark, ExecutorConfig.parse(executor), in_process=True)
    assert len(in_process) == (0 if spark_here else 1)


@pytest.mark.parametrize(
    ("config", "multi_team", "team", "readers", "shared"),
    [
        # The first executor is the default; a task's executor= names another by core name, alias or path.
        ("LocalExecutor,CeleryExecutor", False, None, [("submit", None), ("commit", None)], True),
        ("LocalExecutor,CeleryExecutor", False, None, [("submit", "CeleryExecutor"), ("commit", None)], False),
        ("LocalExecutor, CeleryExecutor", False, None, [("submit", None), ("commit", "CeleryExecutor")], False),
        ("CeleryExecutor,LocalExecutor", False, None, [("submit", "LocalExecutor"), ("commit", None)], False),
        ("CeleryExecutor,LocalExecutor", False, None, [("submit", "LocalExecutor"), ("commit", "LocalExecutor")], True),
        ("CeleryExecutor,near:LocalExecutor", False, None, [("submit", "near")], True),
        ("CeleryExecutor,airflow.executors.local_executor.LocalExecutor", False, None, [("s", "LocalExecutor")], True),
        ("far:CeleryExecutor,LocalExecutor", False, None, [("submit", "far")], False),
        # With [core] multi_team a team's DAGs default to the team's first executor; without it the list is ignored.
        ("LocalExecutor;team_a=CeleryExecutor", True, "team_a", [("submit", None)], False),
        ("LocalExecutor;team_a=CeleryExecutor", True, "team_b", [("submit", None)], True),
        ("LocalExecutor;team_a=CeleryExecutor", False, "team_a", [("submit", None)], True),
    ],
)
def test_several_executors_and_a_task_executor_argument(
    config: str, multi_team: bool, team: str | None, readers: list[tuple[str, str | None]], shared: bool
) -> None:
    executors = ExecutorConfig.parse(config, multi_team)
    local = SparkPlacement.of_submit("local[2]", None, {})
    assert (unshared_reasons(readers, local, executors, team=team) == []) is shared


def _dag_with_commit_and_sensor(**submit: Any) -> tuple[CheckpointedSparkSubmitOperator, DAG]:
    with DAG("visibility", schedule=None, start_date=START) as dag:
        spark = CheckpointedSparkSubmitOperator(task_id="submit", application="job.py", **submit)
        spark >> CheckpointCommitOperator(task_id="commit", spark_task_id="submit", executor="CeleryExecutor")
        CheckpointSensor(task_id="wait", spark_task_id="submit", deferrable=True)
        CheckpointCommitOperator(task_id="elsewhere", checkpoint_uri="s3://b/other", spark_task_id="submit")
        CheckpointCommitOperator.partial(task_id="mapped", spark_task_id="submit").expand(output_roots=[["/o"]])
    return spark, dag


def test_the_tasks_working_on_a_store_are_its_readers() -> None:
    spark, _ = _dag_with_commit_and_sensor()
    assert [t.task_id for t in store_readers(spark)] == ["submit", "commit", "wait", "mapped"]
    context: dict[str, Any] = {"run_id": "manual__1"}
    config = CheckpointConfig.load()
    executors = ExecutorConfig.parse("LocalExecutor,CeleryExecutor")
    local = SparkPlacement.of_submit("local[2]", None, {})
    with raises_reason(InvalidArgumentError, "store_not_shared", match=r"task 'commit' runs on CeleryExecutor"):
        refuse_unshared_default(spark, context, "/home/x/checkpoints/d", local, config, executors)


@pytest.mark.parametrize("base_uri", ["file:///mnt/shared/checkpoints", "/mnt/shared/checkpoints", "s3://lake/ckpt"])
def test_a_base_uri_the_deployment_names_is_taken_as_shared(base_uri: str) -> None:
    """``[ckpt] base_uri`` (``file://`` included: the administrator vouches that every host sees the same
    path) passes under any executor and Spark cluster; so does a ``checkpoint_uri`` named on the task."""
    celery = ExecutorConfig.parse("CeleryExecutor")
    cluster = SparkPlacement.of_submit("spark://10.0.0.5:7077", "cluster", {})
    context: dict[str, Any] = {"run_id": "manual__1"}
    spark, _ = _dag_with_commit_and_sensor()
    named = CheckpointConfig(**{**vars(CheckpointConfig.load()), "base_uri": base_uri})
    refuse_unshared_default(spark, context, f"{base_uri}/visibility/submit", cluster, named, celery)
    own, _ = _dag_with_commit_and_sensor(checkpoint_uri="file:///mnt/shared/one")
    refuse_unshared_default(own, context, "file:///mnt/shared/one", cluster, CheckpointConfig.load(), celery)
    # The same task on the embedded default is refused, naming both ways out.
    with raises_reason(InvalidArgumentError, "store_not_shared", match=r"base_uri = s3://.*or checkpoint_uri"):
        refuse_unshared_default(spark, context, "/home/x", cluster, CheckpointConfig.load(), celery)


# ---------------------------------------------------------------- the operators


@pytest.fixture
def airflow_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A worker's environment: its own AIRFLOW_HOME, no [ckpt] base_uri, and a ``spark-submit`` on the
    PATH that records each call (a submit that got past the refusal leaves a mark)."""
    home = tmp_path / "home"
    home.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "spark-submit-called"
    script = bin_dir / "spark-submit"
    script.write_text(f'#!/bin/sh\necho "$@" >> {marker}\nexit 1\n')
    script.chmod(0o755)
    monkeypatch.setenv("AIRFLOW_HOME", str(home))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("AIRFLOW__CKPT__BASE_URI", raising=False)
    monkeypatch.delenv(IN_PROCESS_VARIABLE, raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_CLUSTER",
        json.dumps(
            {"conn_type": "spark", "host": "spark://10.0.0.5", "port": 7077, "extra": {"deploy-mode": "cluster"}}
        ),
    )
    yield marker


def _context(task: Any) -> dict[str, Any]:
    logical = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    dag_run = type("DagRun", (), {"logical_date": logical, "dag_id": task.dag_id, "team_name": None})()
    return {"run_id": "manual__2024-05-01", "dag_run": dag_run}


@pytest.mark.parametrize(
    ("executor", "conn_id", "deploy_mode", "refused_for"),
    [
        ("CeleryExecutor", "spark_default", None, r"runs on CeleryExecutor"),
        ("KubernetesExecutor", "spark_default", None, r"runs on KubernetesExecutor"),
        ("LocalExecutor", "spark_cluster", None, r"deploy mode cluster runs the driver"),
        ("LocalExecutor", "spark_cluster", "client", r"master spark://10.0.0.5:7077 runs the executors"),
    ],
)
def test_the_submit_operator_refuses_before_spark_submit(
    airflow_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    executor: str,
    conn_id: str,
    deploy_mode: str | None,
    refused_for: str,
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", executor)
    with DAG("visibility", schedule=None, start_date=START):
        submit = CheckpointedSparkSubmitOperator(
            task_id="submit", application="job.py", conn_id=conn_id, deploy_mode=deploy_mode
        )
    with raises_reason(InvalidArgumentError, "store_not_shared", match=refused_for) as raised:
        submit.execute(_context(submit))  # type: ignore[arg-type]
    assert "visibility/submit/date=2024-05-01" in str(raised.value) and "Nothing was submitted" in str(raised.value)
    assert not airflow_env.exists()  # spark-submit never ran
    assert not (Path(os.environ["AIRFLOW_HOME"]) / "checkpoints").exists()  # no store, no epoch


def test_the_submit_operator_on_the_local_executor_and_local_spark_goes_on_to_submit(
    airflow_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded default as it was: LocalExecutor, ``local[2]``: the epoch opens and spark-submit runs."""
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
    with DAG("visibility", schedule=None, start_date=START):
        submit = CheckpointedSparkSubmitOperator(task_id="submit", application="job.py")
    with pytest.raises(Exception, match="spark-submit"):  # the stand-in exits 1
        submit.execute(_context(submit))  # type: ignore[arg-type]
    assert "job.py" in airflow_env.read_text()
    assert (Path(os.environ["AIRFLOW_HOME"]) / "checkpoints" / "visibility" / "submit" / "date=2024-05-01").is_dir()


def _never(spark: Any = None, ckpt_job: Any = None) -> None:
    raise AssertionError("never called: the task is refused before its session")


@pytest.mark.parametrize(
    ("executor", "conn", "refused_for"),
    [
        ("CeleryExecutor", None, r"task 'orders' runs on CeleryExecutor"),
        ("LocalExecutor", {"conn_type": "spark", "host": "spark://10.0.0.5", "port": 7077}, r"runs the executors"),
        ("LocalExecutor", {"conn_type": "spark_connect", "host": "10.255.255.1", "port": 15002}, r"Connect server"),
    ],
)
def test_the_taskflow_operator_refuses_before_its_session(
    airflow_env: Path, monkeypatch: pytest.MonkeyPatch, executor: str, conn: dict[str, Any] | None, refused_for: str
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", executor)
    if conn is not None:
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_ELSEWHERE", json.dumps(conn))
    with DAG("visibility", schedule=None, start_date=START):
        orders = CheckpointedPySparkOperator(
            task_id="orders", python_callable=_never, conn_id="spark_elsewhere" if conn else None
        )
    with raises_reason(InvalidArgumentError, "store_not_shared", match=refused_for):
        orders.execute(_context(orders))  # type: ignore[arg-type]
    assert not (Path(os.environ["AIRFLOW_HOME"]) / "checkpoints").exists()
