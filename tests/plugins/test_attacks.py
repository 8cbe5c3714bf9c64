"""The Checkpoints view attacked, on a real ``airflow api-server`` with per-DAG rights.

alice may edit team A's DAG and nothing else (tests/support/per_dag_auth_manager.py). The
attacks: an XCom entry naming another DAG's store, a DAG whose task names another DAG's
store, 16 viewers against an S3 endpoint that never answers, store paths that need escaping,
requests a browser on another site could forge, framing, forwarded headers, huge ids,
credentials in endpoint URLs. Stores are real local stores (or a real hanging TCP endpoint);
audit entries are read from the server's metadata DB.
"""

from __future__ import annotations

import html
import json
import os
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
import pytest

from airflow_ckpt_provider.store import EpochStatus, FileMetadata, RetentionPolicy, new_checkpoint_id, open_store
from airflow_ckpt_provider.store.blobs.local import file_uri
from tests.cli.sample_store import fill_store
from tests.support.api_server import (
    HANGING_CONN_ID,
    HANGING_DAG,
    LEAKY_ENDPOINT_PASSWORD,
    ODD_DAG,
    ODD_TASK,
    POINTS_AT_B_TASK,
    SERVER_DEFAULT_ACCESS_KEY,
    SIBLING_TASK,
    TEAM_A,
    TEAM_B,
    ApiServer,
)

pytestmark = pytest.mark.airflow

ACTION_HEADERS = {"X-Requested-With": "airflow-ckpt-test"}
SPARK_TASK = "spark_job"


def new_run(server: ApiServer, dag_id: str) -> str:
    run_id = f"atk_{uuid.uuid4().hex[:12]}"
    server.trigger_run(run_id, dag_id)
    return run_id


def params(dag_id: str, run_id: str, task_id: str = SPARK_TASK) -> dict[str, str]:
    return {"dag_id": dag_id, "run_id": run_id, "task_id": task_id}


def checkpoints_in(root: Path) -> int:
    return len(open_store(root.as_uri()).inspection.list_checkpoints())


@pytest.fixture
def team_b_store(ui_server: ApiServer) -> Iterator[tuple[str, Path]]:
    """Team B's shared store, filled by team B's task (its epoch names team B as owner)."""
    run_b = new_run(ui_server, TEAM_B)
    root = ui_server.team_b_store
    out = ui_server.home / "team_b" / f"out-{run_b}"
    fill_store(root.as_uri(), out.as_uri(), owner=f"{TEAM_B}/{SPARK_TASK}/{run_b}")
    yield run_b, out
    open_store(root.as_uri()).housekeeping.clear()


def test_an_xcom_entry_cannot_point_the_view_at_another_dags_store(
    ui_server: ApiServer, team_b_store: tuple[str, Path]
) -> None:
    _, team_b_out = team_b_store
    run_a = new_run(ui_server, TEAM_A)
    hijack = {"checkpoint_uri": ui_server.team_b_store.as_uri(), "epoch": 1}
    # alice may write XCom entries on her own DAG's task instances: that is all she does.
    for key in ("return_value", "checkpoint_plan"):
        ui_server.push_xcom(run_a, SPARK_TASK, key, hijack, dag_id=TEAM_A, user="alice")
    own_store = ui_server.default_store_path(run_a, dag_id=TEAM_A)
    with ui_server.client("alice") as alice:
        assert alice.get("/checkpoints/api/task", params=params(TEAM_B, team_b_store[0])).status_code == 403
        view = alice.get("/checkpoints/api/task", params=params(TEAM_A, run_a))
        assert view.status_code == 200, view.text
        assert view.json()["store_uri"] == file_uri(str(own_store))  # the task's configured store, not the XCom's
        assert view.json()["store_source"] != "used by the task"
        cleared = alice.post("/checkpoints/api/task/clear", json=params(TEAM_A, run_a), headers=ACTION_HEADERS)
        assert cleared.status_code == 200, cleared.text
    assert checkpoints_in(ui_server.team_b_store) == 3
    assert len(list(team_b_out.iterdir())) == 3
    assert not own_store.exists()  # clearing a store that holds nothing creates nothing


