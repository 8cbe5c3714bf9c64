"""The store contract, run against the local backend and the real S3 server."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import textwrap
import threading

import pyarrow as pa
import pytest

from airflow_ckpt_provider import failpoints
from airflow_ckpt_provider.store import (
    CheckpointStatus,
    CheckpointStore,
    EpochStatus,
    FileMetadata,
    RetentionPolicy,
    new_checkpoint_id,
    open_store,
)
from airflow_ckpt_provider.store.errors import EpochConflictError, InvalidArgumentError, RefusedError
from airflow_ckpt_provider.store.store import INLINE_MAX_KEYS
from tests.store.conftest import Backend
from tests.store.helpers import begin, done_keys, names, wait_for_hit, write_task
from tests.support.errors import raises_reason


@pytest.fixture(autouse=True)
def _no_failpoints() -> None:
    failpoints.disable_all()


# ---------------------------------------------------------------- lifecycle


def test_staged_data_is_invisible_until_sealed(backend: Backend) -> None:
    store = backend.store()
    epoch = begin(store, backend, owner="t")
    checkpoint_id, _, _ = write_task(store, backend, epoch=epoch.number, partition=0, keys=["a", "b"], seal=False)
    assert done_keys(store) == []
    assert store.get_checkpointed_files() == []
    assert store.inspection.get_checkpoint(checkpoint_id) is None
    assert store.inspection.list_checkpoints() == []

    sealed = store.checkpoint(checkpoint_id, epoch=epoch.number, partition=0)
    assert sealed is not None and sealed.status is CheckpointStatus.CHECKPOINTED
    assert done_keys(store) == ["a", "b"]
    assert [f.num_rows for f in store.get_checkpointed_files()] == [2]
    again = store.inspection.get_checkpoint(checkpoint_id)
    assert again is not None and again.num_keys == 2 and again.key_type == "string"


def test_every_call_is_idempotent_where_documented(backend: Backend) -> None:
    store = backend.store()
    epoch = begin(store, backend, owner="t")
    checkpoint_id, _, sealed = write_task(store, backend, epoch=epoch.number, partition=0, keys=[1, 2, 3])
    # Sealing again with the same parts returns the manifest, from this process or another.
    assert store.checkpoint(checkpoint_id, epoch=epoch.number, partition=0) is not None
    other = backend.store()
    resealed = other.checkpoint(checkpoint_id, epoch=epoch.number, partition=0)
    assert resealed is not None and sealed is not None and resealed.key_parts == sealed.key_parts
    with raises_reason(EpochConflictError, "already_sealed"):
        store.stage_keys(checkpoint_id, [4])

    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    first = store.commit([backend.output_uri])
    second = store.commit([backend.output_uri])
    assert not first.already_committed and second.already_committed
    committed = store.inspection.get_checkpoint(checkpoint_id)
    assert committed is not None and committed.status is CheckpointStatus.COMMITTED
    assert store.get_checkpointed_files() == []  # committed files are no longer pending
    assert done_keys(store) == [1, 2, 3]  # but the keys stay done
    assert second.committed_checkpoints == first.committed_checkpoints
    assert store.housekeeping.cleanup(RetentionPolicy.DELETE_AFTER_SUCCESS) == [checkpoint_id]
    assert store.housekeeping.cleanup(RetentionPolicy.DELETE_AFTER_SUCCESS) == []
    assert done_keys(store) == []
    # The output stays: cleanup never deletes output files.
    assert len(backend.output_names()) == 1


def test_crash_between_parts_and_manifest_leaves_nothing_visible(backend: Backend) -> None:
    """A real process dies (os._exit) right before writing the manifest."""
    store = backend.store()
    epoch = begin(store, backend, owner="t")
    script = textwrap.dedent(
        f"""
        import json, sys
        from airflow_ckpt_provider.store import open_store, new_checkpoint_id
        store = open_store({backend.store_uri!r}, **json.loads({json.dumps(json.dumps(backend.options))}))
        cid = new_checkpoint_id()
        print(cid, flush=True)
        store.stage_keys(cid, ["x", "y"])
        store.checkpoint(cid, epoch={epoch.number}, partition=0)
        """
    )
    env = {"CKPT_FAILPOINTS": "store.checkpoint.before_manifest=exit"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_env(env), timeout=120)
    assert proc.returncode == failpoints.EXIT_CODE, proc.stderr
    checkpoint_id = proc.stdout.strip()
    assert any(checkpoint_id in key for key in backend.store_keys())  # the key part is there...
    assert store.inspection.get_checkpoint(checkpoint_id) is None  # ...but nothing is visible
    assert done_keys(store) == []
    report = store.inspection.check()
    assert report.ok and any(checkpoint_id in note for note in report.notes)


def _env(extra: dict[str, str]) -> dict[str, str]:
    import os

    return {**os.environ, **extra}


# ---------------------------------------------------------------- epochs


def _race(args: tuple[str, dict[str, object], str, object]) -> str:
    uri, options, owner, barrier = args
    from airflow_ckpt_provider.store import open_store
    from airflow_ckpt_provider.store.errors import EpochConflictError

    store = open_store(uri, **options)  # type: ignore[arg-type]
    barrier.wait()  # type: ignore[attr-defined]
    try:
        return f"won:{store.epochs.begin(owner=owner).number}"
    except EpochConflictError:
        return "conflict"


def test_racing_begin_epoch_exactly_one_wins(backend: Backend) -> None:
    repetitions = 25 if backend.name == "local" else 10
    ctx = multiprocessing.get_context("fork")
    with ctx.Manager() as manager, ctx.Pool(2) as pool:
        for rep in range(repetitions):
            uri = f"{backend.store_uri}/race-{rep}"
            barrier = manager.Barrier(2)
            results = pool.map(_race, [(uri, backend.options, f"run-{i}", barrier) for i in range(2)])
            assert sorted(r.split(":")[0] for r in results) == ["conflict", "won"], (rep, results)
            assert [e.number for e in open_store(uri, **backend.options).epochs.all()] == [1]


def test_open_epoch_blocks_other_owners_but_not_own_retry(backend: Backend) -> None:
    store = backend.store()
    first = begin(store, backend, owner="dag/task/run1")
    with raises_reason(EpochConflictError, "epoch_open", match="still open"):
        begin(store, backend, owner="dag/task/run2")
    retry = begin(store, backend, owner="dag/task/run1")  # a retry of the same task takes over
    assert retry.number == first.number + 1
    assert store.epochs.all()[0].status is EpochStatus.FAILED  # superseded
    forced = begin(store, backend, owner="other", takeover=True)
    assert forced.number == retry.number + 1
    store.epochs.end(forced.number, status=EpochStatus.SUCCEEDED)
    assert begin(store, backend, owner="someone-else").number == forced.number + 1


def test_an_epoch_records_what_its_base_holds(backend: Backend) -> None:
    """begin_epoch counts the keys and rows it builds on, as progress() would, from the one state it reads."""
    store = backend.store()
    first = begin(store, backend, owner="t")
    assert (first.base_keys, first.base_rows) == (0, 0)
    write_task(store, backend, epoch=first.number, partition=0, keys=["a", "b", "c"])
    write_task(store, backend, epoch=first.number, partition=1, keys=["d"])
    write_task(store, backend, epoch=first.number, partition=2, keys=["e"], seal=False)  # not done
    store.epochs.end(first.number, status=EpochStatus.FAILED)
    progress = store.inspection.progress()
    second = begin(store, backend, owner="t")
    assert (second.base_keys, second.base_rows) == (progress.keys_done, progress.rows) == (4, 4)
    reread = store.epochs.current()
    assert reread is not None and (reread.base_keys, reread.base_rows) == (4, 4)


def test_is_degraded_reads_only_the_epochs_markers(backend: Backend) -> None:
    store = backend.store()
    first = begin(store, backend, owner="t")
    store.epochs.end(first.number, status=EpochStatus.SUCCEEDED)
    second = begin(store, backend, owner="t")
    store.epochs.mark_degraded(second.number, "breaker tripped in a test")
    assert not store.epochs.is_degraded(first.number)
    assert store.epochs.is_degraded(second.number)
    assert store.inspection.progress().degraded_epochs == (second.number,)


def test_zombie_sealed_in_old_epoch_is_never_valid(backend: Backend) -> None:
    """A real race: the zombie passes the fencing check, then the new epoch begins, then it seals."""
    store = backend.store()
    old = begin(store, backend, owner="t")
    write_task(store, backend, epoch=old.number, partition=0, keys=["done"])
    zombie_store = backend.store()
    zombie_id = new_checkpoint_id()
    zombie_store.stage_keys(zombie_id, ["zombie"])
    # The zombie passes the fence check and is held before its manifest until the new epoch has begun
    # (a sleep lost that race on a loaded machine: the zombie sealed before the new epoch, legitimately).
    failpoints.enable("store.checkpoint.before_manifest", kind="block", seconds=120)
    sealed: list[object] = []
    thread = threading.Thread(
        target=lambda: sealed.append(zombie_store.checkpoint(zombie_id, epoch=old.number, partition=1))
    )
    thread.start()
    wait_for_hit("store.checkpoint.before_manifest")
    new = begin(backend.store(), backend, owner="t")
    failpoints.release("store.checkpoint.before_manifest")
    thread.join()
    failpoints.disable_all()
    assert sealed and sealed[0] is not None  # the zombie did seal...
    assert zombie_id not in new.base
    assert done_keys(store) == ["done"]  # ...but it never counts
    with raises_reason(EpochConflictError, "epoch_fenced"):  # and a zombie that checks in time is told to give up
        store.checkpoint(new_checkpoint_id(), epoch=old.number, partition=2)


def test_duplicate_attempts_of_a_partition_count_once(backend: Backend) -> None:
    store = backend.store()
    epoch = begin(store, backend, owner="t")
    first, first_paths, _ = write_task(store, backend, epoch=epoch.number, partition=3, keys=["k1", "k2"])
    second, second_paths, _ = write_task(store, backend, epoch=epoch.number, partition=3, keys=["k1", "k2"])
    assert done_keys(store) == ["k1", "k2"]
    valid = [c.checkpoint_id for c in store.inspection.valid_checkpoints()]
    assert valid == [first]
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    result = store.commit([backend.output_uri])
    assert names(result.deleted_files) == names(second_paths)
    assert backend.output_names() == names(first_paths)
    assert second in result.deleted_checkpoints


def test_resume_base_carries_done_checkpoints_forward(backend: Backend) -> None:
    store = backend.store()
    first = begin(store, backend, owner="t")
    done_id, _, _ = write_task(store, backend, epoch=first.number, partition=0, keys=["a"])
    write_task(store, backend, epoch=first.number, partition=1, keys=["b"], seal=False)  # the failed task
    store.epochs.end(first.number, status=EpochStatus.FAILED)
    with raises_reason(RefusedError, "epoch_failed", match="failed"):
        store.commit([backend.output_uri])
    second = begin(store, backend, owner="t")
    assert second.base == (done_id,)
    # partition numbers restart in the new epoch: partition 0 again is not a duplicate of the base
    write_task(store, backend, epoch=second.number, partition=0, keys=["b"])
    assert done_keys(store) == ["a", "b"]


# ---------------------------------------------------------------- commit


def _scenario(backend: Backend) -> tuple[set[str], set[str], str]:
    """Epoch 1 fails halfway, epoch 2 finishes. Returns (authoritative names, orphan names, foreign)."""
    store = backend.store()
    first = begin(store, backend, owner="t")
    good: set[str] = set()
    orphans: set[str] = set()
    for partition in range(3):
        _, paths, _ = write_task(store, backend, epoch=first.number, partition=partition, keys=[f"a{partition}"])
        good |= names(paths)
    _, paths, _ = write_task(store, backend, epoch=first.number, partition=3, keys=["a3"], seal=False)
    orphans |= names(paths)
    store.epochs.end(first.number, status=EpochStatus.FAILED)
    second = begin(store, backend, owner="t")
    _, paths, _ = write_task(store, backend, epoch=second.number, partition=0, keys=["a3"], seal=False)
    orphans |= names(paths)  # a Spark retry of the task inside the run
    _, paths, _ = write_task(store, backend, epoch=second.number, partition=0, keys=["a3"])
    good |= names(paths)
    _, paths, _ = write_task(store, backend, epoch=second.number, partition=0, keys=["a3"])
    orphans |= names(paths)  # a speculative duplicate that sealed second
    foreign = backend.write_output("not-ours.parquet")
    store.epochs.end(second.number, status=EpochStatus.SUCCEEDED)
    return good, orphans, foreign.rsplit("/", 1)[-1]


def test_commit_deletes_exactly_the_orphans(backend: Backend) -> None:
    good, orphans, foreign = _scenario(backend)
    store = backend.store()
    # Any spelling of the output root works: a plain path, a trailing slash, s3a://.
    root = backend.output_uri.removeprefix("file://").replace("s3://", "s3a://") + "/"
    result = store.commit([root], unknown_files="keep")
    assert names(result.deleted_files) == orphans
    assert {f.path.rsplit("/", 1)[-1] for f in result.committed_files} == good
    assert backend.output_names() == good | {foreign}
    assert names(result.unknown_files) == {foreign}
    assert result.bytes_freed > 0
    assert store.inspection.check().ok
    assert all(c.status is CheckpointStatus.COMMITTED for c in store.inspection.valid_checkpoints())
    assert done_keys(store) == ["a0", "a1", "a2", "a3"]


def test_unknown_files_refuse_the_commit_and_change_nothing(backend: Backend) -> None:
    """A file no writer of this store recorded (a run whose store was elsewhere wrote the same output):
    a reader would see it beside the committed files, so the commit fails, typed, and changes nothing."""
    good, orphans, foreign = _scenario(backend)
    store = backend.store()
    before_output = backend.output_names()
    with raises_reason(RefusedError, "unknown_output_files") as raised:
        store.commit([backend.output_uri])
    assert names(raised.value.paths) == {foreign}
    assert isinstance(raised.value, RefusedError)
    message = str(raised.value)
    for way_out in ("Move them out", "airflow-ckpt reprocess", 'unknown_files="keep"', foreign):
        assert way_out in message
    assert backend.output_names() == before_output == good | orphans | {foreign}
    assert not [k for k in backend.store_keys() if k.startswith(("commits/", "lineage/"))]  # nothing committed
    assert store.epochs.current() is not None and store.epochs.current().status is EpochStatus.SUCCEEDED
    # Moved away: the same commit goes through.
    backend.output_blobs().delete_many([foreign])
    result = store.commit([backend.output_uri])
    assert result.unknown_files == () and names(result.deleted_files) == orphans
    assert backend.output_names() == good


@pytest.mark.parametrize("failpoint", ["store.commit.between_phases", "store.commit.during_delete_orphans"])
def test_commit_killed_between_phases_then_resumed(backend: Backend, failpoint: str) -> None:
    good, _, foreign = _scenario(backend)
    # Enough orphans that deletion spans several batches would be slow; one batch is the same code path.
    script = textwrap.dedent(
        f"""
        import json
        from airflow_ckpt_provider.store import open_store
        store = open_store({backend.store_uri!r}, **json.loads({json.dumps(json.dumps(backend.options))}))
        store.commit([{backend.output_uri!r}], unknown_files="keep")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=_env({"CKPT_FAILPOINTS": f"{failpoint}=exit"}),
        timeout=120,
    )
    assert proc.returncode == failpoints.EXIT_CODE, proc.stderr
    assert good <= backend.output_names()  # nothing committed was lost mid-way
    result = backend.store().commit([backend.output_uri], unknown_files="keep")
    assert not result.already_committed
    assert backend.output_names() == good | {foreign}
    assert backend.store().commit([backend.output_uri]).already_committed
    assert backend.store().inspection.check().ok


