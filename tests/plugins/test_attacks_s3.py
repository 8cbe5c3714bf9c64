"""The attack on a store's own records, on a real ``airflow api-server`` and the suite's SeaweedFS: alice (editor
of team A's DAG) writes her task's S3 store prefix as every Spark executor of her job can, and
forges records declaring ``file:///`` on the API server's host and a root in another bucket.

The DAG declares ``s3://<bucket>/out/a`` as the task's output root (tests/support/api_server.py).
Reprocess, undo (overwrite and create), clear and discard run from the tab: nothing on the host or
in the other bucket changes, and the dialog names the refused records (docs/security.md, "The
trust model").
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflow_ckpt_provider.store import (
    CheckpointStore,
    Epoch,
    EpochStatus,
    FileMetadata,
    new_checkpoint_id,
    open_blobs,
    open_store,
)
from airflow_ckpt_provider.store.reprocess.planner import quarantine_key
from airflow_ckpt_provider.store.reprocess.records import record_key
from ckpt_testkit.seaweed import SeaweedServer
from tests.cli.sample_store import fill_store
from tests.support.api_server import DAG_ID, HANGING_DAG, S3_TASK, SPARK_TASK, TEAM_A, ApiServer

pytestmark = [pytest.mark.airflow, pytest.mark.s3]

HEADERS = {"X-Requested-With": "airflow-ckpt-test"}


@dataclass
class Scene:
    server: ApiServer
    run_id: str
    options: dict[str, Any]
    host_file: Path
    other_uri: str

    @property
    def store_uri(self) -> str:
        return f"s3://{self.server.s3_bucket}/stores/a_evil"

    @property
    def own_output(self) -> str:
        return f"s3://{self.server.s3_bucket}/out/a"

    def store(self) -> CheckpointStore:
        return open_store(self.store_uri, **self.options)

    def where(self, **extra: Any) -> dict[str, Any]:
        return {"dag_id": TEAM_A, "task_id": S3_TASK, "run_id": self.run_id} | extra

    def untouched(self) -> None:
        assert self.host_file.read_text() == "db_password = s3cr3t", "the host file must not change"
        root, _, name = self.other_uri.rpartition("/")
        assert open_blobs(root, **self.options).get(name)[0] == b"the other team's data"
        assert not [
            i.key for i in self.store().blobs.list("quarantine/") if "airflow-secrets" in i.key or "loot" in i.key
        ], "nothing of the host or the other bucket may be copied into the store"


@pytest.fixture
def scene(ui_server: ApiServer, s3_server: SeaweedServer, tmp_path: Path) -> Scene:
    """Team A's S3 store, emptied, then forged: epoch 1 declares the host directory and another
    bucket, and its one checkpoint's files are the host's secrets file and the other bucket's object."""
    options = s3_server.options()
    run_id = f"s3atk_{uuid.uuid4().hex[:12]}"
    ui_server.trigger_run(run_id, TEAM_A)
    host_dir = tmp_path / "host_dir"
    host_dir.mkdir()
    host_file = host_dir / "airflow-secrets.cfg"
    host_file.write_text("db_password = s3cr3t")
    other_bucket = s3_server.create_bucket(f"o-{uuid.uuid4().hex[:20]}")
    other_uri = f"s3://{other_bucket}/loot/data.parquet"
    open_blobs(f"s3://{other_bucket}/loot", **options).put("data.parquet", b"the other team's data")
    scene = Scene(ui_server, run_id, options, host_file, other_uri)
    store = scene.store()
    store.blobs.delete_many([i.key for i in store.blobs.list("")])
    epoch = Epoch(
        number=1,
        owner=f"{TEAM_A}/{S3_TASK}/{run_id}",
        created_at="2026-01-01T00:00:00Z",
        base=(),
        base_snapshot=None,
        expected_partitions=1,
        metadata={},
        output_roots=(host_dir.as_uri(), f"s3://{other_bucket}/loot"),
    )
    store.blobs.put("epochs/00000001.json", json.dumps(epoch.to_json()).encode())
    checkpoint_id = new_checkpoint_id()
    store.record_intent(checkpoint_id, [host_file.as_uri(), other_uri], epoch=1)
    store.stage_keys(checkpoint_id, ["k1"])
    store.stage_files(
        checkpoint_id,
        [
            FileMetadata(path=host_file.as_uri(), size_bytes=20, num_rows=1),
            FileMetadata(path=other_uri, size_bytes=21, num_rows=1),
        ],
    )
    store.checkpoint(checkpoint_id, epoch=1, partition=0)
    store.epochs.end(1, status=EpochStatus.SUCCEEDED)
    return scene


