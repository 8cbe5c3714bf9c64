"""Reprocess safety on both backends: fencing against submits, commits and other reprocesses; a crash
at every step (in-process and a killed process), finished by a re-run; bad input refused with a
typed error before anything moves."""

from __future__ import annotations

import dataclasses
import io
import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_ckpt_provider import failpoints
from airflow_ckpt_provider.store import REPROCESS_FAILPOINTS, EpochStatus, RetentionPolicy, Selection, open_blobs
from airflow_ckpt_provider.store.errors import (
    CheckpointError,
    EpochConflictError,
    InvalidArgumentError,
    NotFoundError,
    RefusedError,
)
from tests.store.conftest import Backend
from tests.store.helpers import done_keys, write_task
from tests.store.reprocess_helpers import Picture, name, quarantined_names, rerun_pending, run_and_commit
from tests.support.errors import raises_reason

PARTITIONS = [["a1", "a2"], ["b1"], ["c1", "c2", "c3"], ["d1", "d2"]]


@pytest.fixture(autouse=True)
def _no_failpoints() -> None:
    failpoints.disable_all()


# ---------------------------------------------------------------- fencing


def test_reprocess_while_an_epoch_is_open_changes_nothing(backend: Backend) -> None:
    store = backend.store()
    run_and_commit(store, backend, PARTITIONS)
    running = store.epochs.begin(owner="dag/task/run2")  # a submit is running
    write_task(store, backend, epoch=running.number, partition=0, keys=["e1"])
    before = Picture.take(backend)
    with raises_reason(EpochConflictError, "epoch_open", match="open"):
        store.reprocessing.run(Selection(keys=["a1"]))
    with raises_reason(EpochConflictError, "epoch_open", match="open"):
        store.reprocessing.rewind(0)
    assert Picture.take(backend) == before
    # A dead submit can be superseded on purpose: its later seals are fenced.
    result = store.reprocessing.run(Selection(keys=["a1"]), takeover=True)
    assert result.epoch == running.number + 1
    assert "e1" in done_keys(store)  # what the dead run sealed is kept (valid, uncommitted)


def test_submit_commit_clear_are_refused_during_an_unfinished_reprocess(backend: Backend) -> None:
    store = backend.store()
    run = run_and_commit(store, backend, PARTITIONS)
    failpoints.enable("store.reprocess.after_move", kind="raise", hit=1)
    with pytest.raises(failpoints.InjectedFault):
        store.reprocessing.run(Selection(keys=["c1"]))
    failpoints.disable_all()
    before = Picture.take(backend)
    for attempt in (
        lambda: store.epochs.begin(owner="dag/task/run"),
        lambda: store.epochs.begin(owner="other", takeover=True),  # not even with takeover
        lambda: store.housekeeping.clear(),
        lambda: store.housekeeping.discard_uncommitted(),
        lambda: store.reprocessing.run(Selection(keys=["a1"])),  # another selection
    ):
        with raises_reason(EpochConflictError, "reprocess_in_progress", match="resume"):
            attempt()
    with raises_reason(EpochConflictError, "reprocess_in_progress", match="reprocess"):
        store.commit([backend.output_uri])
    assert Picture.take(backend) == before
    report = store.inspection.check()
    assert not report.ok and any("unfinished" in p and "resume" in p for p in report.problems)

    finished = store.reprocessing.run(Selection(keys=["c1"]))  # the same request finishes it
    assert finished.resumed and sorted(finished.moved) == run.files[run.checkpoint_of("c1")]
    assert store.inspection.check().ok


def test_commit_refuses_a_finished_reprocess_epoch_until_a_run(backend: Backend) -> None:
    store = backend.store()
    run_and_commit(store, backend, PARTITIONS)
    store.reprocessing.run(Selection(keys=["b1"]))
    before = Picture.take(backend)
    with raises_reason(RefusedError, "epoch_retracted", match="run the job"):
        store.commit([backend.output_uri])
    assert Picture.take(backend) == before
    rerun_pending(store, backend, ["b1"])
    assert store.inspection.check().ok