def test_commit_never_deletes_committed_files_of_earlier_runs(backend: Backend) -> None:
    store = backend.store()
    first = begin(store, backend, owner="run1")
    _, first_paths, _ = write_task(store, backend, epoch=first.number, partition=0, keys=["old"])
    store.epochs.end(first.number, status=EpochStatus.SUCCEEDED)
    store.commit([backend.output_uri])
    store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    second = begin(store, backend, owner="run2")
    _, second_paths, _ = write_task(store, backend, epoch=second.number, partition=0, keys=["new"])
    store.epochs.end(second.number, status=EpochStatus.SUCCEEDED)
    result = store.commit([backend.output_uri])
    assert result.deleted_files == ()
    assert result.unknown_files == ()  # earlier committed output is known, not "unknown"
    assert backend.output_names() == names(first_paths) | names(second_paths)


def test_overlapping_keys_refuse_the_commit_and_delete_nothing(backend: Backend) -> None:
    store = backend.store()
    epoch = begin(store, backend, owner="t")
    write_task(store, backend, epoch=epoch.number, partition=0, keys=["a", "b"])
    write_task(store, backend, epoch=epoch.number, partition=1, keys=["b", "c"])
    write_task(store, backend, epoch=epoch.number, partition=2, keys=["z"], seal=False)  # an orphan
    before = backend.output_names()
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    with raises_reason(RefusedError, "overlapping_keys", match="overlap"):
        store.commit([backend.output_uri])
    assert backend.output_names() == before
    assert not store.inspection.check().ok


