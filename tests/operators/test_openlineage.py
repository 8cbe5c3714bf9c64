"""OpenLineage through real DAG runs (real metadata DB), with and without the provider.

With ``apache-airflow-providers-openlineage`` and its file transport, the commit's
events carry the output roots as output datasets and the ``checkpointCommit`` run facet;
with the provider hidden (as if not installed) the same DAG still runs. The submit
operator keeps the Spark provider's parent-job and transport injection: the job sees
both in its SparkConf (real spark-submit; HTTP transport to a collector in the test).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_ckpt_provider.store import EpochStatus, FileMetadata, new_checkpoint_id, open_store
from tests.support.airflow_harness import AirflowHarness

pytestmark = [pytest.mark.airflow]

DAGS = Path(__file__).resolve().parents[1] / "support" / "dags"
NO_OPENLINEAGE = Path(__file__).resolve().parents[1] / "support" / "no_openlineage"


def _store_with_one_checkpoint_and_one_orphan(store_uri: str, output: Path) -> None:
    """What a failed and then resumed job leaves: one sealed checkpoint, one file of a dead attempt."""
    output.mkdir(parents=True)
    store = open_store(store_uri)
    epoch = store.epochs.begin(owner="ckpt_lineage/submit/r")
    for name, sealed in (("part-0.parquet", True), ("part-1-dead.parquet", False)):
        checkpoint_id, path = new_checkpoint_id(), f"file://{output}/{name}"
        store.record_intent(checkpoint_id, [path], epoch=epoch.number)
        pq.write_table(pa.table({"key": [1, 2, 3]}), output / name)
        if sealed:
            store.stage_keys(checkpoint_id, [1, 2, 3])
            store.stage_files(checkpoint_id, [FileMetadata(path, (output / name).stat().st_size, 3)])
            store.checkpoint(checkpoint_id, epoch=epoch.number, partition=0)
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)


def _file_transport(events: Path) -> dict[str, str]:
    return {
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events), "append": True}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "ckpt-tests",
    }


def test_commit_events_carry_the_output_datasets_and_the_commit_facet(
    airflow_harness: AirflowHarness, tmp_path: Path
) -> None:
    airflow_harness.install_dag(DAGS / "lineage_dag.py")
    store_uri, output, events = str(tmp_path / "store"), tmp_path / "lake" / "table", tmp_path / "events.jsonl"
    _store_with_one_checkpoint_and_one_orphan(store_uri, output)
    env = {"LINEAGE_STORE": store_uri, "LINEAGE_OUTPUT": str(output), **_file_transport(events)}

    run = airflow_harness.run_dag(
        "ckpt_lineage", logical_date=dt.datetime(2024, 7, 1, tzinfo=dt.UTC), env=env, outside_repository=True
    )
    assert run.state == "success", run.output[-4000:]
    assert events.exists(), run.output[-4000:]
    lines = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    complete = [e for e in lines if e.get("eventType") == "COMPLETE" and e["job"]["name"] == "ckpt_lineage.commit"]
    assert len(complete) == 1, [(e.get("eventType"), e["job"]["name"]) for e in lines]
    event = complete[0]
    assert [(d["namespace"], d["name"]) for d in event["outputs"]] == [("file", str(output))]
    facet = event["run"]["facets"]["checkpointCommit"]
    assert facet["committed"] == {"files": 1, "rows": 3, "checkpoints": 1}
    assert facet["deleted"]["orphan_files"] == 1 and facet["deleted"]["bytes_freed"] > 0
    assert facet["skipped"]["unknown_files_kept"] == 0
    assert [s["checkpoint_uri"] for s in facet["stores"]] == [store_uri]
    assert not (output / "part-1-dead.parquet").exists()


IMPORT_WITHOUT_PROVIDER = """
import sys
try:
    import airflow.providers.openlineage
except ImportError:
    pass
else:
    sys.exit("the provider is still importable")