def _racer(args: tuple[str, dict[str, Any], str, Any]) -> str:
    uri, options, what, barrier = args
    from airflow_ckpt_provider.store import Selection, open_store
    from airflow_ckpt_provider.store.errors import EpochConflictError

    store = open_store(uri, **options)
    barrier.wait()
    try:
        if what == "submit":
            return f"submit:{store.epochs.begin(owner='dag/task/run').number}"
        return f"reprocess:{store.reprocessing.run(Selection(keys=['a1'])).epoch}"
    except EpochConflictError:
        return "conflict"


@pytest.mark.parametrize("other", ["submit", "reprocess"])
def test_racing_a_submit_or_another_reprocess_exactly_one_wins(backend: Backend, other: str) -> None:
    ctx = multiprocessing.get_context("fork")
    repetitions = 6 if backend.name == "local" else 3
    with ctx.Manager() as manager, ctx.Pool(2) as pool:
        for rep in range(repetitions):
            sub = Backend(backend.name, f"{backend.store_uri}/r{rep}", f"{backend.output_uri}/r{rep}", backend.options)
            store = sub.store()
            run = run_and_commit(store, sub, PARTITIONS)
            barrier = manager.Barrier(2)
            results = pool.map(_racer, [(sub.store_uri, sub.options, w, barrier) for w in ("reprocess", other)])
            assert sorted(r.split(":")[0] for r in results) in (
                sorted(["conflict", "reprocess"]),
                sorted(["conflict", other]),
            ), results
            winner = next(r for r in results if r != "conflict")
            epochs = store.epochs.all()
            assert epochs[-1].number == run.epoch + 1  # exactly one new epoch
            files_a1 = {name(p) for p in run.files[run.checkpoint_of("a1")]}
            if winner.startswith("reprocess"):
                assert quarantined_names(sub) == files_a1 and store.inspection.check().ok
            else:
                assert quarantined_names(sub) == set() and files_a1 <= sub.output_names()


# ---------------------------------------------------------------- crashes


def _reference(backend: Backend, action: str) -> Picture:
    """The outcome of the same operation without a crash, on a twin store (for comparison)."""
    twin = Backend(backend.name, f"{backend.store_uri}-twin", f"{backend.output_uri}-twin", backend.options)
    store = twin.store()
    run_and_commit(store, twin, PARTITIONS)
    _prepare(store, action)
    _operate(store, action)
    return Picture.take(twin)


def _shape(objects: dict[str, bytes]) -> list[tuple[str, int]]:
    """Files without their random checkpoint ids (``part-P-I-eE``), with their sizes: comparable across stores."""
    return sorted(("-".join(name(k).split("-")[:4]), len(v)) for k, v in objects.items())


def _operate(store: Any, action: str) -> object:
    if action == "reprocess":
        return store.reprocessing.run(Selection(keys=["a2", "d1"]))
    if action == "rewind":
        return store.reprocessing.rewind(0)
    if action == "undo":
        return store.reprocessing.undo()
    return store.reprocessing.purge()


def _prepare(store: Any, action: str) -> None:
    if action in ("undo", "purge"):
        store.reprocessing.run(Selection(keys=["a2", "d1"]))


POINTS = [
    (action, point)
    for action in ("reprocess", "rewind", "undo", "purge")
    for point in REPROCESS_FAILPOINTS
    if point.split(".")[1] == {"rewind": "reprocess"}.get(action, action)
]


def test_every_step_has_a_failpoint() -> None:
    assert {p.split(".")[1] for p in REPROCESS_FAILPOINTS} == {"reprocess", "undo", "purge"}
    assert len(POINTS) >= 10