def test_discard_uncommitted_and_clear(backend: Backend) -> None:
    store = backend.store()
    first = begin(store, backend, owner="t")
    _, committed_paths, _ = write_task(store, backend, epoch=first.number, partition=0, keys=["a"])
    store.epochs.end(first.number, status=EpochStatus.SUCCEEDED)
    store.commit([backend.output_uri])
    second = begin(store, backend, owner="t")
    _, pending_paths, _ = write_task(store, backend, epoch=second.number, partition=0, keys=["b"])
    _, failed_paths, _ = write_task(store, backend, epoch=second.number, partition=1, keys=["c"], seal=False)
    discarded = store.housekeeping.discard_uncommitted()
    assert names(discarded.deleted_files) == names(pending_paths) | names(failed_paths)
    assert done_keys(store) == ["a"]
    assert backend.output_names() == names(committed_paths)
    cleared = store.housekeeping.clear()
    assert done_keys(store) == []
    assert backend.output_names() == names(committed_paths)  # committed output is never deleted
    assert cleared.epoch > discarded.epoch
    assert begin(store, backend, owner="t").base == ()


def test_retain_compacts_into_one_snapshot(backend: Backend) -> None:
    store = backend.store()
    for run in range(3):
        epoch = begin(store, backend, owner=f"run{run}")
        for partition in range(4):
            write_task(store, backend, epoch=epoch.number, partition=partition, keys=[f"r{run}p{partition}"])
        store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
        store.commit([backend.output_uri])
        store.housekeeping.cleanup(RetentionPolicy.RETAIN)
        assert store.inspection.list_checkpoints() == []
        sources = store.key_sources()
        assert len(sources) == 1 and sources[0].format == "parquet"
    assert len(done_keys(store)) == 12
    progress = store.inspection.progress()
    assert progress.keys_done == 12 and progress.committed


