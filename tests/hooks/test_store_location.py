"""``hooks/store_location.py``: the parameters commit, clear and the sensor share, in one mixin.

No DAG run here (the operators' runs are in tests/operators and tests/sensors): these check what
the classes declare, as Airflow's parser and serializer see them.
"""

from __future__ import annotations

import subprocess
import sys

import pendulum
import pytest
from airflow.sdk import DAG

from airflow_ckpt_provider.hooks.store_location import STORE_TEMPLATE_FIELDS, CheckpointStoreMixin
from airflow_ckpt_provider.operators.clear import ClearCheckpointsOperator
from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
from airflow_ckpt_provider.operators.reprocess import ReprocessCheckpointsOperator
from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator
from airflow_ckpt_provider.sensors.checkpoint import CheckpointSensor

STORE_TASKS = [CheckpointCommitOperator, ClearCheckpointsOperator, CheckpointSensor, ReprocessCheckpointsOperator]


@pytest.mark.parametrize("cls", STORE_TASKS)
def test_store_facing_tasks_share_the_mixin_and_template_its_fields(cls: type) -> None:
    assert issubclass(cls, CheckpointStoreMixin)
    assert set(STORE_TEMPLATE_FIELDS) <= set(cls.template_fields)


def test_the_submit_operator_templates_its_connection_too() -> None:
    assert {"checkpoint_uri", "aws_conn_id"} <= set(CheckpointedSparkSubmitOperator.template_fields)


@pytest.mark.parametrize("cls", STORE_TASKS)
def test_default_args_reach_the_shared_parameters(cls: type) -> None:
    """``default_args`` fill the mixin's parameters as they fill any operator parameter."""
    with DAG("d", schedule=None, start_date=pendulum.datetime(2024, 1, 1), default_args={"aws_conn_id": "lake"}):
        task = cls(task_id="t", spark_task_id="submit")
    assert (task.aws_conn_id, task.spark_task_id, task.checkpoint_uri) == ("lake", "submit", None)


@pytest.mark.parametrize("cls", STORE_TASKS)
def test_the_shared_parameters_can_be_mapped(cls: type) -> None:
    """Dynamic task mapping over stores: ``partial(...).expand(checkpoint_uri=[...])`` is accepted."""
    with DAG("d", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
        mapped = cls.partial(task_id="t", aws_conn_id="lake").expand(checkpoint_uri=["/s/a", "/s/b"])
    assert mapped.partial_kwargs["aws_conn_id"] == "lake"


def test_commit_clear_and_sensor_do_not_load_the_spark_provider() -> None:
    """They depend on the hook layer only: importing them must not import the submit operator (nor the
    apache-spark provider's operators and hooks it is built on)."""
    code = (
        "import sys\n"
        "import airflow_ckpt_provider.operators.commit, airflow_ckpt_provider.operators.clear\n"
        "import airflow_ckpt_provider.sensors.checkpoint\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('airflow.providers.apache.spark.operators', "
        "'airflow.providers.apache.spark.hooks', 'airflow_ckpt_provider.operators.spark_submit')))\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
