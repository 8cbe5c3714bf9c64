"""Example DAG 4 (ckpt_tenant_orders): a mapped submit and a mapped commit, one store per tenant.

Real metadata DB and spark-submit. The run is triggered with a bad order for tenant beta, as
the DAG's docstring tells a user to play it: beta's job fails on it while alpha and gamma
finish; the test corrects the order in the Airflow Variable the DAG reads at every try (as a
user would in Admin > Variables, while beta's instance waits for its retry); Airflow's retry
of that one instance resumes, skipping beta's orders its failed try checkpointed. Every
tenant's day lands exactly once, for a plain Parquet reader, with the corrected total.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.airflow_harness import AirflowHarness

# Up to three spark-submits for beta (a try, maybe a second before the correction lands, the resume).
pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(2400)]

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"
TENANTS = {"alpha": 3_000, "beta": 4_000, "gamma": 5_000}
CORRECTIONS = "ckpt_tenant_orders_corrections"
# In the last of beta's 8 partitions (3500-3999): the partitions before it are checkpointed when it fails.
BAD_NUMBER, CORRECTED_TOTAL = 3637, 12.5
BAD_ORDER = f"beta:{BAD_NUMBER}"
#: How the job names the bad order (dags_examples/jobs/tenant_orders.py).
BAD_RECORD = f"order {BAD_NUMBER} of tenant beta is malformed. Correct it in the Airflow Variable {CORRECTIONS}"


def test_each_tenant_is_committed_on_its_own_store_and_a_corrected_order_resumes_one_tenant(
    airflow_harness: AirflowHarness, tmp_path: Path
) -> None:
    airflow_harness.install_dag(EXAMPLES / "ckpt_tenant_orders.py", EXAMPLES / "jobs")
    lake = tmp_path / "lake"
    env = {"CKPT_EXAMPLE_LAKE": str(lake)}
    corrected: list[bool] = []

    def correct_the_order(proc: subprocess.Popen[str], log: Path) -> None:
        """Once beta's first try failed on the order, correct it where the DAG reads corrections."""
        deadline = time.monotonic() + 1200
        while proc.poll() is None and time.monotonic() < deadline:
            if BAD_RECORD in log.read_text(errors="replace"):
                value = json.dumps({BAD_ORDER: CORRECTED_TOTAL})
                done = airflow_harness.airflow("variables", "set", CORRECTIONS, value, env=env)
                assert done.returncode == 0, done.stderr[-2000:]
                corrected.append(True)
                return
            time.sleep(0.5)

    try:
        run = airflow_harness.run_dag(
            "ckpt_tenant_orders",
            logical_date=dt.datetime(2024, 6, 3, tzinfo=dt.UTC),
            conf={"bad_order": BAD_ORDER},
            env=env,
            while_running=correct_the_order,
            timeout=2000,
        )
    finally:
        airflow_harness.airflow("variables", "delete", CORRECTIONS, env=env)
    assert run.state == "success", run.output[-4000:]
    assert corrected, "beta's job failed on the bad order and named the Variable"
    tries = airflow_harness.mapped_task_instances("ckpt_tenant_orders", run.run_id, "orders")
    assert tries[0] == ("success", 1) and tries[2] == ("success", 1)  # alpha and gamma: one try each
    assert tries[1][0] == "success" and tries[1][1] >= 2  # beta: failed, then a retry finished it

    uris = set()
    for index, (tenant, count) in enumerate(TENANTS.items()):
        plan = airflow_harness.xcom("ckpt_tenant_orders", run.run_id, "orders", "checkpoint_plan", map_index=index)
        result = airflow_harness.xcom("ckpt_tenant_orders", run.run_id, "orders", map_index=index)
        commit = airflow_harness.xcom("ckpt_tenant_orders", run.run_id, "commit", map_index=index)
        if tenant == "beta":  # the retry resumed: only the orders the failed try had not checkpointed
            assert 0 < plan["keys_skipped"] < count and plan["checkpoints_skipped"] > 0, plan
            assert result["keys"] == count - plan["keys_skipped"]
        else:
            assert plan["keys_skipped"] == 0 and result["keys"] == count
        assert result["map_index"] == index
        assert commit["checkpoint_uri"] == result["checkpoint_uri"] and commit["rows_committed"] == count
        uris.add(result["checkpoint_uri"])
        output = lake / "orders" / f"tenant={tenant}" / "day=2024-06-03"
        table = pq.read_table(output, columns=["order_no", "total"]).to_pydict()
        assert sorted(table["order_no"]) == list(range(count))  # exactly once, for a plain Parquet reader
        totals = dict(zip(table["order_no"], table["total"], strict=True))
        if count > BAD_NUMBER:  # the correction is beta's only: gamma's order of that number keeps its total
            assert totals[BAD_NUMBER] == (CORRECTED_TOTAL if tenant == "beta" else BAD_NUMBER % 97 * 1.5)
    assert len(uris) == 3