@pytest.mark.parametrize("damage", ["unattributed-manifest", "unattributed-keys", "no-index"])
def test_a_snapshot_no_release_wrote_is_a_typed_error_and_nothing_is_deleted(backend: Backend, damage: str) -> None:
    """Every snapshot records which checkpoint each key came from (reprocess and rewind select by it). One
    without that (a pre-release format: its manifest does not say ``attributed``, its keys lack the columns,
    or its checkpoint index is gone) is refused where it is read, naming the file, and nothing is deleted."""
    import pyarrow.parquet as pq

    from airflow_ckpt_provider.store import Selection
    from airflow_ckpt_provider.store.errors import CorruptCheckpointError

    store = backend.store()
    epoch = begin(store, backend, owner="t")
    write_task(store, backend, epoch=epoch.number, partition=0, keys=["a", "b"])
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    store.commit([backend.output_uri])
    store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    blobs = backend.store_blobs()
    prefix = f"snapshots/{epoch.number:08d}/"
    if damage == "unattributed-manifest":
        manifest = json.loads(blobs.get(prefix + "manifest.json")[0])
        del manifest["attributed"]
        blobs.put(prefix + "manifest.json", json.dumps(manifest).encode())
    elif damage == "unattributed-keys":
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table({"key": ["a", "b"]}), sink)
        blobs.put(prefix + "keys.parquet", sink.getvalue().to_pybytes())
    else:
        blobs.delete_many([prefix + "checkpoints.parquet"])
    store_before, output_before = backend.store_keys(), backend.output_names()
    if damage == "unattributed-manifest":
        with raises_reason(CorruptCheckpointError, "corrupt", match="no release of airflow-ckpt-provider wrote"):
            store.get_checkpointed_keys()
        with raises_reason(CorruptCheckpointError, "corrupt"):
            store.inspection.progress()
    with raises_reason(CorruptCheckpointError, "corrupt", match=prefix):
        store.reprocessing.run(Selection(keys=["a"]))
    assert backend.store_keys() == store_before and backend.output_names() == output_before


