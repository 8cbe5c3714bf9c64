"""Example DAG 4 (ckpt_tenant_orders): a mapped submit and a mapped commit, one store per tenant.

Real metadata DB and spark-submit. The failure and resume of one tenant among others is
tested on a smaller copy of this DAG in tests/operators/test_mapped_tenants.py; here the
example itself runs as a user would first run it, and every tenant's day lands exactly once.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.airflow_harness import AirflowHarness

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(2400)]

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"
TENANTS = {"alpha": 3_000, "beta": 4_000, "gamma": 5_000}


def test_each_tenant_is_submitted_and_committed_on_its_own_store(
    airflow_harness: AirflowHarness, tmp_path: Path
) -> None:
    airflow_harness.install_dag(EXAMPLES / "ckpt_tenant_orders.py", EXAMPLES / "jobs")
    lake = tmp_path / "lake"
    run = airflow_harness.run_dag(
        "ckpt_tenant_orders",
        logical_date=dt.datetime(2024, 6, 3, tzinfo=dt.UTC),
        env={"CKPT_EXAMPLE_LAKE": str(lake)},
        timeout=1500,
    )
    assert run.state == "success", run.output[-4000:]
    uris = set()
    for index, (tenant, count) in enumerate(TENANTS.items()):
        result = airflow_harness.xcom("ckpt_tenant_orders", run.run_id, "orders", map_index=index)
        commit = airflow_harness.xcom("ckpt_tenant_orders", run.run_id, "commit", map_index=index)
        assert result["keys"] == count and result["map_index"] == index
        assert commit["checkpoint_uri"] == result["checkpoint_uri"] and commit["rows_committed"] == count
        uris.add(result["checkpoint_uri"])
        output = lake / "orders" / f"tenant={tenant}" / "day=2024-06-03"
        numbers = sorted(n for p in output.glob("*.parquet") for n in pq.read_table(p).column("order_no").to_pylist())
        assert numbers == list(range(count))  # exactly once, for a plain Parquet reader
    assert len(uris) == 3
