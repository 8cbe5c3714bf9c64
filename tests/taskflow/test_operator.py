"""``CheckpointedPySparkOperator``: what it cannot honour fails before any session, epoch or store record.

The DAG-level behaviour (retries, Clear, mapping, commit, UI locator, CLI) is proven by
tests/dags_examples/test_ckpt_connect_orders.py; these checks need no Airflow run.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.contract import (
    CONF_EPOCH,
    CONF_PYTHON_DAEMON,
    CONF_STORE_URI,
    CONF_WRITER_ENGINE,
    WORKER_DAEMON_MODULE,
)
from airflow_ckpt_provider.hooks.default_location import JobIdentity
from airflow_ckpt_provider.store import EpochStatus, RetentionPolicy, open_store
from airflow_ckpt_provider.store.errors import InvalidArgumentError
from airflow_ckpt_provider.taskflow.operator import CheckpointedPySparkOperator, session_config
from tests.support.errors import raises_reason


def _job(spark: Any = None, ckpt_job: Any = None) -> None:
    raise AssertionError("never called")


@pytest.mark.parametrize("conf", [CONF_STORE_URI, CONF_EPOCH])
def test_a_store_conf_the_operator_sets_fails_before_any_session_or_store_record(tmp_path: Path, conf: str) -> None:
    store = tmp_path / "store"
    operator = CheckpointedPySparkOperator(
        task_id="orders",
        python_callable=_job,
        checkpoint_uri=str(store),
        config_kwargs={conf: "file:///elsewhere", CONF_WRITER_ENGINE: "arrow"},
    )
    with raises_reason(
        InvalidArgumentError, "out_of_range", match=rf"sets {conf}.*checkpoint_uri.*Nothing was started"
    ):
        operator.execute({"run_id": "manual__1"})  # type: ignore[arg-type]
    assert not store.exists()  # no epoch, no record: the store was never opened


def test_a_function_without_ckpt_job_is_refused_when_the_dag_is_parsed() -> None:
    def plain(spark: Any = None) -> None:
        pass

    with raises_reason(InvalidArgumentError, "out_of_range", match="takes no 'ckpt_job' argument"):
        CheckpointedPySparkOperator(task_id="plain", python_callable=plain)


def test_the_injected_arguments_default_to_none_so_the_call_binds_at_parse_time() -> None:
    def orders(tenant: str, spark: Any, ckpt_job: Any) -> None:
        pass

    operator = CheckpointedPySparkOperator(task_id="orders", python_callable=orders, op_kwargs={"tenant": "a"})
    parameters = inspect.signature(operator.python_callable).parameters
    assert parameters["spark"].default is None and parameters["ckpt_job"].default is None
    assert parameters["tenant"].default is inspect.Parameter.empty


def test_on_rerun_skip_over_committed_output_calls_nothing_and_opens_no_epoch(tmp_path: Path) -> None:
    """A Clear (or new run) of a committed day with ``on_rerun="skip"``: the rerun plan of the shared
    ``EpochOpener`` says skip, so no session is built, the function is not called, no epoch is opened."""
    called: list[bool] = []

    def orders(spark: Any = None, ckpt_job: Any = None) -> None:
        called.append(True)

    store_uri = (tmp_path / "store").as_uri()
    operator = CheckpointedPySparkOperator(
        task_id="orders", python_callable=orders, checkpoint_uri=store_uri, on_rerun="skip"
    )
    context: dict[str, Any] = {"run_id": "manual__1"}
    job = JobIdentity.from_context(context, "orders", operator.dag_id).key()
    store = open_store(store_uri)
    epoch = store.epochs.begin(job=job, owner="earlier-run")
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED, summary={})
    store.commit([(tmp_path / "out").as_uri()])
    store.housekeeping.cleanup(RetentionPolicy.DELETE_AFTER_SUCCESS)

    assert operator.execute(context) is None  # type: ignore[arg-type]
    assert called == []
    assert store.epochs.current().number == epoch.number  # type: ignore[union-attr]


def test_a_classic_session_gets_the_worker_daemon_unless_named_and_connect_never() -> None:
    """As the submit operator does: Python tasks of a local (or classic cluster) session run through the
    package's worker daemon; a daemon named in ``config_kwargs`` or the connection wins; a Spark Connect
    server configures its own workers."""
    mine = {CONF_WRITER_ENGINE: "arrow"}
    assert session_config(mine, {}, False) == {CONF_PYTHON_DAEMON: WORKER_DAEMON_MODULE, **mine}
    assert session_config({CONF_PYTHON_DAEMON: "pyspark.daemon"}, {}, False) == {CONF_PYTHON_DAEMON: "pyspark.daemon"}
    assert session_config(mine, {CONF_PYTHON_DAEMON: "pyspark.daemon"}, False) == mine
    assert session_config(mine, {}, True) == mine