@pytest.mark.parametrize(("action", "point"), POINTS)
def test_crash_at_every_step_then_a_rerun_finishes(backend: Backend, action: str, point: str) -> None:
    store = backend.store()
    run_and_commit(store, backend, PARTITIONS)
    _prepare(store, action)
    failpoints.enable(point, kind="raise", hit=1)
    with pytest.raises(failpoints.InjectedFault):
        _operate(store, action)
    assert failpoints.hits(point) >= 1  # per-file points may be hit by parallel copies
    failpoints.disable_all()
    # Nothing lost at the crash: every file of the run is in the output or in the quarantine.
    picture = Picture.take(backend)
    everywhere = {name(k) for k in picture.output} | {name(k) for k in picture.quarantine()}
    assert len(everywhere) == len(PARTITIONS) or action == "purge"

    finished = store.reprocessing.resume()
    if point.endswith("before_epoch"):
        assert finished is None  # nothing had happened: nothing to finish; do it again
        _operate(store, action)
    assert store.inspection.check().ok, store.inspection.check()
    ours, reference = Picture.take(backend), _reference(backend, action)
    assert _shape(ours.output) == _shape(reference.output)
    assert _shape(ours.quarantine()) == _shape(reference.quarantine())
    current = store.epochs.current()
    assert current is not None and current.status is not EpochStatus.OPEN


@pytest.mark.parametrize(
    "point", ["store.reprocess.after_epoch", "store.reprocess.after_copy", "store.reprocess.after_move"]
)
def test_a_killed_process_is_finished_by_the_next_call(backend: Backend, point: str) -> None:
    """A real process dies (os._exit) mid-reprocess; the same call from another process finishes it."""
    store = backend.store()
    run = run_and_commit(store, backend, PARTITIONS)
    script = textwrap.dedent(
        f"""
        import json
        from airflow_ckpt_provider.store import Selection, open_store
        store = open_store({backend.store_uri!r}, **json.loads({json.dumps(json.dumps(backend.options))}))
        store.reprocessing.run(Selection(keys=["c2"]))
        """
    )
    env = {**os.environ, "CKPT_FAILPOINTS": f"{point}=exit"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == failpoints.EXIT_CODE, proc.stderr
    assert not store.inspection.check().ok
    result = store.reprocessing.run(Selection(keys=["c2"]))
    assert result.resumed
    assert quarantined_names(backend) == {name(p) for p in run.files[run.checkpoint_of("c2")]}
    assert "c1" not in done_keys(store) and store.inspection.check().ok


# ---------------------------------------------------------------- killed in the middle of a local write

# A child process that dies (os._exit, like a kill) between writing a temporary file under
# ``directory`` and giving it its name (a rename, or the link of a create-if-absent): exactly what a
# killed process leaves in a local directory. ``directory`` is on "another filesystem" than the store
# (a hard link into it fails with EXDEV): on one filesystem a copy is a hard link and leaves no
# temporary file at all. The local blob layer names files relative to a directory descriptor
# (store/blobs/local.py), so the destination is that descriptor's path plus the name.
_KILLED_BEFORE_THE_RENAME = """
import errno, json, os
from airflow_ckpt_provider import failpoints
from airflow_ckpt_provider.store import Selection, open_store

_replace, _link = os.replace, os.link

def _into_directory(dst, kwargs):
    fd = kwargs.get("dst_dir_fd")
    where = os.fspath(dst) if fd is None else os.path.join(os.readlink(f"/proc/self/fd/{fd}"), os.fspath(dst))
    return where.startswith(DIRECTORY)

def _killed_before_the_rename(src, dst, *args, **kwargs):
    if _into_directory(dst, kwargs) and ".tmp-" in os.fspath(src):
        os._exit(failpoints.EXIT_CODE)
    _replace(src, dst, *args, **kwargs)

def _linked_from_another_filesystem(src, dst, *args, **kwargs):
    if _into_directory(dst, kwargs):
        if ".tmp-" in os.fspath(src):
            os._exit(failpoints.EXIT_CODE)
        raise OSError(errno.EXDEV, "Invalid cross-device link")
    _link(src, dst, *args, **kwargs)

os.replace = _killed_before_the_rename
os.link = _linked_from_another_filesystem
store = open_store(STORE_URI, **json.loads(OPTIONS))
"""


def _kill_before_a_rename(backend: Backend, directory: Path, call: str) -> None:
    values = {"DIRECTORY": str(directory), "STORE_URI": backend.store_uri, "OPTIONS": json.dumps(backend.options)}
    script = "".join(f"{k} = {v!r}\n" for k, v in values.items()) + _KILLED_BEFORE_THE_RENAME + call + "\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == failpoints.EXIT_CODE, proc.stderr


def _temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob(".*.tmp-*"))


