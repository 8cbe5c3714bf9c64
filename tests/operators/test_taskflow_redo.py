"""Reprocess and rewind from a DAG on a ``@task.checkpointed_pyspark`` task's store, found through
``spark_task_id`` as for the submit operator: three real ``dag.test()`` runs of one logical date (each a
new trigger of the day with its own params), a classic local session in the task's process, a real
metadata DB, a local store and output that a plain pyarrow reader checks after every commit.

1. the day's first run: ``job`` writes keys 0-39 (version 1), the commit (``retain``) keeps the checkpoints;
2. the day again with ``reprocess_keys=[12, 17]`` (the fixed code, version 2): the reprocess, before
   ``job`` runs in this run, finds the day's store and the output roots ``job`` declares, takes the
   checkpoint holding keys 10-19 back and moves its output to the store's quarantine; ``job`` skips the
   30 committed keys and writes exactly 10-19 again; after the commit every key is there once, 10-19 new;
3. the day again with ``rewind_to=1`` (version 3): what run 2 sealed after commit 1 becomes pending and
   its output is quarantined; ``job`` writes 10-19 again; every key once, 10-19 from version 3.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from airflow_ckpt_provider.store import open_store
from tests.support.airflow_harness import AirflowHarness

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"
DAG_ID = "ckpt_taskflow_redo"


def _rows(directory: Path) -> list[tuple[int, int]]:
    """(key, value) of every row a plain pyarrow reader sees under ``directory``, sorted."""
    files = sorted(str(p) for p in directory.rglob("*.parquet"))
    if not files:
        return []
    table = ds.dataset(files, format="parquet").to_table(columns=["key", "value"])
    return sorted(zip(table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True))


def _local(uri: str) -> Path:
    """A local store's directory, however its URI is spelled (``file://`` in the XComs, a plain path from the
    harness's default location)."""
    return Path(uri.removeprefix("file://"))


def _expected(versions: dict[range, int]) -> list[tuple[int, int]]:
    return sorted((k, k * 10 + version) for keys, version in versions.items() for k in keys)


@pytest.mark.timeout(1500)
def test_reprocess_and_rewind_through_spark_task_id_redo_part_of_a_taskflow_tasks_output(
    airflow_harness: AirflowHarness, tmp_path: Path
) -> None:
    airflow_harness.install_dag(DAGS / "taskflow_redo_dag.py")
    output = tmp_path / "out"
    day = dt.datetime(2024, 8, 1, tzinfo=dt.UTC)

    def run(version: int, conf: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        env = {"REDO_OUTPUT": str(output), "REDO_VERSION": str(version)}
        outcome = airflow_harness.run_dag(DAG_ID, logical_date=day, conf=conf, env=env, timeout=900)
        assert outcome.state == "success", outcome.output[-4000:]
        plan = airflow_harness.xcom(DAG_ID, outcome.run_id, "job", "checkpoint_plan")
        default = airflow_harness.default_store_uri(DAG_ID, "job", outcome.run_id)
        assert _local(plan["checkpoint_uri"]) == Path(default), plan  # the day's store, every run
        return outcome.run_id, plan

    # 1. The day's first run: every key, version 1.
    run_id, plan = run(1, {})
    assert airflow_harness.task_instances(DAG_ID, run_id)["reprocess"][0] == "skipped"
    assert airflow_harness.xcom(DAG_ID, run_id, "job", "checkpoint_result")["keys"] == 40
    assert airflow_harness.xcom(DAG_ID, run_id, "commit")["rows_committed"] == 40
    assert _rows(output) == _expected({range(40): 1})
    uri = plan["checkpoint_uri"]
    store_root = _local(uri)

    # 2. Reprocess keys 12 and 17 (their checkpoint holds 10-19), then the job with the fixed code.
    run_id, plan = run(2, {"reprocess_keys": json.dumps([12, 17])})
    reprocessed = airflow_harness.xcom(DAG_ID, run_id, "reprocess")
    assert reprocessed["checkpoint_uri"] == uri, reprocessed  # found through spark_task_id, spelled as the job does
    assert "output_kept_because" not in reprocessed, reprocessed  # job's output_roots reached the reprocess
    result = reprocessed["result"]
    assert (result["action"], result["checkpoints"], result["keys"], result["deleted"]) == ("reprocess", 1, 10, 0)
    assert result["moved"] == result["files"] > 0, result
    assert _rows(store_root / "quarantine") == _expected({range(10, 20): 1})  # undo-able until the next run
    assert plan["keys_skipped"] == 30, plan
    assert airflow_harness.xcom(DAG_ID, run_id, "job", "checkpoint_result")["keys"] == 10
    assert _rows(output) == _expected({range(10): 1, range(10, 20): 2, range(20, 40): 1})

    # 3. Rewind to commit 1: what run 2 sealed after it is pending again, its output quarantined.
    run_id, plan = run(3, {"rewind_to": 1})
    rewound = airflow_harness.xcom(DAG_ID, run_id, "rewind")
    assert rewound["checkpoint_uri"] == uri and "output_kept_because" not in rewound, rewound
    result = rewound["result"]
    assert (result["action"], result["to_commit"], result["keys"], result["deleted"]) == ("rewind", 1, 10, 0)
    assert result["checkpoints"] > 0 and result["moved"] == result["files"] > 0, result  # run 2's tasks' checkpoints
    assert _rows(store_root / "quarantine") == sorted(_expected({range(10, 20): 1}) + _expected({range(10, 20): 2}))
    assert plan["keys_skipped"] == 30, plan
    assert airflow_harness.xcom(DAG_ID, run_id, "job", "checkpoint_result")["keys"] == 10
    assert _rows(output) == _expected({range(10): 1, range(10, 20): 3, range(20, 40): 1})
    store = open_store(uri, trusted_output_roots=[str(output)])
    assert store.inspection.check().ok, store.inspection.check().problems
