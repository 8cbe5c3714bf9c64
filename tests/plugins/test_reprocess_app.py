"""Reprocess, rewind, undo and purge through the Checkpoints plugin's endpoints on a real
``airflow api-server`` (simple auth manager), with real local stores at the default location and
the audit log read back from the server's metadata DB."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.store import EpochStatus, RetentionPolicy, Selection, open_blobs, open_store
from tests.cli.sample_store import fill_store
from tests.support.api_server import DAG_ID, SPARK_TASK, ApiServer

pytestmark = pytest.mark.airflow

HEADERS = {"X-Requested-With": "airflow-ckpt-test"}


def committed_run(server: ApiServer) -> tuple[str, Path, str]:
    """A DAG run whose task's store holds one committed run (3 checkpoints of 50 keys, retain)."""
    run_id = f"rp_{uuid.uuid4().hex[:12]}"
    server.trigger_run(run_id)
    root = server.default_store_path(run_id)
    out = (server.home / "out" / run_id).as_uri()
    store = fill_store(root.as_uri(), out)
    epoch = store.epochs.current()
    assert epoch is not None
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    store.commit([out])
    store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    return run_id, root, out


def body(run_id: str, **extra: Any) -> dict[str, Any]:
    return {"dag_id": DAG_ID, "task_id": SPARK_TASK, "run_id": run_id} | extra


def outputs(out: str) -> set[str]:
    return {i.key for i in open_blobs(out).list("")}


def test_viewer_can_read_the_history_but_not_preview_or_act(ui_server: ApiServer) -> None:
    run_id, root, out = committed_run(ui_server)
    selection = {"keys": ["key-1-3"]}
    with ui_server.client("viewer") as viewer:
        history = viewer.get(
            "/checkpoints/api/task/reprocesses", params={"dag_id": DAG_ID, "run_id": run_id, "task_id": SPARK_TASK}
        )
        assert history.status_code == 200 and history.json()["can_edit"] is False
        for path, extra in (("preview", {}), ("", {"expected": "0" * 64})):
            response = viewer.post(
                f"/checkpoints/api/task/reprocess{'/' + path if path else ''}",
                json=body(run_id, selection=selection, **extra),
                headers=HEADERS,
            )
            assert response.status_code == 403, response.text
    assert len(outputs(out)) == 3 and open_store(root.as_uri()).inspection.progress().keys_done == 150
    assert not any(
        e["event"].startswith("checkpoints.reprocess") and "result" in e["extra"]
        for e in ui_server.audit_entries(run_id)
    )