def test_degraded_commit_keeps_what_it_cannot_prove_orphaned(backend: Backend) -> None:
    store = backend.store()
    epoch = begin(store, backend, owner="t")
    _, sealed_paths, _ = write_task(store, backend, epoch=epoch.number, partition=0, keys=["a"])
    # A task whose store writes failed after its intent: its output is real but unsealed.
    _, unsealed_paths, _ = write_task(store, backend, epoch=epoch.number, partition=1, keys=["b"], seal=False)
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    result = store.commit([backend.output_uri], degraded=True)
    assert result.degraded
    assert result.deleted_files == ()
    assert names(result.kept_unprovable) == names(unsealed_paths)
    assert backend.output_names() == names(sealed_paths) | names(unsealed_paths)


# ---------------------------------------------------------------- bad input


def test_bad_ids_are_rejected(backend: Backend) -> None:
    store = backend.store()
    for bad in ["a/b", "../x", "..", "", "x" * 200, "a b"]:
        with raises_reason(InvalidArgumentError, "checkpoint_id"):
            store.stage_keys(bad, ["k"])
        with raises_reason(InvalidArgumentError, "checkpoint_id"):
            store.inspection.get_checkpoint(bad)
    assert backend.store_keys() == set()


def test_bad_keys_are_rejected(backend: Backend) -> None:
    store = backend.store()
    checkpoint_id = new_checkpoint_id()
    with raises_reason(InvalidArgumentError, "invalid_keys", match="null"):
        store.stage_keys(checkpoint_id, ["a", None])
    with raises_reason(InvalidArgumentError, "invalid_keys"):
        store.stage_keys(checkpoint_id, ["a", 1])
    store.stage_keys(checkpoint_id, pa.array([1, 2], pa.int64()))
    with raises_reason(InvalidArgumentError, "key_type_mismatch"):
        store.stage_keys(checkpoint_id, ["a"])


def test_key_type_changed_between_checkpoints(backend: Backend) -> None:
    store = backend.store()
    epoch = begin(store, backend, owner="t")
    write_task(store, backend, epoch=epoch.number, partition=0, keys=[1, 2])
    write_task(store, backend, epoch=epoch.number, partition=1, keys=["3"])
    before = backend.store_keys()
    with raises_reason(InvalidArgumentError, "key_type_mismatch", match="changed type"):
        store.get_checkpointed_keys()
    with raises_reason(InvalidArgumentError, "key_type_mismatch"):
        store.key_type()
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    with raises_reason(InvalidArgumentError, "key_type_mismatch"):
        store.commit([backend.output_uri])
    assert backend.store_keys() >= before


