"""Example DAG 6 (ckpt_connect_orders): ``@task.checkpointed_pyspark`` mapped over two tenants.

Real metadata DB; the tasks' Spark sessions are Spark Connect sessions on a real Connect server (the
suite's ``connect_server``, through a ``spark_connect`` connection), then local ones (a ``spark``
connection whose host is ``local[2]``, as ``PySparkOperator`` makes it). The run is triggered over
Connect with a bad order for tenant beta, as the DAG's docstring tells a user to play it:

1. beta's function fails on it in its last input file; its retry resumes (skipping what the
   first try sealed) and fails on it again; alpha finishes and commits;
2. the order is corrected in the Variable and the run is cleared "only failed": beta's third try
   processes only the orders its tries did not checkpoint, and its commit makes the day
   exactly-once for a plain Parquet reader;
3. the XComs (``checkpoint_plan``, ``checkpoint_result``, the function's own ``return_value``)
   and ``airflow-ckpt progress --dag-id/--task-id/--run-id/--map-index`` (which resolves the store
   as the Checkpoints view does) agree on beta's store;
4. the same day runs again from scratch (Clear of a successful run) in local mode (classic PySpark in
   the task's process): both tenants replace their committed output, still once each for a plain reader.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.parquet as pq
import pytest

from airflow_ckpt_provider.contract import WORKER_DAEMON_MODULE
from tests.cli.console import airflow_ckpt
from tests.support.airflow_harness import AirflowHarness

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(1200)]

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"
DAG_ID = "ckpt_connect_orders"
CORRECTIONS = "ckpt_connect_orders_corrections"
ORDERS = 400  # per tenant: 8 files of 50, read by 8 tasks (dags_examples/ckpt_connect_orders.py)
BAD_ID, CORRECTED_TOTAL = 387, 12.5  # in beta's last file
DAY = dt.datetime(2024, 6, 3, tzinfo=dt.UTC)
LOCAL_SPARK = {"conn_type": "spark", "host": "local[2]", "extra": {"spark.ui.enabled": "false"}}


def _env(lake: Path, connect_server: str) -> dict[str, str]:
    """Tasks on the suite's Connect server (``spark_remote``); ``spark_local`` names local mode."""
    remote = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": urlsplit(connect_server).port}
    return {
        "CKPT_EXAMPLE_LAKE": str(lake),
        "CKPT_EXAMPLE_SPARK_CONN": "spark_remote",
        "AIRFLOW_CONN_SPARK_REMOTE": json.dumps(remote),
        "AIRFLOW_CONN_SPARK_LOCAL": json.dumps(LOCAL_SPARK),
    }