def test_a_task_naming_another_dags_store_is_409_nothing_deleted_audited(
    ui_server: ApiServer, team_b_store: tuple[str, Path]
) -> None:
    _, team_b_out = team_b_store
    run_a = new_run(ui_server, TEAM_A)
    where = params(TEAM_A, run_a, POINTS_AT_B_TASK)
    with ui_server.client("alice") as alice:
        view = alice.get("/checkpoints/api/task", params=where)
        page = alice.get("/checkpoints/ui/task", params=where)
        cleared = alice.post("/checkpoints/api/task/clear", json=where, headers=ACTION_HEADERS)
        discarded = alice.post("/checkpoints/api/task/discard", json=where, headers=ACTION_HEADERS)
    for response in (view, cleared, discarded):
        assert response.status_code == 409, response.text
        body = response.json()
        assert body["error"] == "store_owner_mismatch"
        assert TEAM_B in body["detail"] and "report" not in body
    assert page.status_code == 409 and TEAM_B in page.text and "keys done" not in page.text.lower()
    assert checkpoints_in(ui_server.team_b_store) == 3
    assert len(list(team_b_out.iterdir())) == 3
    entries = ui_server.audit_entries(run_a)
    events = [e["event"] for e in entries if e["dag_id"] == TEAM_A and e["owner"] == "alice"]
    assert "checkpoints.clear.failed" in events and "checkpoints.discard_uncommitted.failed" in events
    assert all("store_owner_mismatch" in json.dumps(e["extra"]) for e in entries)
    # Team B's own audit trail shows that somebody tried to clear its store from another DAG.
    on_b = [e for e in ui_server.audit_entries_of_dag(TEAM_B) if e["run_id"] == run_a]
    assert on_b and all(e["owner"] == "alice" and e["event"].endswith(".failed") for e in on_b)
    # A user authorized on both DAGs sees the store, labelled with its owner.
    with ui_server.client("admin") as admin:
        shown = admin.get("/checkpoints/api/task", params=where)
    assert shown.status_code == 200, shown.text
    assert TEAM_B in json.dumps(shown.json()["report"]["epochs"])