@pytest.mark.parametrize("damage", ["garbage", "truncated", "not-a-manifest", "newer-format", "unreleased-format"])
def test_corrupt_manifest_is_a_typed_error_and_nothing_is_deleted(backend: Backend, damage: str) -> None:
    from airflow_ckpt_provider.store.errors import CorruptCheckpointError

    store = backend.store()
    epoch = begin(store, backend, owner="t")
    checkpoint_id, _, _ = write_task(store, backend, epoch=epoch.number, partition=0, keys=["a"])
    blobs = backend.store_blobs()
    key = f"checkpoints/{checkpoint_id}/manifest.json"
    data, _ = blobs.get(key)
    newer = json.dumps(json.loads(data) | {"format_version": 3}).encode()  # written by a future version
    unreleased = json.dumps(json.loads(data) | {"format_version": 1}).encode()  # no release wrote format 1
    broken = {
        "garbage": b"\x00\xffnot json",
        "truncated": data[: len(data) // 2],
        "not-a-manifest": b'{"a": 1}',
        "newer-format": newer,
        "unreleased-format": unreleased,
    }
    blobs.put(key, broken[damage])
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    store_before, output_before = backend.store_keys(), backend.output_names()
    with raises_reason(CorruptCheckpointError, "corrupt", match="airflow-ckpt check") as raised:
        store.get_checkpointed_keys()
    if damage.endswith("-format"):
        assert "upgrade every process that reads this store" in str(raised.value)
        assert f"has format {3 if damage == 'newer-format' else 1}" in str(raised.value)
        assert "it reads format 2" in str(raised.value)
    with raises_reason(CorruptCheckpointError, "corrupt"):
        store.commit([backend.output_uri])
    report = store.inspection.check()
    assert not report.ok and checkpoint_id in " ".join(report.problems)
    assert backend.store_keys() == store_before and backend.output_names() == output_before


def test_an_empty_manifest_is_an_unsealed_leftover_the_commit_deletes_with_its_files(backend: Backend) -> None:
    """A PUT cut short on a server whose PUT is not atomic leaves the manifest empty (SeaweedFS does, the
    fault campaign's s3-fault#7): its attempt was never sealed, so readers redo its keys, check() notes it
    as a leftover, and the commit deletes it and its output files like any failed attempt's."""
    store = backend.store()
    epoch = begin(store, backend, owner="t")
    kept_id, kept_paths, _ = write_task(store, backend, epoch=epoch.number, partition=0, keys=["a"])
    torn_id, torn_paths, _ = write_task(store, backend, epoch=epoch.number, partition=1, keys=["b"])
    blobs = backend.store_blobs()
    blobs.delete_many([f"checkpoints/{torn_id}/manifest.json"])
    blobs.put(f"checkpoints/{torn_id}/manifest.json", b"")  # what the cut upload left
    assert done_keys(store) == ["a"]
    assert store.inspection.get_checkpoint(torn_id) is None
    assert [c.checkpoint_id for c in store.inspection.list_checkpoints()] == [kept_id]
    report = store.inspection.check()
    assert report.ok, report.problems
    assert any(torn_id in note for note in report.notes)
    # The rerun redoes partition 1 in a new attempt; then the job succeeds and commits.
    redo_id, redo_paths, _ = write_task(store, backend, epoch=epoch.number, partition=1, keys=["b"])
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    result = store.commit([backend.output_uri])
    assert sorted(result.committed_checkpoints) == sorted([kept_id, redo_id])
    assert torn_id in result.deleted_checkpoints
    assert backend.output_names() == names(kept_paths + redo_paths)
    assert not names(torn_paths) & backend.output_names()
    assert not any(torn_id in key for key in backend.store_keys())
    assert done_keys(store) == ["a", "b"]  # committed keys stay done (a rerun of this job skips them)


def test_a_seal_that_finds_its_own_upload_left_empty_writes_it_again(backend: Backend) -> None:
    """The first upload of a manifest was cut short and left an empty object, so its retry lost
    If-None-Match to it: the seal fills the empty object in (If-Match on its etag) instead of failing."""
    store = backend.store()
    epoch = begin(store, backend, owner="t")
    checkpoint_id, _, _ = write_task(store, backend, epoch=epoch.number, partition=0, keys=["a"], seal=False)
    backend.store_blobs().put(f"checkpoints/{checkpoint_id}/manifest.json", b"")
    sealed = store.checkpoint(checkpoint_id, epoch=epoch.number, partition=0)
    assert sealed is not None and sealed.checkpoint_id == checkpoint_id
    assert done_keys(store) == ["a"]
    data, _ = backend.store_blobs().get(f"checkpoints/{checkpoint_id}/manifest.json")
    assert json.loads(data)["checkpoint_id"] == checkpoint_id
    assert backend.store().inspection.get_checkpoint(checkpoint_id) is not None  # another process sees it sealed


def test_create_if_absent_takes_the_place_of_an_empty_object_and_of_two_writers_one_wins(backend: Backend) -> None:
    """Every record the store creates has content, so an empty object at its key is an upload cut short on a
    server whose PUT is not atomic: a create-if-absent replaces it (If-Match on its etag). Content stays
    protected: a non-empty object still makes the create fail."""
    from airflow_ckpt_provider.store.errors import PreconditionFailedError

    blobs = backend.store_blobs()
    blobs.put("records/a.json", b"")
    blobs.put("records/a.json", b'{"v": 1}', if_absent=True)
    assert blobs.get("records/a.json")[0] == b'{"v": 1}'
    with pytest.raises(PreconditionFailedError):
        blobs.put("records/a.json", b'{"v": 2}', if_absent=True)
    assert blobs.get("records/a.json")[0] == b'{"v": 1}'
    # Many writers at once over one empty object: exactly one wins, the others lose as for any create.
    blobs.put("records/b.json", b"")
    outcomes: list[str] = []

    def create(n: int) -> None:
        try:
            backend.store_blobs().put("records/b.json", f'{{"writer": {n}}}'.encode(), if_absent=True)
            outcomes.append(f"won {n}")
        except PreconditionFailedError:
            outcomes.append("lost")

    threads = [threading.Thread(target=create, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [o for o in outcomes if o.startswith("won")]
    assert len(winners) == 1 and len(outcomes) == 6, outcomes
    assert json.loads(blobs.get("records/b.json")[0])["writer"] == int(winners[0].split()[1])


@pytest.mark.parametrize("record", ["epoch", "commit", "commit-done"])
def test_a_record_a_dead_process_left_empty_is_read_as_never_written_and_retaken(backend: Backend, record: str) -> None:
    """The process died while its upload of an epoch, commit or commit-done record was cut short, leaving it
    empty (a server whose PUT is not atomic). Readers take it for never written, and the next submit or the
    commit's retry writes it in full: no manual step, nothing deleted that should stay."""
    store = backend.store()
    first = begin(store, backend, owner="t")
    _, paths, _ = write_task(store, backend, epoch=first.number, partition=0, keys=["a"])
    store.epochs.end(first.number, status=EpochStatus.SUCCEEDED)
    blobs = backend.store_blobs()
    if record == "epoch":
        store.commit([backend.output_uri])
        blobs.put(f"epochs/{first.number + 1:08d}.json", b"")  # a submit died opening the next epoch
        assert (
            store.inspection.progress().epoch is not None and store.inspection.progress().epoch.number == first.number
        )
        assert store.inspection.check().ok, store.inspection.check().problems
        second = begin(store, backend, owner="t")
        assert second.number == first.number + 1
        assert json.loads(blobs.get(f"epochs/{second.number:08d}.json")[0])["epoch"] == second.number
        assert backend.store().epochs.current() is not None
        return
    if record == "commit":
        blobs.put(f"commits/{first.number:08d}.json", b"")  # the commit died writing its record
    else:
        store.commit([backend.output_uri])
        blobs.put(f"commits/{first.number:08d}.done.json", b"")  # ... or its done record, after the deletes
    assert done_keys(store) == ["a"]
    assert store.inspection.check().ok, store.inspection.check().problems
    assert not store.inspection.progress().committed
    result = store.commit([backend.output_uri])
    assert not result.already_committed
    assert [f.path for f in result.committed_files] == paths
    assert store.inspection.progress().committed
    assert json.loads(blobs.get(f"commits/{first.number:08d}.json")[0])["epoch"] == first.number
    assert blobs.get(f"commits/{first.number:08d}.done.json")[0]
    assert backend.output_names() == names(paths)


def test_truncated_key_file_is_a_typed_error(backend: Backend) -> None:
    from airflow_ckpt_provider.store.errors import CorruptCheckpointError

    store = backend.store()
    epoch = begin(store, backend, owner="t")
    # More keys than a manifest carries inline, so readers must read the key part.
    many = list(range(INLINE_MAX_KEYS + 1))
    checkpoint_id, _, sealed = write_task(store, backend, epoch=epoch.number, partition=0, keys=many)
    assert sealed is not None
    blobs = backend.store_blobs()
    key = f"attempts/{checkpoint_id}/{sealed.key_parts[0]}"
    data, _ = blobs.get(key)
    blobs.put(key, data[: len(data) // 3])
    with raises_reason(CorruptCheckpointError, "corrupt", match="truncated"):
        store.get_checkpointed_keys()
    assert key in backend.store_keys()


def test_no_epoch_commit_is_a_typed_error(backend: Backend) -> None:
    with raises_reason(InvalidArgumentError, "no_epoch"):
        backend.store().commit([backend.output_uri])


def test_small_checkpoints_are_read_from_the_manifest_alone(backend: Backend) -> None:
    store = backend.store()
    epoch = begin(store, backend, owner="t")
    small, _, _ = write_task(store, backend, epoch=epoch.number, partition=0, keys=["a", "b"])
    big, _, _ = write_task(store, backend, epoch=epoch.number, partition=1, keys=list(map(str, range(5000))))
    formats = sorted((s.format, s.key.split("/")[1]) for s in store.key_sources())
    assert formats == sorted([("manifest", small), ("arrow", big)])
    assert len(done_keys(store)) == 5002
    # The inline copy is exact: deleting the part does not change what a reader sees...
    backend.store_blobs().delete_many([f"attempts/{small}/keys/0000.arrow"])
    assert len(done_keys(store)) == 5002
    # ...but the consistency check reports the missing part.
    assert any("missing part" in p for p in store.inspection.check().problems)


def test_commit_record_is_the_authority_on_committed(backend: Backend) -> None:
    store = backend.store()
    epoch = begin(store, backend, owner="t")
    checkpoint_id, _, _ = write_task(store, backend, epoch=epoch.number, partition=0, keys=["a"])
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    store.commit([backend.output_uri])
    # One atomic record commits every checkpoint; every reader sees it.
    fresh = backend.store()
    got = fresh.inspection.get_checkpoint(checkpoint_id)
    assert got is not None and got.status is CheckpointStatus.COMMITTED
    assert [c.status for c in fresh.inspection.list_checkpoints()] == [CheckpointStatus.COMMITTED]
    assert fresh.get_checkpointed_files() == []


def test_file_metadata_roundtrip() -> None:
    meta = FileMetadata(path="s3://b/k.parquet", size_bytes=3, num_rows=2, format="parquet")
    assert FileMetadata.from_json(json.loads(json.dumps(meta.to_json()))) == meta


# ---------------------------------------------------------------- name intents (native Spark writes)


def _native_write(
    store: CheckpointStore, backend: Backend, *, epoch: int, marker: str, tasks: dict[str, tuple[int, list[str]]]
) -> dict[str, str]:
    """Play Spark's own writer: one name intent for the write, files named with ``marker``, sealed by the driver.

    ``tasks``: file name → (partition, keys); a partition with keys ``[]`` is written but never sealed.
    Returns file name → checkpoint id (None for unsealed files).
    """
    store.record_name_intent(new_checkpoint_id(), backend.output_uri, marker, epoch=epoch)
    owners: dict[str, str] = {}
    for name, (partition, keys) in tasks.items():
        path = backend.write_output(name, b"y" * 20)
        if not keys:
            continue
        checkpoint_id = new_checkpoint_id()
        store.stage_files(checkpoint_id, [FileMetadata(path=path, size_bytes=20, num_rows=len(keys))])
        store.stage_keys(checkpoint_id, keys)
        store.checkpoint(checkpoint_id, epoch=epoch, partition=partition)
        owners[name] = checkpoint_id
    return owners


def test_commit_deletes_orphans_of_a_native_write_by_its_name_marker(backend: Backend) -> None:
    store = backend.store()
    epoch = begin(store, backend, owner="t")
    marker = "-ckwA1B2C3D4E5F6-"
    good = {f"part-00000{marker}a0-1.parquet", f"x=1/part-00001{marker}a1-2.parquet"}
    _native_write(
        store,
        backend,
        epoch=epoch.number,
        marker=marker,
        tasks={
            f"part-00000{marker}a0-1.parquet": (0, ["k0"]),
            f"x=1/part-00001{marker}a1-2.parquet": (1, ["k1"]),
            f"part-00002{marker}a2-3.parquet": (2, []),  # the task failed after writing: never sealed
        },
    )
    # A duplicate attempt of partition 0 that sealed second (not valid).
    duplicate = f"part-00000{marker}a7-4.parquet"
    late = new_checkpoint_id()
    path = backend.write_output(duplicate, b"y" * 20)
    store.stage_files(late, [FileMetadata(path=path, size_bytes=20, num_rows=1)])
    store.stage_keys(late, ["k0"])
    store.checkpoint(late, epoch=epoch.number, partition=0)
    foreign = {"someone-elses.parquet", "part-00003-ckwOTHERWRITE00-a0-5.parquet"}
    for name in foreign:
        backend.write_output(name)
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)

    result = store.commit(unknown_files="keep")  # roots come from the name intent
    assert names(result.deleted_files) == {f"part-00002{marker}a2-3.parquet", duplicate}
    assert names(result.unknown_files) == names(sorted(foreign))
    assert backend.output_names() == good | foreign
    assert store.inspection.check().ok
    assert done_keys(store) == ["k0", "k1"]
    # The write's intent record is gone with the other unsealed directories; a second commit is a no-op.
    assert not [k for k in backend.store_keys() if k.endswith("intents/0000.json")]
    assert store.commit().already_committed


def test_degraded_commit_keeps_files_of_a_native_write_it_cannot_prove_orphaned(backend: Backend) -> None:
    store = backend.store()
    epoch = begin(store, backend, owner="t")
    marker = "-ckwDEGRADED0001-"
    tasks = {f"part-00000{marker}a0-1.parquet": (0, ["k0"]), f"part-00001{marker}a1-2.parquet": (1, [])}
    _native_write(store, backend, epoch=epoch.number, marker=marker, tasks=tasks)
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    result = store.commit(degraded=True)
    assert result.deleted_files == ()
    assert names(result.kept_unprovable) == {f"part-00001{marker}a1-2.parquet"}
    assert result.unknown_files == ()
    assert backend.output_names() == set(tasks)


def test_orphans_of_an_older_native_write_are_deleted_by_the_next_commit(backend: Backend) -> None:
    store = backend.store()
    first = begin(store, backend, owner="run1")
    old = "-ckwFIRSTWRITE01-"
    _native_write(
        store,
        backend,
        epoch=first.number,
        marker=old,
        tasks={f"part-00000{old}a0-1.parquet": (0, ["k0"]), f"part-00001{old}a1-2.parquet": (1, [])},
    )
    store.epochs.end(first.number, status=EpochStatus.FAILED)  # the driver died
    second = begin(store, backend, owner="run2")
    new = "-ckwSECONDWRITE1-"
    _native_write(store, backend, epoch=second.number, marker=new, tasks={f"part-00001{new}a0-3.parquet": (1, ["k1"])})
    store.epochs.end(second.number, status=EpochStatus.SUCCEEDED)
    result = store.commit()
    assert names(result.deleted_files) == {f"part-00001{old}a1-2.parquet"}
    assert backend.output_names() == {f"part-00000{old}a0-1.parquet", f"part-00001{new}a0-3.parquet"}
    assert done_keys(store) == ["k0", "k1"]


def test_discard_deletes_uncommitted_files_of_a_native_write_and_keeps_committed_ones(backend: Backend) -> None:
    store = backend.store()
    first = begin(store, backend, owner="run1")
    m1 = "-ckwCOMMITTED001-"
    _native_write(store, backend, epoch=first.number, marker=m1, tasks={f"part-00000{m1}a0-1.parquet": (0, ["k0"])})
    store.epochs.end(first.number, status=EpochStatus.SUCCEEDED)
    store.commit()
    second = begin(store, backend, owner="run2")
    m2 = "-ckwUNCOMMITTED1-"
    _native_write(
        store,
        backend,
        epoch=second.number,
        marker=m2,
        tasks={f"part-00001{m2}a0-2.parquet": (1, ["k1"]), f"part-00002{m2}a0-3.parquet": (2, [])},
    )
    result = store.housekeeping.discard_uncommitted()
    assert names(result.deleted_files) == {f"part-00001{m2}a0-2.parquet", f"part-00002{m2}a0-3.parquet"}
    assert backend.output_names() == {f"part-00000{m1}a0-1.parquet"}
    assert done_keys(store) == ["k0"]


def test_a_name_marker_must_be_a_unique_token(backend: Backend) -> None:
    store = backend.store()
    for bad in ["-short-", "has/slash-0123456789"]:
        with raises_reason(InvalidArgumentError, "out_of_range", match="unique token"):
            store.record_name_intent(new_checkpoint_id(), backend.output_uri, bad, epoch=1)
    assert backend.store_keys() == set()