def test_an_undo_killed_mid_restore_leaves_no_second_copy(backend: Backend, tmp_path: Path) -> None:
    """Undo killed while it restores a file into a local output directory (store on this backend): the
    temporary copy it was writing is a second copy of the file's rows for readers that list hidden files,
    and an orphan commit never sees. Resuming the undo removes it; the next run's commit leaves exactly
    the committed files."""
    out = tmp_path / "local-out"
    # Output on another filesystem than an S3 store counts only where the DAG declares it (docs/security.md).
    trusted = {"trusted_output_roots": [out.as_uri()]}
    backend = dataclasses.replace(backend, output_uri=out.as_uri(), options=backend.options | trusted)
    store = backend.store()
    run = run_and_commit(store, backend, PARTITIONS)
    store.reprocessing.run(Selection(keys=["a2", "d1"]))

    _kill_before_a_rename(backend, out, "store.reprocessing.undo()")
    assert _temporaries(out), "the kill did not happen mid-restore"
    assert not store.inspection.check().ok  # the undo is unfinished

    result = store.reprocessing.resume()
    assert result is not None and result.resumed and len(result.restored) == 2
    assert _temporaries(out) == []
    assert sorted(p.name for p in out.iterdir()) == sorted(name(p) for p in run.all_files)
    assert store.inspection.check().ok, store.inspection.check()
    rerun_pending(store, backend, [])  # nothing is pending after the undo: the next run adds nothing
    assert sorted(p.name for p in out.iterdir()) == sorted(name(p) for p in run.all_files)
    assert store.inspection.check().ok, store.inspection.check()


def test_a_reprocess_killed_mid_copy_leaves_nothing_in_the_quarantine(tmp_path: Path) -> None:
    """The same kill while a reprocess copies a file into a local store's quarantine: its resume removes
    the temporary copy, so a purge leaves nothing behind."""
    backend = Backend("local", (tmp_path / "store").as_uri(), (tmp_path / "out").as_uri())
    store = backend.store()
    run_and_commit(store, backend, PARTITIONS)
    quarantine = tmp_path / "store" / "quarantine"

    _kill_before_a_rename(backend, quarantine, 'store.reprocessing.run(Selection(keys=["a2", "d1"]))')
    assert _temporaries(quarantine), "the kill did not happen mid-copy"

    result = store.reprocessing.run(Selection(keys=["a2", "d1"]))
    assert result.resumed and len(result.moved) == 2
    assert _temporaries(quarantine) == []
    store.reprocessing.purge()
    assert [p for p in quarantine.rglob("*") if p.is_file()] == []
    assert store.inspection.check().ok, store.inspection.check()


# ---------------------------------------------------------------- bad input


def _refused(backend: Backend, call: Any, error: type[CheckpointError], reason: str, match: str) -> None:
    before = Picture.take(backend)
    with raises_reason(error, reason, match=match):
        call()
    assert Picture.take(backend) == before


def test_bad_input_is_a_typed_error_and_changes_nothing(backend: Backend) -> None:
    store = backend.store()
    run = run_and_commit(store, backend, PARTITIONS)
    _refused(backend, lambda: store.reprocessing.run(Selection()), InvalidArgumentError, "empty_selection", "clear")
    _refused(
        backend, lambda: store.reprocessing.run(Selection(keys=["a1", "nope", "zz"])), NotFoundError, "keys", "nope"
    )
    _refused(backend, lambda: store.reprocessing.preview(Selection(keys=["nope"])), NotFoundError, "keys", "pending")
    _refused(
        backend,
        lambda: store.reprocessing.run(Selection(files=["s3://bucket/never/landed.parquet"])),
        NotFoundError,
        "input_files",
        "landed.parquet",
    )
    _refused(
        backend, lambda: store.reprocessing.run(Selection(epochs=[run.epoch + 7])), NotFoundError, "epoch", "epochs"
    )
    _refused(backend, lambda: store.reprocessing.rewind(run.epoch + 3), NotFoundError, "commit", "commit")
    _refused(backend, lambda: store.reprocessing.run(Selection(commits=[42])), NotFoundError, "commit", "42")
    _refused(backend, lambda: store.reprocessing.undo(), NotFoundError, "reprocess", "no reprocess")
    _refused(backend, lambda: store.reprocessing.purge(5), NotFoundError, "reprocess", "5")
    _refused(backend, lambda: store.reprocessing.run(Selection(keys=[1, 2])), NotFoundError, "keys", "type")