def test_reprocess_clear_and_discard_from_the_tab_touch_nothing_the_dag_does_not_declare(scene: Scene) -> None:
    with scene.server.client("alice") as alice:
        preview = alice.post(
            "/checkpoints/api/task/reprocess/preview",
            json=scene.where(selection={"epochs": [1]}),
            headers=HEADERS,
        )
        if preview.status_code == 200:
            plan = preview.json()["preview"]
            acted = alice.post(
                "/checkpoints/api/task/reprocess",
                json=scene.where(selection={"epochs": [1]}, expected=plan["fingerprint"]),
                headers=HEADERS,
            )
            assert acted.status_code != 200 or not acted.json()["result"].get("moved"), acted.text
        scene.untouched()
        for action in ("discard", "clear"):
            asked = alice.post(f"/checkpoints/api/task/{action}/preview", json=scene.where(), headers=HEADERS)
            assert asked.status_code == 200, asked.text
            confirmation = asked.json()
            shown = json.dumps(confirmation)
            assert scene.host_file.as_uri() not in json.dumps(confirmation["preview"]["output_roots"])
            assert "refused output root record" in shown, shown
            done = alice.post(f"/checkpoints/api/task/{action}", json=scene.where(), headers=HEADERS)
            assert done.status_code == 200, done.text
            scene.untouched()


def _reprocessed_own_output(scene: Scene) -> tuple[int, str]:
    """A legitimate committed file under the DAG's root, reprocessed from the tab (into quarantine)."""
    store = scene.store()
    store.blobs.delete_many([i.key for i in store.blobs.list("")])
    epoch = store.epochs.begin(owner=f"{TEAM_A}/{S3_TASK}/{scene.run_id}", output_roots=[scene.own_output]).number
    checkpoint_id = new_checkpoint_id()
    name = f"part-{uuid.uuid4().hex[:8]}.parquet"
    path = f"{scene.own_output}/{name}"
    store.record_intent(checkpoint_id, [path], epoch=epoch)
    open_blobs(scene.own_output, **scene.options).put(name, b"original rows")
    store.stage_keys(checkpoint_id, ["k"])
    store.stage_files(checkpoint_id, [FileMetadata(path=path, size_bytes=13, num_rows=1)])
    store.checkpoint(checkpoint_id, epoch=epoch, partition=0)
    store.epochs.end(epoch, status=EpochStatus.SUCCEEDED)
    store.commit()
    with scene.server.client("alice") as alice:
        preview = alice.post(
            "/checkpoints/api/task/reprocess/preview", json=scene.where(selection={"epochs": [epoch]}), headers=HEADERS
        )
        assert preview.status_code == 200, preview.text
        done = alice.post(
            "/checkpoints/api/task/reprocess",
            json=scene.where(selection={"epochs": [epoch]}, expected=preview.json()["preview"]["fingerprint"]),
            headers=HEADERS,
        )
        assert done.status_code == 200, done.text
        assert done.json()["result"]["moved"] == 1
    return done.json()["result"]["epoch"], name


def _undo(scene: Scene, number: int) -> Any:
    with scene.server.client("alice") as alice:
        preview = alice.post(
            "/checkpoints/api/task/reprocess/preview", json=scene.where(action="undo", epoch=number), headers=HEADERS
        )
        if preview.status_code != 200:
            return preview
        return alice.post(
            "/checkpoints/api/task/reprocess",
            json=scene.where(action="undo", epoch=number, expected=preview.json()["preview"]["fingerprint"]),
            headers=HEADERS,
        )


def test_undo_from_the_tab_never_creates_nor_overwrites(scene: Scene) -> None:
    number, name = _reprocessed_own_output(scene)
    store = scene.store()
    # Create: a forged retraction entry for a file in the host's DAGs folder, its bytes in the quarantine.
    planted = scene.host_file.parent / "dags" / "evil_dag.py"
    record = store.context.read_json(record_key(number))
    honest = json.loads(json.dumps(record))
    key = quarantine_key(number, planted.as_uri())
    store.blobs.put(key, b"import os  # attacker")
    record["files"].append(
        {"path": planted.as_uri(), "size_bytes": 21, "num_rows": 0, "checkpoint_id": "x", "quarantine": key}
        | {"outcome": "moved"}
    )
    store.blobs.put(record_key(number), json.dumps(record).encode())
    refused = _undo(scene, number)
    assert refused.status_code != 200, refused.text
    assert not planted.parent.exists(), "undo must not create files on the API server's host"
    # Overwrite: an honest record, but the job wrote a new file where the reprocessed one was.
    store.blobs.put(record_key(number), json.dumps(honest).encode())
    open_blobs(scene.own_output, **scene.options).put(name, b"newer rows written since")
    done = _undo(scene, number)
    assert done.status_code == 200, done.text
    assert open_blobs(scene.own_output, **scene.options).get(name)[0] == b"newer rows written since"