def test_a_failed_tenant_resumes_after_clear_only_failed_and_each_tenant_lands_once(
    airflow_harness: AirflowHarness, connect_server: str, tmp_path: Path
) -> None:
    airflow_harness.install_dag(EXAMPLES / "ckpt_connect_orders.py")
    lake = tmp_path / "lake"
    env = _env(lake, connect_server)
    first = airflow_harness.run_dag(DAG_ID, logical_date=DAY, conf={"bad_order": f"beta:{BAD_ID}"}, env=env)
    assert first.state == "failed", first.output[-4000:]
    assert f"order {BAD_ID} of tenant beta is malformed" in first.output
    run_id = first.run_id
    tries = airflow_harness.mapped_task_instances(DAG_ID, run_id, "orders")
    assert tries[0] == ("success", 1) and tries[1] == ("failed", 2), tries  # beta: a try and its retry
    retry_plan = airflow_harness.xcom(DAG_ID, run_id, "orders", "checkpoint_plan", map_index=1)
    # The retry skipped what the first try sealed (the files before the bad one, read by finished tasks).
    assert 0 < retry_plan["keys_skipped"] < ORDERS and retry_plan["epoch"] == 2, retry_plan
    assert airflow_harness.xcom(DAG_ID, run_id, "orders", "checkpoint_result", map_index=1) is None

    # The correction, in the Variable the function reads at every try (from the environment: no CLI round trip).
    corrected = {f"AIRFLOW_VAR_{CORRECTIONS.upper()}": json.dumps({f"beta:{BAD_ID}": CORRECTED_TOTAL})}
    second = airflow_harness.run_dag(
        DAG_ID, logical_date=DAY, conf={"bad_order": f"beta:{BAD_ID}"}, env={**env, **corrected}, only_failed=True
    )
    assert second.state == "success" and second.run_id == run_id, second.output[-4000:]
    assert airflow_harness.mapped_task_instances(DAG_ID, run_id, "orders") == {0: ("success", 1), 1: ("success", 3)}
    # The TaskFlow operator takes the job's result from finish() in its own process: the job prints none.
    assert "Checkpointed job finished" in second.output and "CKPT_RESULT" not in first.output + second.output

    for index, tenant in enumerate(("alpha", "beta")):
        plan = airflow_harness.xcom(DAG_ID, run_id, "orders", "checkpoint_plan", map_index=index)
        result = airflow_harness.xcom(DAG_ID, run_id, "orders", "checkpoint_result", map_index=index)
        returned = airflow_harness.xcom(DAG_ID, run_id, "orders", map_index=index)
        commit = airflow_harness.xcom(DAG_ID, run_id, "commit", map_index=index)
        if tenant == "beta":  # only the orders neither failed try checkpointed
            assert retry_plan["keys_skipped"] <= plan["keys_skipped"] < ORDERS and plan["epoch"] == 3, plan
            assert result["keys"] == ORDERS - plan["keys_skipped"] > 0
        else:
            assert plan["keys_skipped"] == 0 and plan["epoch"] == 1 and result["keys"] == ORDERS
        assert returned == {"tenant": tenant, "rows": result["rows"]}  # the function's own, beside the summary
        assert result["map_index"] == index and result["epoch"] == plan["epoch"] and not result["degraded"]
        assert result["session"] == "connect", result  # the failed tries, their resume and the commit: over Connect
        assert commit["checkpoint_uri"] == result["checkpoint_uri"] == plan["checkpoint_uri"]
        assert commit["rows_committed"] == ORDERS
        table = pq.read_table(lake / "connect_orders" / f"tenant={tenant}" / "day=2024-06-03").to_pydict()
        assert sorted(table["order_id"]) == list(range(ORDERS))  # exactly once, for a plain Parquet reader
        totals = dict(zip(table["order_id"], table["total"], strict=True))
        assert totals[BAD_ID] == (CORRECTED_TOTAL if tenant == "beta" else BAD_ID % 97 * 1.5 * 1.2)

    # The CLI finds beta's store from the task instance (hooks/locator.py, as the Checkpoints view does), as
    # for a submit task: its default location, committed by epoch 3, whose base held what the failed tries sealed.
    beta = airflow_harness.xcom(DAG_ID, run_id, "orders", "checkpoint_result", map_index=1)
    assert beta["checkpoint_uri"] == "file://" + airflow_harness.default_store_uri(DAG_ID, "orders", run_id, 1)
    argv = ["progress", "--dag-id", DAG_ID, "--task-id", "orders", "--run-id", run_id, "--map-index", "1", "--json"]
    progress = airflow_ckpt(*argv, env=airflow_harness.env)
    assert progress.code == 0, progress.err
    shown = json.loads(progress.out)
    assert shown["store_uri"] == beta["checkpoint_uri"] and shown["committed"], shown
    assert shown["epoch"]["epoch"] == 3 and shown["epoch"]["base_keys"] == ORDERS - beta["keys"]
    assert shown["last_commit"]["rows_committed"] == ORDERS

    # The same day run again from scratch (dag.test clears every task instance: Clear of a successful run),
    # now in local mode (a classic session in the task's process): each tenant processes every order again
    # (on_rerun "replace"), and its commit retracts the files of the earlier commit, so a plain reader still
    # sees each order once.
    third = airflow_harness.run_dag(DAG_ID, logical_date=DAY, env={**env, "CKPT_EXAMPLE_SPARK_CONN": "spark_local"})
    assert third.state == "success" and third.run_id == run_id, third.output[-4000:]
    for index, tenant in enumerate(("alpha", "beta")):
        plan = airflow_harness.xcom(DAG_ID, run_id, "orders", "checkpoint_plan", map_index=index)
        result = airflow_harness.xcom(DAG_ID, run_id, "orders", "checkpoint_result", map_index=index)
        commit = airflow_harness.xcom(DAG_ID, run_id, "commit", map_index=index)
        assert plan["rerun"]["action"] == "replace" and plan["keys_skipped"] == 0, plan
        # A local session: its Python tasks ran through the package's worker daemon (taskflow.session_config).
        assert result["session"] == "classic" and result["python_daemon"] == WORKER_DAEMON_MODULE, result
        assert result["keys"] == ORDERS, result
        assert commit["files_replaced"] == 8 and commit["rows_committed"] == ORDERS, commit  # the live commit's files
        table = pq.read_table(lake / "connect_orders" / f"tenant={tenant}" / "day=2024-06-03").to_pydict()
        assert sorted(table["order_id"]) == list(range(ORDERS))