def test_a_missing_quarantine_refuses_undo(backend: Backend) -> None:
    store = backend.store()
    run_and_commit(store, backend, PARTITIONS, files=2)
    store.reprocessing.run(Selection(keys=["c1"]))
    blobs = backend.store_blobs()
    lost = sorted(k for k in backend.store_keys() if k.startswith("quarantine/"))[0]
    blobs.delete_many([lost])
    _refused(backend, lambda: store.reprocessing.undo(), RefusedError, "quarantine_missing", name(lost))


def test_a_stale_preview_is_refused(backend: Backend) -> None:
    store = backend.store()
    run_and_commit(store, backend, PARTITIONS)
    plan = store.reprocessing.preview(Selection(keys=["a1"]))
    run_and_commit(store, backend, [["z1"]])  # the store moved on since the person read the preview
    _refused(
        backend,
        lambda: store.reprocessing.run(Selection(keys=["a1"]), expected=plan),
        EpochConflictError,
        "store_changed",
        "preview",
    )
    _refused(
        backend,
        lambda: store.reprocessing.run(Selection(keys=["a1"]), expected=plan.fingerprint),
        EpochConflictError,
        "store_changed",
        "preview",
    )
    fresh = store.reprocessing.preview(Selection(keys=["a1"]))
    assert store.reprocessing.run(Selection(keys=["a1"]), expected=fresh).epoch is not None


def test_records_a_store_holds_are_checked_too(backend: Backend) -> None:
    """A lineage record naming a file outside the output roots: listed by the preview, never moved."""
    store = backend.store()
    run = run_and_commit(store, backend, PARTITIONS, policy=RetentionPolicy.DELETE_AFTER_SUCCESS)
    victim_root = backend.output_uri.rsplit("/", 1)[0] + "/victim"
    victim_blobs = open_blobs(victim_root, **backend.options)
    victim_blobs.put("precious.txt", b"precious")
    victim = victim_blobs.child_uri("precious.txt")
    blobs = backend.store_blobs()
    key = f"lineage/{run.epoch:08d}.parquet"
    lineage = pq.read_table(pa.BufferReader(blobs.get(key)[0]))
    forged = lineage.slice(0, 1).to_pylist()[0] | {"path": victim, "size_bytes": 8}
    sink = io.BytesIO()
    pq.write_table(pa.concat_tables([lineage, pa.Table.from_pylist([forged], schema=lineage.schema)]), sink)
    blobs.put(key, sink.getvalue())

    plan = store.reprocessing.preview(Selection(commits=[run.epoch]))
    assert victim not in {f.path for f in plan.files} and plan.refused_paths == (victim,)
    assert "precious.txt" in plan.describe()
    _refused(
        backend,
        lambda: store.reprocessing.run(Selection(commits=[run.epoch])),
        RefusedError,
        "unsafe_path",
        "precious.txt",
    )
    assert victim_blobs.get("precious.txt")[0] == b"precious"


def test_undo_after_a_cleanup_deleted_the_checkpoints_is_refused(backend: Backend) -> None:
    """If the retracted (now invalid) checkpoints were deleted since (by hand, or a cleanup), an undo would
    restore files whose keys stay pending (duplicates after the next run), so it is refused."""
    store = backend.store()
    run = run_and_commit(store, backend, PARTITIONS, policy=None)
    store.reprocessing.run(Selection(keys=["a1"]))
    blobs = backend.store_blobs()
    gone = run.checkpoint_of("a1")
    blobs.delete_many([k for k in backend.store_keys() if k.startswith((f"checkpoints/{gone}/", f"attempts/{gone}/"))])
    # and its row, if a segment holds it (the commit compacted the run's checkpoints)
    store.parts.compactor.rewrite_without(frozenset({run.checkpoint_of("a1")}))
    _refused(backend, lambda: store.reprocessing.undo(), RefusedError, "undo_unavailable", "deleted since")
    assert store.inspection.check().ok