def test_a_poisoned_intent_record_deletes_nothing_on_the_servers_host(ui_server: ApiServer) -> None:
    """A record naming a file on the API server's host and a 1-character name token: the dialog
    names the declared output root, Clear deletes the store's own output, the victims survive,
    and the audit entry lists the refused records."""
    run_id = new_run(ui_server, TEAM_A)
    root = ui_server.default_store_path(run_id, dag_id=TEAM_A)
    out = ui_server.home / "out-poisoned" / run_id
    fill_store(root.as_uri(), out.as_uri(), owner=f"{TEAM_A}/{SPARK_TASK}/{run_id}")
    victims = ui_server.home / "victims" / run_id
    victims.mkdir(parents=True)
    (victims / "important.txt").write_text("do not delete")
    (victims / "a.b").write_text("precious")
    store = open_store(root.as_uri())
    ids = [f"{uuid.uuid4()}", f"{uuid.uuid4()}"]
    for checkpoint_id, record in zip(
        ids,
        [
            {"paths": [(victims / "important.txt").as_uri()]},
            {"paths": [], "root": victims.as_uri(), "name_marker": "."},
        ],
        strict=True,
    ):
        store.blobs.put(
            f"attempts/{checkpoint_id}/intents/0000.json",
            json.dumps({"checkpoint_id": checkpoint_id, "epoch": 1, **record}).encode(),
        )
    where = params(TEAM_A, run_id)
    outputs_before = sorted(p.name for p in out.iterdir())
    with ui_server.client("admin") as admin:
        view = admin.get("/checkpoints/api/task", params=where)
        assert view.status_code == 200, view.text
        assert out.as_uri() in view.json()["report"]["previews"]["clear"]["description"]
        # What the dialog reads when it opens: the refused records, before anything is deleted.
        for action in ("clear", "discard"):
            asked = admin.post(f"/checkpoints/api/task/{action}/preview", json=where, headers=ACTION_HEADERS)
            assert asked.status_code == 200, asked.text
            confirmation = asked.json()
            assert confirmation["refused_record_count"] == 2
            shown = confirmation["refused_records"]
            assert all(any(i in line for line in shown) for i in ids), shown
            assert any((victims / "important.txt").as_uri() in line for line in shown), shown
            assert confirmation["preview"]["output_roots"] == [out.as_uri()]
            assert confirmation["preview"]["checkpoints"] == 3 and confirmation["preview"]["epoch"] == 1
            assert f"only under: {out.as_uri()}" in confirmation["preview"]["description"]
        # The previews changed nothing and wrote no audit entry.
        assert sorted(p.name for p in victims.iterdir()) == ["a.b", "important.txt"]
        assert sorted(p.name for p in out.iterdir()) == outputs_before and len(outputs_before) == 3
        assert checkpoints_in(root) == 3 and len(open_store(root.as_uri()).epochs.all()) == 1
        assert ui_server.audit_entries(run_id) == []
        cleared = admin.post("/checkpoints/api/task/clear", json=where, headers=ACTION_HEADERS)
    assert cleared.status_code == 200, cleared.text
    assert sorted(p.name for p in victims.iterdir()) == ["a.b", "important.txt"]
    assert list(out.iterdir()) == []  # the store's own uncommitted output went
    refused = cleared.json()["result"]["refused_records"]
    assert all(any(i in line for line in refused) for i in ids), refused
    [entry] = [e for e in ui_server.audit_entries(run_id) if e["event"] == "checkpoints.clear"]
    assert entry["extra"]["refused_records"] == refused


def _files_of(directory: Path) -> dict[str, bytes]:
    """Every file and directory under ``directory``, with its bytes (directories: b"<dir>")."""
    found: dict[str, bytes] = {}
    for where, dirs, files in os.walk(directory):
        found.update({os.path.relpath(os.path.join(where, d), directory): b"<dir>" for d in dirs})
        found.update({os.path.relpath(os.path.join(where, f), directory): Path(where, f).read_bytes() for f in files})
    return found


