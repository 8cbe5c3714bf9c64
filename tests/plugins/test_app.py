"""The Checkpoints plugin's endpoints on a real ``airflow api-server`` with the simple auth manager.

Every request goes over HTTP to the server subprocess; stores are real local stores
at the default location the operator would use; audit entries are read back from
the server's SQLite metadata DB.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from airflow_ckpt_provider.store import open_store
from airflow_ckpt_provider.store.blobs.local import file_uri
from tests.cli.sample_store import FILE_BYTES, fill_store
from tests.support.api_server import (
    DAG_ID,
    HANGING_DAG,
    MAPPED_COMMIT,
    MAPPED_DAG,
    MAPPED_TASK,
    OTHER_TASK,
    SPARK_TASK,
    TASKFLOW_COMMIT,
    TASKFLOW_DAG,
    TASKFLOW_TASK,
    UNREACHABLE_SECRET,
    ApiServer,
)

pytestmark = pytest.mark.airflow

ACTION_HEADERS = {"X-Requested-With": "airflow-ckpt-test"}


def new_run(server: ApiServer, *, fill: bool = True) -> tuple[str, Path]:
    run_id = f"ui_{uuid.uuid4().hex[:12]}"
    server.trigger_run(run_id)
    root = server.default_store_path(run_id)
    if fill:
        fill_store(root.as_uri(), (server.home / "out" / run_id).as_uri())
    return run_id, root


def ti_params(run_id: str, task_id: str = SPARK_TASK) -> dict[str, str]:
    return {"dag_id": DAG_ID, "run_id": run_id, "task_id": task_id}


def action_body(run_id: str, task_id: str = SPARK_TASK, **extra: Any) -> dict[str, Any]:
    return ti_params(run_id, task_id) | extra


def checkpoints_left(root: Path) -> int:
    return len(open_store(root.as_uri()).inspection.list_checkpoints())


def test_plugin_is_registered_with_both_views(ui_server: ApiServer) -> None:
    with ui_server.client("admin") as client:
        plugins = client.get("/api/v2/plugins").json()["plugins"]
    plugin = next(p for p in plugins if p["name"] == "checkpoints")
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/checkpoints"]
    views = {v["destination"]: v for v in plugin["external_views"]}
    assert views["task_instance"]["href"].startswith("checkpoints/ui/task?")
    assert "{DAG_ID}" in views["task_instance"]["href"] and "{TASK_ID}" in views["task_instance"]["href"]
    # Airflow fills {MAP_INDEX} on a mapped instance's page only: the href must not carry it.
    assert "{MAP_INDEX}" not in views["task_instance"]["href"] and "map_index" not in views["task_instance"]["href"]
    assert views["dag"]["url_route"] == "dag-checkpoints"


def test_without_login_everything_is_401_and_nothing_changes(ui_server: ApiServer) -> None:
    run_id, root = new_run(ui_server)
    with ui_server.client() as anonymous:
        assert anonymous.get("/checkpoints/api/task", params=ti_params(run_id)).status_code == 401
        assert anonymous.get("/checkpoints/api/dag", params={"dag_id": DAG_ID}).status_code == 401
        response = anonymous.post("/checkpoints/api/task/clear", json=action_body(run_id), headers=ACTION_HEADERS)
        assert response.status_code == 401
        page = anonymous.get("/checkpoints/ui/task", params=ti_params(run_id))
        assert page.status_code == 401
        assert "Log in to Airflow" in page.text and "/auth/login" in page.text
    assert checkpoints_left(root) == 3
    [refused] = ui_server.audit_entries(run_id)  # the refused clear, by nobody known
    assert (refused["event"], refused["owner"], refused["extra"]["http_status"]) == (
        "checkpoints.clear.failed",
        "anonymous",
        401,
    )


def test_viewer_reads_progress_but_clear_is_403(ui_server: ApiServer) -> None:
    run_id, root = new_run(ui_server)
    with ui_server.client("viewer") as viewer:
        response = viewer.get("/checkpoints/api/task", params=ti_params(run_id))
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["can_edit"] is False
        assert body["store_uri"] == file_uri(str(root)) and body["store_source"] == "default location"
        progress = body["report"]["progress"]
        assert (progress["keys_done"], progress["files"], progress["bytes"]) == (150, 3, 3 * FILE_BYTES)
        assert (progress["sealed_partitions"], progress["expected_partitions"]) == (3, 4)
        assert body["report"]["previews"]["clear"]["checkpoints"] == 3
        refused = viewer.post("/checkpoints/api/task/clear", json=action_body(run_id), headers=ACTION_HEADERS)
        assert refused.status_code == 403
        assert "needs edit access" in refused.json()["detail"]
        # The dialog's preview needs edit access too (it lists paths of the output roots).
        for action in ("clear", "discard"):
            asked = viewer.post(
                f"/checkpoints/api/task/{action}/preview", json=action_body(run_id), headers=ACTION_HEADERS
            )
            assert asked.status_code == 403, asked.text
        page = viewer.get("/checkpoints/ui/task", params=ti_params(run_id))
        assert page.status_code == 200 and 'data-testid="read-only"' in page.text
    assert checkpoints_left(root) == 3
    [refused] = ui_server.audit_entries(run_id)
    assert (refused["event"], refused["owner"], refused["extra"]["http_status"]) == (
        "checkpoints.clear.failed",
        "viewer",
        403,
    )


def test_admin_clear_deletes_and_is_audited(ui_server: ApiServer) -> None:
    run_id, root = new_run(ui_server)
    out_dir = ui_server.home / "out" / run_id
    assert len(list(out_dir.iterdir())) == 3
    with ui_server.client("admin") as admin:
        before = admin.get("/checkpoints/api/task", params=ti_params(run_id)).json()
        assert before["can_edit"] is True
        epoch = before["report"]["progress"]["epoch"]["number"]
        response = admin.post(
            "/checkpoints/api/task/clear",
            json=action_body(run_id, expected_epoch=epoch),
            headers=ACTION_HEADERS,
        )
        assert response.status_code == 200, response.text
        result = response.json()["result"]
        assert (result["deleted_checkpoints"], result["deleted_files"]) == (3, 3)
        after = admin.get("/checkpoints/api/task", params=ti_params(run_id)).json()
    assert after["report"]["progress"]["keys_done"] == 0
    assert checkpoints_left(root) == 0
    assert list(out_dir.iterdir()) == []  # uncommitted output went with its checkpoints
    [entry] = ui_server.audit_entries(run_id)
    assert entry["event"] == "checkpoints.clear"
    assert (entry["owner"], entry["dag_id"], entry["task_id"], entry["run_id"]) == (
        "admin",
        DAG_ID,
        SPARK_TASK,
        run_id,
    )
    assert entry["extra"]["deleted_checkpoints"] == 3 and entry["extra"]["deleted_files"] == 3
    assert entry["extra"]["keys_forgotten"] == 150 and entry["extra"]["bytes_freed"] == 3 * FILE_BYTES
    assert entry["extra"]["store_uri"] == file_uri(str(root))
    # Where deletions could reach, and what the deletion guard kept (nothing here).
    assert entry["extra"]["output_roots"] == [out_dir.as_uri()]
    assert entry["extra"]["refused_records"] == [] and entry["extra"]["undeclared_output_files"] == 0
    assert response.json()["audit_log_id"] > 0


def test_user_role_can_discard_uncommitted(ui_server: ApiServer) -> None:
    run_id, root = new_run(ui_server)
    with ui_server.client("editor") as editor:
        response = editor.post("/checkpoints/api/task/discard", json=action_body(run_id), headers=ACTION_HEADERS)
    assert response.status_code == 200, response.text
    assert checkpoints_left(root) == 0
    [entry] = ui_server.audit_entries(run_id)
    assert (entry["event"], entry["owner"]) == ("checkpoints.discard_uncommitted", "editor")


@pytest.mark.parametrize(
    ("headers", "content", "status"),
    [
        ({}, None, 403),  # no custom header
        ({"Content-Type": "text/plain"}, "dag_id=x", 415),  # what a plain HTML form can send
        ({"Origin": "http://evil.example"}, None, 403),
        ({"Origin": "null"}, None, 403),
        ({"Sec-Fetch-Site": "cross-site"}, None, 403),
    ],
)
def test_cross_site_requests_are_refused(
    ui_server: ApiServer, headers: dict[str, str], content: str | None, status: int
) -> None:
    run_id, root = new_run(ui_server)
    # Authenticated the way a browser is: by the UI's session cookie.
    cookies = {"_token": ui_server.token("admin")}
    with httpx.Client(base_url=ui_server.base_url, cookies=cookies, timeout=60) as browser:
        sent_headers = headers | ({} if not headers or "Content-Type" in headers else ACTION_HEADERS)
        if headers == {}:
            response = browser.post("/checkpoints/api/task/clear", json=action_body(run_id))
        elif content is not None:
            response = browser.post("/checkpoints/api/task/clear", content=content, headers=sent_headers)
        else:
            response = browser.post("/checkpoints/api/task/clear", json=action_body(run_id), headers=sent_headers)
        assert response.status_code == status, response.text
        # The same cookie with the page's own headers works: the refusals above are the guard's.
        assert browser.get("/checkpoints/api/task", params=ti_params(run_id)).status_code == 200
    assert checkpoints_left(root) == 3
    entries = ui_server.audit_entries(run_id)
    assert [e["extra"]["http_status"] for e in entries] == ([status] if content is None else [])
    assert all(e["event"] == "checkpoints.clear.failed" and e["owner"] == "admin" for e in entries)


def test_same_origin_cookie_request_is_accepted(ui_server: ApiServer) -> None:
    run_id, root = new_run(ui_server)
    cookies = {"_token": ui_server.token("admin")}
    headers = ACTION_HEADERS | {"Origin": ui_server.base_url, "Sec-Fetch-Site": "same-origin"}
    with httpx.Client(base_url=ui_server.base_url, cookies=cookies, timeout=60) as browser:
        response = browser.post("/checkpoints/api/task/clear", json=action_body(run_id), headers=headers)
    assert response.status_code == 200, response.text
    assert checkpoints_left(root) == 0


def test_stale_confirmation_is_refused_and_audited(ui_server: ApiServer) -> None:
    run_id, root = new_run(ui_server)
    with ui_server.client("admin") as admin:
        response = admin.post(
            "/checkpoints/api/task/clear", json=action_body(run_id, expected_epoch=7), headers=ACTION_HEADERS
        )
    assert response.status_code == 409
    assert "changed since the page was loaded" in response.json()["detail"]
    assert checkpoints_left(root) == 3
    [entry] = ui_server.audit_entries(run_id)
    assert entry["event"] == "checkpoints.clear.failed" and "refused" in entry["extra"]


def test_running_task_is_not_cleared(ui_server: ApiServer) -> None:
    run_id, root = new_run(ui_server)
    ui_server.set_task_state(run_id, SPARK_TASK, "running")
    with ui_server.client("admin") as admin:
        response = admin.post("/checkpoints/api/task/clear", json=action_body(run_id), headers=ACTION_HEADERS)
    assert response.status_code == 409
    assert "is running" in response.json()["detail"]
    assert checkpoints_left(root) == 3


def test_unknown_task_instance_is_404(ui_server: ApiServer) -> None:
    run_id, _ = new_run(ui_server, fill=False)
    with ui_server.client("admin") as admin:
        assert admin.get("/checkpoints/api/task", params=ti_params(run_id, "nope")).status_code == 404
        response = admin.post("/checkpoints/api/task/clear", json=action_body("no_such_run"), headers=ACTION_HEADERS)
        assert response.status_code == 404


def test_corrupt_store_is_a_message_not_a_trace_and_nothing_is_deleted(ui_server: ApiServer) -> None:
    run_id, root = new_run(ui_server)
    victim = sorted((root / "checkpoints").iterdir())[0]
    (victim / "manifest.json").write_text('{"checkpoint_id": ')
    with ui_server.client("admin") as admin:
        response = admin.get("/checkpoints/api/task", params=ti_params(run_id))
        assert response.status_code == 422
        body = response.json()
        assert body["error"] == "store_corrupt" and "cannot be read" in body["detail"]
        assert "Traceback" not in response.text
        page = admin.get("/checkpoints/ui/task", params=ti_params(run_id))
        assert 'data-testid="store-error"' in page.text and "Traceback" not in page.text
        refused = admin.post("/checkpoints/api/task/clear", json=action_body(run_id), headers=ACTION_HEADERS)
    assert refused.status_code == 422
    assert len(list((root / "checkpoints").iterdir())) == 3
    assert len(list((ui_server.home / "out" / run_id).iterdir())) == 3
    [entry] = ui_server.audit_entries(run_id)
    assert entry["event"] == "checkpoints.clear.failed" and entry["extra"]["error"] == "store_corrupt"


def test_a_commit_task_shows_its_spark_tasks_store(ui_server: ApiServer) -> None:
    run_id, spark_root = new_run(ui_server)
    with ui_server.client("admin") as admin:
        body = admin.get("/checkpoints/api/task", params=ti_params(run_id, OTHER_TASK)).json()
        assert body["store_uri"] == file_uri(str(spark_root))
        assert body["spark_task_id"] == SPARK_TASK
        assert body["report"]["progress"]["keys_done"] == 150
        dag = admin.get("/checkpoints/api/dag", params={"dag_id": DAG_ID, "limit": 50}).json()
    rows = [s for s in dag["stores"] if s["run_id"] == run_id]
    assert len(rows) == 1, rows  # one store, two tasks
    assert sorted(rows[0]["task_ids"]) == [OTHER_TASK, SPARK_TASK]
    assert rows[0]["task_id"] == SPARK_TASK  # labelled by the task that names it


def test_a_taskflow_tasks_store_is_shown_and_cleared_as_a_submit_tasks(ui_server: ApiServer) -> None:
    """``@task.checkpointed_pyspark``: its task page shows its default store, its commit task finds that store
    through ``spark_task_id``, the DAG page lists it, and the admin's clear deletes its checkpoints and their
    uncommitted output, audited, as for a submit task."""
    run_id = f"ui_{uuid.uuid4().hex[:12]}"
    ui_server.trigger_run(run_id, TASKFLOW_DAG)
    root = ui_server.default_store_path(run_id, TASKFLOW_TASK, TASKFLOW_DAG)
    out_dir = ui_server.home / "out" / run_id
    fill_store(root.as_uri(), out_dir.as_uri(), owner=f"{TASKFLOW_DAG}/{TASKFLOW_TASK}/{run_id}")

    def params(task_id: str) -> dict[str, str]:
        return {"dag_id": TASKFLOW_DAG, "run_id": run_id, "task_id": task_id}

    with ui_server.client("admin") as admin:
        body = admin.get("/checkpoints/api/task", params=params(TASKFLOW_TASK)).json()
        assert body["store_uri"] == file_uri(str(root)) and body["can_edit"] is True, body
        assert body["report"]["progress"]["keys_done"] == 150
        commit = admin.get("/checkpoints/api/task", params=params(TASKFLOW_COMMIT)).json()
        assert (commit["store_uri"], commit["spark_task_id"]) == (file_uri(str(root)), TASKFLOW_TASK)
        dag = admin.get("/checkpoints/api/dag", params={"dag_id": TASKFLOW_DAG}).json()
        [row] = [s for s in dag["stores"] if s["run_id"] == run_id]
        assert sorted(row["task_ids"]) == [TASKFLOW_COMMIT, TASKFLOW_TASK] and row["task_id"] == TASKFLOW_TASK
        epoch = body["report"]["progress"]["epoch"]["number"]
        clear = {**params(TASKFLOW_TASK), "expected_epoch": epoch}
        response = admin.post("/checkpoints/api/task/clear", json=clear, headers=ACTION_HEADERS)
        assert response.status_code == 200, response.text
        assert (response.json()["result"]["deleted_checkpoints"], response.json()["result"]["deleted_files"]) == (3, 3)
    assert checkpoints_left(root) == 0 and list(out_dir.iterdir()) == []
    [entry] = ui_server.audit_entries(run_id)
    assert (entry["event"], entry["dag_id"], entry["task_id"]) == ("checkpoints.clear", TASKFLOW_DAG, TASKFLOW_TASK)
    assert entry["extra"]["store_uri"] == file_uri(str(root))


def test_dag_view_lists_latest_runs_stores(ui_server: ApiServer) -> None:
    run_id, root = new_run(ui_server)
    with ui_server.client("viewer") as viewer:
        response = viewer.get("/checkpoints/api/dag", params={"dag_id": DAG_ID})
        assert response.status_code == 200, response.text
        page = viewer.get("/checkpoints/ui/dag", params={"dag_id": DAG_ID})
    stores = response.json()["stores"]
    mine = next(s for s in stores if s["run_id"] == run_id)
    assert mine["store_uri"] == file_uri(str(root))
    assert mine["summary"]["keys_done"] == 150 and mine["summary"]["sealed_partitions"] == 3
    assert mine["view_path"] == f"dags/{DAG_ID}/runs/{run_id}/tasks/{SPARK_TASK}/plugin/checkpoints"
    assert page.status_code == 200 and run_id in page.text


def test_pages_never_show_credentials(ui_server: ApiServer) -> None:
    run_id = f"ui_{uuid.uuid4().hex[:12]}"
    ui_server.trigger_run(run_id, HANGING_DAG)
    where = {"dag_id": HANGING_DAG, "run_id": run_id, "task_id": "credentials_in_uri"}
    with ui_server.client("admin") as admin:
        response = admin.get("/checkpoints/api/task", params=where)
        page = admin.get("/checkpoints/ui/task", params=where)
    for text in (response.text, page.text):
        assert "hunter2secret" not in text and "X-Amz-Signature" not in text
    assert response.status_code == 422, response.text


def test_unreachable_store_is_503_with_a_message_and_nothing_is_deleted(ui_server: ApiServer) -> None:
    run_id = f"ui_{uuid.uuid4().hex[:12]}"
    ui_server.trigger_run(run_id, HANGING_DAG)
    where = {"dag_id": HANGING_DAG, "run_id": run_id, "task_id": "unreachable"}
    uri = "s3://ckpt-bucket/stores/unreachable"
    with ui_server.client("admin") as admin:
        started = time.monotonic()
        response = admin.get("/checkpoints/api/task", params=where)
        seconds = time.monotonic() - started
        page = admin.get("/checkpoints/ui/task", params=where)
        refused = admin.post("/checkpoints/api/task/clear", json=where, headers=ACTION_HEADERS)
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["error"] == "store_unavailable" and body["store_uri"] == uri
    assert "cannot be reached" in body["detail"] and "Nothing was changed" in body["detail"]
    assert seconds < 15
    assert 'data-testid="store-error"' in page.text and "cannot be reached" in page.text
    assert refused.status_code == 503
    for text in (response.text, page.text, refused.text):
        assert UNREACHABLE_SECRET not in text and "Traceback" not in text
    [entry] = ui_server.audit_entries(run_id)
    assert entry["event"] == "checkpoints.clear.failed" and entry["extra"]["error"] == "store_unavailable"
    assert UNREACHABLE_SECRET not in json.dumps(entry)


def test_missing_connection_is_503_with_its_name(ui_server: ApiServer) -> None:
    run_id = f"ui_{uuid.uuid4().hex[:12]}"
    ui_server.trigger_run(run_id, HANGING_DAG)
    with ui_server.client("viewer") as viewer:
        response = viewer.get(
            "/checkpoints/api/task",
            params={"dag_id": HANGING_DAG, "run_id": run_id, "task_id": "missing_connection"},
        )
    assert response.status_code == 503, response.text
    assert "no_such_connection" in response.json()["detail"]


def mapped_params(run_id: str, task_id: str) -> dict[str, str]:
    return {"dag_id": MAPPED_DAG, "run_id": run_id, "task_id": task_id}


def test_each_map_index_has_its_own_view_row_and_clear(ui_server: ApiServer) -> None:
    """A mapped submit: the task view shows the store of the selected map index (the UI fills
    ``{MAP_INDEX}``; unfilled, the lowest), a mapped commit shows its own map index's store,
    the DAG view lists each map index, and a clear of one map index leaves the other's store."""
    run_id = f"ui_{uuid.uuid4().hex[:12]}"
    ui_server.trigger_run(run_id, MAPPED_DAG)
    base = ui_server.default_store_path(run_id, MAPPED_TASK, MAPPED_DAG)
    for map_index, partitions in ((0, 3), (1, 1)):
        fill_store(
            (base / f"map_index={map_index}").as_uri(),
            (ui_server.home / "out" / run_id / str(map_index)).as_uri(),
            partitions=partitions,
            owner=f"{MAPPED_DAG}/{MAPPED_TASK}/{run_id}/map_index={map_index}",
        )
    with ui_server.client("admin") as admin:
        one = admin.get("/checkpoints/api/task", params=mapped_params(run_id, MAPPED_TASK) | {"map_index": "1"}).json()
        unfilled = admin.get(
            "/checkpoints/api/task", params=mapped_params(run_id, MAPPED_TASK) | {"map_index": "{MAP_INDEX}"}
        ).json()
        commit = admin.get("/checkpoints/api/task", params=mapped_params(run_id, MAPPED_COMMIT) | {"map_index": "1"})
        missing = admin.get("/checkpoints/api/task", params=mapped_params(run_id, MAPPED_TASK) | {"map_index": "7"})
        page = admin.get("/checkpoints/ui/task", params=mapped_params(run_id, MAPPED_TASK) | {"map_index": "1"})
        # The tab's href has no map index: the page takes it from the UI page that framed it.
        instance_page = f"dags/{MAPPED_DAG}/runs/{quote(run_id)}/tasks/{MAPPED_TASK}/mapped/1/plugin/checkpoints"
        framed_by = f"{ui_server.base_url}/{instance_page}"
        framed = admin.get(
            "/checkpoints/ui/task", params=mapped_params(run_id, MAPPED_TASK), headers={"Referer": framed_by}
        )
        other_task = admin.get(
            "/checkpoints/ui/task",
            params=mapped_params(run_id, MAPPED_TASK),
            headers={"Referer": framed_by.replace(f"/tasks/{MAPPED_TASK}/", "/tasks/other/")},
        )
        dag = admin.get("/checkpoints/api/dag", params={"dag_id": MAPPED_DAG, "limit": 50}).json()
        cleared = admin.post(
            "/checkpoints/api/task/clear",
            json=mapped_params(run_id, MAPPED_TASK) | {"map_index": 1},
            headers=ACTION_HEADERS,
        )
    assert (one["map_index"], one["map_indexes"]) == (1, [0, 1])
    assert one["store_uri"] == file_uri(str(base / "map_index=1"))
    assert one["report"]["progress"]["keys_done"] == 50
    assert unfilled["map_index"] == 0 and unfilled["report"]["progress"]["keys_done"] == 150
    assert commit.status_code == 200, commit.text
    assert commit.json()["store_uri"] == file_uri(str(base / "map_index=1"))
    assert commit.json()["spark_task_id"] == MAPPED_TASK
    assert missing.status_code == 404 and "map indexes 0..1" in missing.json()["detail"]
    assert page.status_code == 200 and 'data-testid="map-index">[1]' in page.text
    assert "map_index=0" in page.text  # a link to the other instance
    assert framed.status_code == 200 and 'data-testid="map-index">[1]' in framed.text
    assert other_task.status_code == 200 and 'data-testid="map-index">[0]' in other_task.text  # not this task's page
    rows = sorted((s for s in dag["stores"] if s["run_id"] == run_id and s["task_id"] == MAPPED_TASK), key=str)
    by_index = {s["map_index"]: s for s in rows}
    assert sorted(by_index) == [0, 1], rows
    assert by_index[0]["summary"]["keys_done"] == 150 and by_index[1]["summary"]["keys_done"] == 50
    assert sorted(by_index[1]["task_ids"]) == [MAPPED_COMMIT, MAPPED_TASK]
    view_path = f"dags/{MAPPED_DAG}/runs/{run_id}/tasks/{MAPPED_TASK}/mapped/1/plugin/checkpoints"
    assert by_index[1]["view_path"] == view_path
    assert cleared.status_code == 200, cleared.text
    assert cleared.json()["map_index"] == 1 and cleared.json()["result"]["deleted_checkpoints"] == 1
    assert checkpoints_left(base / "map_index=1") == 0 and checkpoints_left(base / "map_index=0") == 3
    [entry] = [e for e in ui_server.audit_entries(run_id) if e["event"] == "checkpoints.clear"]
    assert entry["task_id"] == MAPPED_TASK and entry["extra"]["store_uri"] == file_uri(str(base / "map_index=1"))
    assert ui_server.query("SELECT map_index FROM log WHERE event = 'checkpoints.clear' AND run_id = ?", run_id) == [
        (1,)
    ]