def test_preview_then_reprocess_then_undo_then_purge_all_audited(ui_server: ApiServer) -> None:
    run_id, root, out = committed_run(ui_server)
    selection = {"keys": ["key-0-7", "key-2-1"]}
    expected = open_store(root.as_uri()).reprocessing.preview(Selection(keys=["key-0-7", "key-2-1"]))
    with ui_server.client("admin") as admin:
        preview = admin.post(
            "/checkpoints/api/task/reprocess/preview", json=body(run_id, selection=selection), headers=HEADERS
        )
        assert preview.status_code == 200, preview.text
        plan = preview.json()["preview"]
        # The dialog's numbers are the store's own dry run.
        assert (
            (len(plan["checkpoints"]), plan["keys"], plan["file_count"], plan["bytes"])
            == (
                len(expected.checkpoints),
                expected.keys,
                len(expected.files),
                expected.bytes,
            )
            == (2, 100, 2, 2000)
        )
        assert sorted(f["path"] for f in plan["files"]) == sorted(f.path for f in expected.files)
        assert outputs(out) == {"part-00000.parquet", "part-00001.parquet", "part-00002.parquet"}  # changed nothing

        unconfirmed = admin.post(
            "/checkpoints/api/task/reprocess", json=body(run_id, selection=selection), headers=HEADERS
        )
        assert unconfirmed.status_code == 422 and "preview first" in unconfirmed.text
        stale = admin.post(
            "/checkpoints/api/task/reprocess",
            json=body(run_id, selection=selection, expected="f" * 64),
            headers=HEADERS,
        )
        assert stale.status_code == 409 and stale.json()["error"] == "store_changed"
        assert outputs(out) == {"part-00000.parquet", "part-00001.parquet", "part-00002.parquet"}

        done = admin.post(
            "/checkpoints/api/task/reprocess",
            json=body(run_id, selection=selection, expected=plan["fingerprint"]),
            headers=HEADERS,
        )
        assert done.status_code == 200, done.text
        assert done.json()["result"]["moved"] == 2 and done.json()["result"]["keys"] == 100
        assert outputs(out) == {"part-00001.parquet"}
        assert open_store(root.as_uri()).inspection.progress().keys_done == 50

        history = admin.get(
            "/checkpoints/api/task/reprocesses", params={"dag_id": DAG_ID, "run_id": run_id, "task_id": SPARK_TASK}
        ).json()["reprocesses"]
        assert [(r["action"], r["files"], r["undone"]) for r in history] == [("reprocess", 2, False)]
        epoch = history[0]["epoch"]

        undo_preview = admin.post(
            "/checkpoints/api/task/reprocess/preview", json=body(run_id, action="undo", epoch=epoch), headers=HEADERS
        )
        undo_plan = undo_preview.json()["preview"]
        assert undo_plan["file_count"] == 2
        undone = admin.post(
            "/checkpoints/api/task/reprocess",
            json=body(run_id, action="undo", epoch=epoch, expected=undo_plan["fingerprint"]),
            headers=HEADERS,
        )
        assert undone.status_code == 200 and undone.json()["result"]["restored"] == 2
        assert len(outputs(out)) == 3 and open_store(root.as_uri()).inspection.progress().keys_done == 150

        purge_plan = admin.post(
            "/checkpoints/api/task/reprocess/preview", json=body(run_id, action="purge", epoch=epoch), headers=HEADERS
        ).json()["preview"]
        purged = admin.post(
            "/checkpoints/api/task/reprocess",
            json=body(run_id, action="purge", epoch=epoch, expected=purge_plan["fingerprint"]),
            headers=HEADERS,
        )
        assert purged.status_code == 200 and purged.json()["result"]["purged"] == 2

    events = [(e["event"], e["owner"]) for e in ui_server.audit_entries(run_id)]
    assert events == [
        ("checkpoints.reprocess.failed", "admin"),  # the unconfirmed request, refused (422)
        ("checkpoints.reprocess.failed", "admin"),  # the stale confirmation, refused
        ("checkpoints.reprocess", "admin"),
        ("checkpoints.undo_reprocess", "admin"),
        ("checkpoints.purge_quarantine", "admin"),
    ]
    entry = ui_server.audit_entries(run_id)[2]["extra"]
    assert entry["result"]["moved"] == 2 and entry["fingerprint"] == plan["fingerprint"]
    assert "key-0-7" in entry["selection"]


def test_rewind_bad_input_and_a_running_task(ui_server: ApiServer) -> None:
    run_id, _, out = committed_run(ui_server)
    with ui_server.client("admin") as admin:
        unknown = admin.post(
            "/checkpoints/api/task/reprocess/preview", json=body(run_id, selection={"keys": ["nope"]}), headers=HEADERS
        )
        assert unknown.status_code == 422 and "not done" in unknown.json()["detail"]
        no_commit = admin.post(
            "/checkpoints/api/task/reprocess/preview", json=body(run_id, action="rewind", to_commit=9), headers=HEADERS
        )
        assert no_commit.status_code == 422 and "no finished commit 9" in no_commit.json()["detail"]
        rewind = admin.post(
            "/checkpoints/api/task/reprocess/preview", json=body(run_id, action="rewind", to_commit=0), headers=HEADERS
        ).json()["preview"]
        assert rewind["file_count"] == 3 and rewind["keys"] == 150
        ui_server.set_task_state(run_id, SPARK_TASK, "running")
        refused = admin.post(
            "/checkpoints/api/task/reprocess",
            json=body(run_id, action="rewind", to_commit=0, expected=rewind["fingerprint"]),
            headers=HEADERS,
        )
        assert refused.status_code == 409 and refused.json()["error"] == "task_active"
        assert len(outputs(out)) == 3
        ui_server.set_task_state(run_id, SPARK_TASK, "failed")
        done = admin.post(
            "/checkpoints/api/task/reprocess",
            json=body(run_id, action="rewind", to_commit=0, expected=rewind["fingerprint"]),
            headers=HEADERS,
        )
        assert done.status_code == 200 and outputs(out) == set()
    assert [e["event"] for e in ui_server.audit_entries(run_id)] == ["checkpoints.rewind.failed", "checkpoints.rewind"]