def test_symlinks_a_writer_plants_carry_no_action_of_the_tab_outside_the_roots(ui_server: ApiServer) -> None:
    """Symlinks as alice (an editor of team A's DAG) meets them: the DAG's writers made
    ``snapshots/00000099`` and ``<output>/day/link`` links to a directory no root holds, and sealed a
    checkpoint owning ``day/link/precious.txt``. Reprocess is refused and audited, Clear clears the
    store; the victim is unchanged byte for byte (docs/security.md, "Symbolic links")."""
    run_id = new_run(ui_server, TEAM_A)
    root = ui_server.default_store_path(run_id, dag_id=TEAM_A)
    out = ui_server.home / "out-poisoned" / run_id
    store = fill_store(root.as_uri(), out.as_uri(), owner=f"{TEAM_A}/{SPARK_TASK}/{run_id}")
    victim = ui_server.home / "victims-of-links" / run_id
    (victim / "dags").mkdir(parents=True)
    (victim / "precious.txt").write_text("another team's data")
    (victim / "dags" / "their_dag.py").write_text("# another team's DAG")
    (out / "day").mkdir()
    (out / "day" / "link").symlink_to(victim, target_is_directory=True)
    forged = file_uri(out / "day" / "link" / "precious.txt")
    epoch = store.epochs.current()
    assert epoch is not None
    checkpoint_id = new_checkpoint_id()
    store.record_intent(checkpoint_id, [forged], epoch=epoch.number)
    store.stage_keys(checkpoint_id, ["forged-1", "forged-2"])
    store.stage_files(checkpoint_id, [FileMetadata(forged, 19, 2)])
    store.checkpoint(checkpoint_id, epoch=epoch.number, partition=3)
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    store.commit([out.as_uri()])
    store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    (root / "snapshots" / "00000099").symlink_to(victim, target_is_directory=True)
    before = _files_of(victim)
    where = params(TEAM_A, run_id)
    selection = where | {"selection": {"keys": ["forged-1"]}}
    with ui_server.client("alice") as alice:
        preview = alice.post("/checkpoints/api/task/reprocess/preview", json=selection, headers=ACTION_HEADERS)
        assert preview.status_code == 200, preview.text
        plan = preview.json()["preview"]
        assert plan["refused_paths"] == [forged] and "symbolic link" in plan["description"]
        refused = alice.post(
            "/checkpoints/api/task/reprocess",
            json=selection | {"expected": plan["fingerprint"]},
            headers=ACTION_HEADERS,
        )
        assert refused.status_code == 422, refused.text
        assert "symbolic link" in refused.json()["detail"]
        cleared = alice.post("/checkpoints/api/task/clear", json=where, headers=ACTION_HEADERS)
        assert cleared.status_code == 200, cleared.text
    assert _files_of(victim) == before
    assert checkpoints_in(root) == 0 and not list(root.glob("snapshots/*/manifest.json"))
    events = [e["event"] for e in ui_server.audit_entries(run_id) if e["owner"] == "alice"]
    assert events == ["checkpoints.reprocess.failed", "checkpoints.clear"], events
    problems = "\n".join(open_store(root.as_uri()).inspection.check().problems)
    assert f"snapshots/00000099 -> {victim}" in problems


@pytest.mark.parametrize(
    ("user", "headers", "content", "status"),
    [
        (None, ACTION_HEADERS, None, 401),
        ("viewer", ACTION_HEADERS, None, 403),
        ("admin", {}, None, 403),  # no custom header
        # What a cross-site form can send: JSON-looking text without the JSON content type.
        ("admin", {"Content-Type": "text/plain"}, "as-text", 415),
        ("admin", ACTION_HEADERS | {"Origin": "http://evil.example"}, None, 403),
    ],
)
def test_refused_requests_are_audited(
    ui_server: ApiServer, user: str | None, headers: dict[str, str], content: str | None, status: int
) -> None:
    run_id = new_run(ui_server, TEAM_A)
    body = params(TEAM_A, run_id)
    with ui_server.client(user) as client:
        if content is None:
            response = client.post("/checkpoints/api/task/clear", json=body, headers=headers)
        else:
            response = client.post("/checkpoints/api/task/clear", content=json.dumps(body), headers=headers)
    assert response.status_code == status, response.text
    [entry] = ui_server.audit_entries(run_id)
    assert (entry["event"], entry["dag_id"], entry["task_id"]) == ("checkpoints.clear.failed", TEAM_A, SPARK_TASK)
    assert entry["owner"] == (user or "anonymous")
    assert entry["extra"]["http_status"] == status and entry["extra"]["refused"]


def test_pages_cannot_be_framed_by_other_sites(ui_server: ApiServer) -> None:
    run_id = new_run(ui_server, TEAM_A)
    with ui_server.client("admin") as admin:
        responses = [
            admin.get("/checkpoints/ui/task", params=params(TEAM_A, run_id)),
            admin.get("/checkpoints/ui/dag", params={"dag_id": TEAM_A}),
            admin.get("/checkpoints/api/task", params=params(TEAM_A, run_id)),
        ]
    with ui_server.client() as anonymous:
        responses.append(anonymous.get("/checkpoints/ui/task", params=params(TEAM_A, run_id)))
    for response in responses:
        assert response.headers.get("x-frame-options") == "SAMEORIGIN", response.headers
        assert "frame-ancestors 'self'" in response.headers.get("content-security-policy", ""), response.headers