from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator
from airflow_ckpt_provider.operators.commit import CheckpointCommitOperator
assert CheckpointCommitOperator(task_id="c", checkpoint_uri="/x").get_openlineage_facets_on_complete(None) is None
"""


def test_without_the_openlineage_provider_the_operators_import_and_run(
    airflow_harness: AirflowHarness, tmp_path: Path
) -> None:
    airflow_harness.install_dag(DAGS / "lineage_dag.py")
    store_uri, output, events = str(tmp_path / "store"), tmp_path / "lake" / "table", tmp_path / "events.jsonl"
    _store_with_one_checkpoint_and_one_orphan(store_uri, output)
    env = {
        "LINEAGE_STORE": store_uri,
        "LINEAGE_OUTPUT": str(output),
        **_file_transport(events),  # configured, but the provider is "not installed"
        "PYTHONPATH": str(NO_OPENLINEAGE),
    }
    import_check = subprocess.run(
        [sys.executable, "-c", IMPORT_WITHOUT_PROVIDER],
        env={**airflow_harness.env, **env},
        cwd=airflow_harness.home,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert import_check.returncode == 0, import_check.stdout[-2000:] + import_check.stderr[-2000:]

    run = airflow_harness.run_dag(
        "ckpt_lineage", logical_date=dt.datetime(2024, 7, 2, tzinfo=dt.UTC), env=env, outside_repository=True
    )
    assert run.state == "success", run.output[-4000:]
    commit = airflow_harness.xcom("ckpt_lineage", run.run_id, "commit")
    assert commit["files_committed"] == 1 and commit["orphans_deleted"] == 1
    assert not events.exists()  # no provider, no events


class _Collector(BaseHTTPRequestHandler):
    events: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).events.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A real OpenLineage HTTP endpoint on loopback; yields its URL and the events it received."""
    events: list[dict[str, Any]] = []
    handler = type("Collector", (_Collector,), {"events": events})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", events
    server.shutdown()
    server.server_close()


@pytest.mark.spark
def test_the_submit_operator_keeps_the_spark_providers_openlineage_injection(
    airflow_harness: AirflowHarness, tmp_path: Path, collector: tuple[str, list[dict[str, Any]]]
) -> None:
    url, events = collector
    airflow_harness.install_dag(DAGS / "handoff_dag.py", DAGS / "handoff_job.py")
    env = {
        "HANDOFF_OUTPUT": str(tmp_path / "out"),
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "http", "url": url}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "ckpt-tests",
        "AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO": "true",
        "AIRFLOW__OPENLINEAGE__SPARK_INJECT_TRANSPORT_INFO": "true",
    }
    run = airflow_harness.run_dag(
        "ckpt_handoff", logical_date=dt.datetime(2024, 7, 3, tzinfo=dt.UTC), env=env, outside_repository=True
    )
    assert run.state == "success", run.output[-4000:]
    result = airflow_harness.xcom("ckpt_handoff", run.run_id, "submit")
    seen = {k.removeprefix("openlineage_"): v for k, v in result.items() if k.startswith("openlineage_")}
    # The Spark provider's parent-job injection reached the driver's SparkConf...
    assert seen["spark.openlineage.parentJobNamespace"] == "ckpt-tests"
    assert seen["spark.openlineage.parentJobName"] == "ckpt_handoff.submit"
    assert seen["spark.openlineage.parentRunId"]
    # ...and so did its transport injection.
    assert seen["spark.openlineage.transport.type"] == "http"
    assert seen["spark.openlineage.transport.url"] == url
    # The Airflow side emitted over the same transport: the submit's run is the job's parent run.
    submit_runs = {e["run"]["runId"] for e in events if e["job"]["name"] == "ckpt_handoff.submit"}
    assert seen["spark.openlineage.parentRunId"] in submit_runs
    commit_done = [e for e in events if e["job"]["name"] == "ckpt_handoff.commit" and e["eventType"] == "COMPLETE"]
    assert commit_done and commit_done[0]["run"]["facets"]["checkpointCommit"]["committed"]["rows"] == 40