def test_a_forged_maintenance_epoch_is_abandoned_from_the_tab_not_run(scene: Scene) -> None:
    """A forged, unfinished delete-mode reprocess naming the host file: Resume needs its preview's
    fingerprint and refuses it anyway (outside the DAG's roots); an editor abandons it, audited."""
    store = scene.store()
    store.blobs.delete_many([i.key for i in store.blobs.list("")])
    epoch = store.epochs.begin(owner=f"{TEAM_A}/{S3_TASK}/{scene.run_id}", output_roots=[scene.own_output]).number
    store.epochs.end(epoch, status=EpochStatus.SUCCEEDED)
    path = scene.host_file.as_uri()
    plan = {
        "action": "reprocess",
        "store_uri": scene.store_uri,
        "epoch": epoch,
        "new_epoch": epoch + 1,
        "mode": "delete",
        "files": [{"path": path, "size_bytes": 20, "num_rows": 1, "checkpoint_id": "x", "quarantine": ""}],
        "previous": {"epoch": epoch, "valid": [], "snapshot": None},
        "new_base": [],
        "checkpoints": [],
    }
    record = Epoch(
        number=epoch + 1,
        owner="reprocess:attacker",
        created_at="2026-01-01T00:00:00Z",
        base=(),
        base_snapshot=None,
        expected_partitions=None,
        metadata={"action": "reprocess", "maintenance": True},
    ).to_json() | {"maintenance": plan}
    store.blobs.put(f"epochs/{epoch + 1:08d}.json", json.dumps(record).encode())
    with scene.server.client("alice") as alice:
        blind = alice.post("/checkpoints/api/task/reprocess", json=scene.where(action="resume"), headers=HEADERS)
        assert blind.status_code == 422 and "preview first" in blind.text
        preview = alice.post(
            "/checkpoints/api/task/reprocess/preview", json=scene.where(action="resume"), headers=HEADERS
        )
        assert preview.status_code == 200, preview.text
        shown = preview.json()["preview"]
        assert shown["refused_paths"] == [path] and [f["path"] for f in shown["files"]] == [path]
        resumed = alice.post(
            "/checkpoints/api/task/reprocess",
            json=scene.where(action="resume", expected=shown["fingerprint"]),
            headers=HEADERS,
        )
        assert resumed.status_code == 422, resumed.text
        scene.untouched()
        abandoned = alice.post(
            "/checkpoints/api/task/reprocess",
            json=scene.where(action="abandon", expected=shown["fingerprint"]),
            headers=HEADERS,
        )
        assert abandoned.status_code == 200, abandoned.text
    scene.untouched()
    assert scene.store().reprocessing.preview_resume() is None
    events = [e["event"] for e in scene.server.audit_entries(scene.run_id)]
    assert "checkpoints.abandon_maintenance" in events and "checkpoints.resume_reprocess.failed" in events, events


def test_eight_hanging_previews_do_not_starve_a_viewer_of_a_healthy_store(ui_server: ApiServer) -> None:
    """An editor opens 8 Clear dialogs on a store that never answers (each preview may take the action
    deadline): they queue on the actions' own slots, and a viewer of a healthy store gets its page
    within its deadline. Each preview answers within the action deadline, retries included."""
    hanging_runs = [f"hang_{uuid.uuid4().hex[:10]}" for _ in range(8)]
    for run_id in hanging_runs:
        ui_server.trigger_run(run_id, HANGING_DAG)
    healthy = f"ok_{uuid.uuid4().hex[:10]}"
    ui_server.trigger_run(healthy)
    fill_store(ui_server.default_store_path(healthy).as_uri(), (ui_server.home / "out" / healthy).as_uri())
    previews: list[tuple[int, float]] = []
    lock = threading.Lock()

    def preview(run_id: str) -> None:
        with ui_server.client("admin") as admin:
            admin.timeout = httpx.Timeout(300)
            started = time.monotonic()
            answer = admin.post(
                "/checkpoints/api/task/clear/preview",
                json={"dag_id": HANGING_DAG, "task_id": "spark_job", "run_id": run_id},
                headers=HEADERS,
            )
        with lock:
            previews.append((answer.status_code, time.monotonic() - started))

    threads = [threading.Thread(target=preview, args=(r,)) for r in hanging_runs]
    for thread in threads:
        thread.start()
    time.sleep(2.0)  # the previews now hold (or wait for) every action slot
    with ui_server.client("viewer") as viewer:
        started = time.monotonic()
        page = viewer.get("/checkpoints/api/task", params={"dag_id": DAG_ID, "task_id": SPARK_TASK, "run_id": healthy})
        seconds = time.monotonic() - started
    for thread in threads:
        thread.join(timeout=400)
    print(f"\nviewer of a healthy store during 8 hanging previews: {seconds:.1f} s; previews {sorted(previews)}")
    assert page.status_code == 200 and seconds < 10, (page.status_code, seconds, page.text[:300])
    assert len(previews) == 8 and all(status in (503,) for status, _ in previews), previews
    assert all(took < 120 + 15 for _, took in previews), previews  # the action deadline (120 s) bounds each