def test_a_forwarded_host_header_does_not_make_another_site_same_origin(ui_server: ApiServer) -> None:
    run_id = new_run(ui_server, TEAM_A)
    root = ui_server.default_store_path(run_id, dag_id=TEAM_A)
    fill_store(root.as_uri(), (ui_server.home / "out" / run_id).as_uri(), owner=f"{TEAM_A}/{SPARK_TASK}/{run_id}")
    forged = ACTION_HEADERS | {
        "Origin": "http://evil.example",
        "X-Forwarded-Host": "evil.example",
        "X-Forwarded-Proto": "http",
    }
    with ui_server.client("admin") as admin:
        response = admin.post("/checkpoints/api/task/clear", json=params(TEAM_A, run_id), headers=forged)
    assert response.status_code == 403, response.text
    assert checkpoints_in(root) == 3


def test_a_5000_character_run_id_is_answered_not_a_500(ui_server: ApiServer) -> None:
    long_id = "r" * 5000
    with ui_server.client("admin") as admin:
        api = admin.get("/checkpoints/api/task", params=params(TEAM_A, long_id))
        page = admin.get("/checkpoints/ui/task", params=params(TEAM_A, long_id))
        action = admin.post("/checkpoints/api/task/clear", json=params(TEAM_A, long_id), headers=ACTION_HEADERS)
    for response in (api, page, action):
        assert response.status_code in (404, 422), (response.status_code, response.text[:300])
        assert "Traceback" not in response.text and "Internal Server Error" not in response.text


def test_a_store_path_needing_escapes_shows_and_clears_exactly_that_store(ui_server: ApiServer) -> None:
    run_id = new_run(ui_server, ODD_DAG)
    odd, sibling = ui_server.odd_store, ui_server.sibling_store
    fill_store(odd.as_uri(), (ui_server.home / "odd-out" / run_id).as_uri(), partitions=2)
    sibling_out = ui_server.home / "sibling-out" / run_id
    fill_store(sibling.as_uri(), sibling_out.as_uri(), partitions=3)
    try:
        with ui_server.client("admin") as admin:
            view = admin.get("/checkpoints/api/task", params=params(ODD_DAG, run_id, ODD_TASK))
            assert view.status_code == 200, view.text
            assert Path(unquote(urlsplit(view.json()["store_uri"]).path)) == odd  # names exactly that path
            assert view.json()["report"]["progress"]["keys_done"] == 100
            page = admin.get("/checkpoints/ui/task", params=params(ODD_DAG, run_id, ODD_TASK))
            assert html.escape(view.json()["store_uri"]) in page.text
            other = admin.get("/checkpoints/api/task", params=params(ODD_DAG, run_id, SIBLING_TASK)).json()
            assert Path(unquote(urlsplit(other["store_uri"]).path)) == sibling
            assert other["report"]["progress"]["keys_done"] == 150
            cleared = admin.post(
                "/checkpoints/api/task/clear", json=params(ODD_DAG, run_id, ODD_TASK), headers=ACTION_HEADERS
            )
            assert cleared.status_code == 200, cleared.text
        assert checkpoints_in(odd) == 0
        assert checkpoints_in(sibling) == 3 and len(list(sibling_out.iterdir())) == 3
    finally:
        open_store(sibling.as_uri()).housekeeping.clear()
        open_store(odd.as_uri()).housekeeping.clear()


# ---------------------------------------------------------------------- the API server stays up


def _timed_get(client: httpx.Client, path: str, **kwargs: Any) -> tuple[int, float]:
    started = time.monotonic()
    try:
        status = client.get(path, **kwargs).status_code
    except httpx.HTTPError:
        status = -1
    return status, time.monotonic() - started


def test_sixteen_viewers_of_a_hanging_store_do_not_take_the_api_down(ui_server: ApiServer) -> None:
    run_ids = [new_run(ui_server, HANGING_DAG) for _ in range(4)]
    assert ui_server.hanging is not None
    for run_id in run_ids:  # what the task reports: the same store its DAG names (XCom decides nothing)
        reported = {"checkpoint_uri": "s3://hanging-bucket/stores/shared", "aws_conn_id": HANGING_CONN_ID}
        ui_server.push_xcom(run_id, SPARK_TASK, "return_value", reported, dag_id=HANGING_DAG)
    viewer_results: list[tuple[int, float]] = []
    lock = threading.Lock()

    def view(index: int) -> None:
        run_id = run_ids[index % len(run_ids)]
        with ui_server.client("viewer") as viewer:
            viewer.timeout = httpx.Timeout(120)
            if index % 4 == 3:
                result = _timed_get(viewer, "/checkpoints/api/dag", params={"dag_id": HANGING_DAG})
            else:
                result = _timed_get(viewer, "/checkpoints/api/task", params=params(HANGING_DAG, run_id))
        with lock:
            viewer_results.append(result)

    threads = [threading.Thread(target=view, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # the viewers are now waiting on the endpoint
    airflow_results: list[tuple[str, int, float]] = []
    with ui_server.client("admin") as admin:
        admin.timeout = httpx.Timeout(60)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(t.is_alive() for t in threads):
            for path in ("/api/v2/dags", "/api/v2/monitor/health"):
                status, seconds = _timed_get(admin, path)
                airflow_results.append((path, status, seconds))
            time.sleep(0.5)
    for thread in threads:
        thread.join(timeout=180)
    slowest = max(seconds for _, _, seconds in airflow_results)
    print(
        f"\n16 viewers of a hanging store: viewer answers {sorted(round(s, 1) for _, s in viewer_results)} s; "
        f"Airflow's own API during the storm: {len(airflow_results)} calls, median "
        f"{statistics.median(s for _, _, s in airflow_results):.2f} s, slowest {slowest:.2f} s"
    )
    assert airflow_results, "the viewers finished before Airflow's API could be measured"
    for path, status, seconds in airflow_results:
        assert status == 200 and seconds < 5, (path, status, seconds)
    assert len(viewer_results) == 16
    for status, seconds in viewer_results:
        assert status in (200, 503), status
        assert seconds < 15, seconds  # a 5 s deadline per page, plus queueing for a slot
    assert SERVER_DEFAULT_ACCESS_KEY.encode() not in ui_server.hanging.received()


def test_a_missing_connection_is_an_error_never_the_servers_own_identity(ui_server: ApiServer) -> None:
    run_id = new_run(ui_server, HANGING_DAG)
    assert ui_server.hanging is not None
    with ui_server.client("viewer") as viewer:
        response = viewer.get("/checkpoints/api/task", params=params(HANGING_DAG, run_id, "missing_connection"))
    assert response.status_code == 503, response.text
    assert "no_such_connection" in response.json()["detail"]
    assert response.json()["store_uri"] == "s3://hanging-bucket/stores/missing"
    assert SERVER_DEFAULT_ACCESS_KEY.encode() not in ui_server.hanging.received()


def test_a_password_in_an_endpoint_url_never_reaches_the_page_or_the_log(ui_server: ApiServer) -> None:
    run_id = new_run(ui_server, HANGING_DAG)
    with ui_server.client("admin") as admin:
        response = admin.get("/checkpoints/api/task", params=params(HANGING_DAG, run_id, "leaky_endpoint"))
        page = admin.get("/checkpoints/ui/task", params=params(HANGING_DAG, run_id, "leaky_endpoint"))
    assert response.status_code == 503, response.text
    time.sleep(0.5)  # let the server flush its log
    for text in (response.text, page.text, ui_server.log_path.read_text(errors="replace")):
        assert LEAKY_ENDPOINT_PASSWORD not in text
