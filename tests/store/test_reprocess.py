"""Reprocess, rewind, undo and purge through the store API, on local disk and the real S3 server.

Each test writes committed runs as Spark tasks would (intent, file, keys, seal; commit; retention)
and checks what a reader of the store and a reader of the output see afterwards. The Spark and
Airflow versions of these scenarios are in tests/spark and tests/airflow.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from airflow_ckpt_provider import failpoints
from airflow_ckpt_provider.store import EpochStatus, ReprocessPlan, RetentionPolicy, Selection
from airflow_ckpt_provider.store.errors import RefusedError
from tests.store.conftest import Backend
from tests.store.helpers import done_keys
from tests.store.reprocess_helpers import Picture, name, quarantined_names, rerun_pending, run_and_commit
from tests.support.errors import raises_reason

PARTITIONS = [["a1", "a2", "a3"], ["b1", "b2"], ["c1", "c2", "c3", "c4"], ["d1"]]


@pytest.fixture(autouse=True)
def _no_failpoints() -> None:
    failpoints.disable_all()


@pytest.fixture(params=["compacted", "loose"])
def retention(request: pytest.FixtureRequest) -> RetentionPolicy | None:
    """``compacted``: the retain policy folded the keys into a snapshot (manifests deleted);
    ``loose``: committed, no retention ran yet (the manifests are there)."""
    return RetentionPolicy.RETAIN if request.param == "compacted" else None


# ---------------------------------------------------------------- preview


def test_preview_counts_exactly_and_changes_nothing(backend: Backend, retention: RetentionPolicy | None) -> None:
    store = backend.store()
    run = run_and_commit(store, backend, PARTITIONS, policy=retention, files=2)
    before = Picture.take(backend)

    plan = store.reprocessing.preview(Selection(keys=["a2", "c4", "c1"]))

    assert isinstance(plan, ReprocessPlan)
    selected = {run.checkpoint_of("a2"), run.checkpoint_of("c4")}
    assert set(plan.checkpoints) == selected
    assert plan.keys == 3 + 4  # whole checkpoints: every key of both becomes pending
    expected_files = sorted(p for cid in selected for p in run.files[cid])
    assert sorted(f.path for f in plan.files) == expected_files
    assert plan.bytes == sum(f.size_bytes for f in plan.files) == 2 * (10 + 11)
    assert plan.epoch == run.epoch and plan.missing_files == ()
    assert all(f.quarantine.startswith(f"quarantine/{run.epoch + 1:08d}/") for f in plan.files)
    text = plan.describe()
    assert "2 checkpoint(s)" in text and "7 key(s)" in text and "4 file(s)" in text
    assert Picture.take(backend) == before  # a dry run writes nothing, anywhere


# ---------------------------------------------------------------- reprocess by keys


def test_reprocess_by_keys_then_next_run_then_exactly_once(backend: Backend, retention: RetentionPolicy | None) -> None:
    store = backend.store()
    run = run_and_commit(store, backend, PARTITIONS, policy=retention)
    selected = [run.checkpoint_of(k) for k in ("a1", "b2", "d1")]
    retracted = sorted(p for cid in selected for p in run.files[cid])
    redo = sorted(k for cid in selected for k in run.checkpoints[cid])

    result = store.reprocessing.run(Selection(keys=["a1", "b2", "d1"]))

    assert result.epoch == run.epoch + 1 and not result.plan.nothing_to_do
    assert sorted(result.moved) == retracted and result.deleted == () and result.missing == ()
    # The checkpoints holding the keys are pending again: every key of theirs, nothing else.
    assert done_keys(store) == sorted(set(run.keys) - set(redo))
    # Their files left the output and wait in the quarantine, byte for byte.
    assert backend.output_names() == {name(p) for p in run.all_files} - {name(p) for p in retracted}
    assert quarantined_names(backend) == {name(p) for p in retracted}
    assert store.inspection.check().ok, store.inspection.check()
    epoch = store.epochs.current()
    assert epoch is not None and epoch.status is EpochStatus.RETRACTED

    # The next run processes exactly those keys; after its commit every key is there once.
    rerun = rerun_pending(store, backend, redo)
    assert done_keys(store) == sorted(run.keys)
    kept = {name(p) for p in run.all_files} - {name(p) for p in retracted}
    assert backend.output_names() == kept | {name(p) for p in rerun.all_files}
    committed = store.commit([backend.output_uri])  # already committed: idempotent
    assert committed.already_committed and {f.path for f in committed.committed_files} >= set(rerun.all_files)
    report = store.inspection.check()
    assert report.ok, report


def test_undo_before_the_next_run_restores_files_and_checkpoints_exactly(
    backend: Backend, retention: RetentionPolicy | None
) -> None:
    store = backend.store()
    run = run_and_commit(store, backend, PARTITIONS, policy=retention, files=2)
    before = Picture.take(backend)
    keys_before = done_keys(store)
    valid_before = sorted(c.checkpoint_id for c in store.inspection.valid_checkpoints())
    status_before = {c.checkpoint_id: c.status for c in store.inspection.valid_checkpoints()}

    store.reprocessing.run(Selection(keys=["c2"]))
    assert done_keys(store) != keys_before
    undone = store.reprocessing.undo()

    assert sorted(undone.restored) == sorted(run.files[run.checkpoint_of("c2")])
    assert done_keys(store) == keys_before
    assert sorted(c.checkpoint_id for c in store.inspection.valid_checkpoints()) == valid_before
    assert {c.checkpoint_id: c.status for c in store.inspection.valid_checkpoints()} == status_before
    after = Picture.take(backend)
    assert after.output == before.output  # every file back, same bytes
    assert store.inspection.progress().keys_done == len(keys_before)
    assert store.inspection.check().ok, store.inspection.check()
    # Undo keeps the quarantine copies until purge; purge deletes exactly them.
    assert quarantined_names(backend) == {name(p) for p in run.files[run.checkpoint_of("c2")]}
    purged = store.reprocessing.purge()
    assert quarantined_names(backend) == set() and len(purged.purged) == 2
    # And the store goes on as before: a new run skips every key, commits, check is clean.
    rerun_pending(store, backend, [])
    assert done_keys(store) == keys_before and store.inspection.check().ok


def test_undo_is_refused_after_the_next_run_began(backend: Backend) -> None:
    store = backend.store()
    run = run_and_commit(store, backend, PARTITIONS)
    store.reprocessing.run(Selection(keys=["a1"]))
    rerun_pending(store, backend, run.checkpoints[run.checkpoint_of("a1")], commit=False)
    before = Picture.take(backend)
    with raises_reason(RefusedError, "undo_unavailable", match="after"):
        store.reprocessing.undo()
    assert Picture.take(backend) == before


def test_delete_instead_of_quarantine_cannot_be_undone(backend: Backend) -> None:
    store = backend.store()
    run = run_and_commit(store, backend, PARTITIONS)
    result = store.reprocessing.run(Selection(keys=["b1"]), delete=True)
    files = run.files[run.checkpoint_of("b1")]
    assert sorted(result.deleted) == sorted(files) and result.moved == ()
    assert quarantined_names(backend) == set()
    assert not {name(p) for p in files} & backend.output_names()
    before = Picture.take(backend)
    with raises_reason(RefusedError, "undo_unavailable", match="deleted"):
        store.reprocessing.undo()
    assert Picture.take(backend) == before
    assert store.inspection.check().ok


def test_purge_while_undo_is_possible_fences_and_then_undo_is_refused(backend: Backend) -> None:
    store = backend.store()
    run_and_commit(store, backend, PARTITIONS)
    first = store.reprocessing.run(Selection(keys=["a1"]))
    purged = store.reprocessing.purge(first.epoch)
    assert purged.epoch == first.epoch + 1  # a fencing epoch: undo and purge never interleave
    assert quarantined_names(backend) == set()
    with raises_reason(RefusedError, "undo_unavailable"):
        store.reprocessing.undo(first.epoch)
    records = {r.epoch: r for r in store.reprocessing.records()}
    assert records[first.epoch].purged and not records[first.epoch].undone
    assert store.inspection.check().ok
    assert store.reprocessing.purge(first.epoch).purged == ()  # idempotent


# ---------------------------------------------------------------- other selections


def test_select_by_epoch_commit_and_time(backend: Backend) -> None:
    store = backend.store()
    first = run_and_commit(store, backend, [["k1"], ["k2"]])
    time.sleep(0.05)
    middle = dt.datetime.now(dt.UTC)
    time.sleep(0.05)
    second = run_and_commit(store, backend, [["k3"], ["k4"], ["k5"]])

    by_epoch = store.reprocessing.preview(Selection(epochs=[first.epoch]))
    assert set(by_epoch.checkpoints) == set(first.checkpoints)
    by_commit = store.reprocessing.preview(Selection(commits=[second.epoch]))
    assert set(by_commit.checkpoints) == set(second.checkpoints)
    after = store.reprocessing.preview(Selection(sealed_after=middle))
    assert set(after.checkpoints) == set(second.checkpoints)
    before = store.reprocessing.preview(Selection(sealed_before=middle))
    assert set(before.checkpoints) == set(first.checkpoints)
    both = store.reprocessing.preview(Selection(keys=["k1", "k4"], sealed_after=middle))  # criteria intersect
    assert set(both.checkpoints) == {second.checkpoint_of("k4")}

    store.reprocessing.run(Selection(commits=[second.epoch]))
    assert done_keys(store) == ["k1", "k2"]
    assert backend.output_names() == {name(p) for p in first.all_files}


@pytest.mark.parametrize("selection", ["commit", "time", "rewind"])
def test_a_commit_without_its_lineage_is_a_typed_error_and_nothing_changes(backend: Backend, selection: str) -> None:
    """Every commit writes its lineage (which checkpoint wrote which file) before its record; a store where one
    is missing (damaged, or a format no release wrote) refuses the selections that need it, naming the file."""
    from airflow_ckpt_provider.store.errors import CorruptCheckpointError

    store = backend.store()
    first = run_and_commit(store, backend, [["k1"], ["k2"]])
    second = run_and_commit(store, backend, [["k3"]])
    blobs = backend.store_blobs()
    key = f"lineage/{first.epoch:08d}.parquet"
    assert blobs.exists(key)
    blobs.delete_many([key])
    before = Picture.take(backend)
    chosen = {
        "commit": lambda: store.reprocessing.run(Selection(commits=[first.epoch])),
        "time": lambda: store.reprocessing.run(Selection(sealed_before=dt.datetime.now(dt.UTC))),
        "rewind": lambda: store.reprocessing.rewind(0),
    }[selection]
    with raises_reason(CorruptCheckpointError, "corrupt", match=key):
        chosen()
    assert Picture.take(backend) == before and done_keys(store) == ["k1", "k2", "k3"]
    assert second.epoch > first.epoch


def test_file_keys_select_the_checkpoints_that_read_them(backend: Backend) -> None:
    """File keys are normalized input URIs: a plain path or file:/ form names the same key."""
    store = backend.store()
    landing = "/data/landing"
    run = run_and_commit(
        store,
        backend,
        [[f"file://{landing}/f1.parquet"], [f"file://{landing}/f2.parquet", f"file://{landing}/f3.parquet"]],
    )
    plan = store.reprocessing.preview(Selection(files=[f"{landing}/./f3.parquet"]))
    assert set(plan.checkpoints) == {run.checkpoint_of(f"file://{landing}/f3.parquet")}
    assert plan.keys == 2


def test_reprocess_retracts_committed_output_of_a_delete_after_success_store(backend: Backend) -> None:
    """After delete_after_success the store holds no keys (the next run redoes everything), but
    the committed output is still there: a reprocess by commit takes it away, so the rerun does
    not duplicate it."""
    store = backend.store()
    run = run_and_commit(store, backend, PARTITIONS, policy=RetentionPolicy.DELETE_AFTER_SUCCESS)
    assert done_keys(store) == []
    plan = store.reprocessing.preview(Selection(commits=[run.epoch]))
    assert sorted(f.path for f in plan.files) == run.all_files and plan.keys == 0
    store.reprocessing.run(Selection(commits=[run.epoch]))
    assert backend.output_names() == set()
    rerun = rerun_pending(store, backend, run.keys)
    assert backend.output_names() == {name(p) for p in rerun.all_files}
    assert store.inspection.check().ok


# ---------------------------------------------------------------- rewind


def test_rewind_to_commit_2_of_4(backend: Backend, retention: RetentionPolicy | None) -> None:
    store = backend.store()
    runs = [
        run_and_commit(store, backend, [[f"r{i}p{p}k{k}" for k in range(3)] for p in range(2)], policy=retention)
        for i in range(1, 5)
    ]
    later_keys = sorted(k for run in runs[2:] for k in run.keys)
    later_files = sorted(p for run in runs[2:] for p in run.all_files)

    plan = store.reprocessing.preview_rewind(runs[1].epoch)
    assert sorted(f.path for f in plan.files) == later_files and plan.keys == len(later_keys)
    store.reprocessing.rewind(runs[1].epoch)

    assert done_keys(store) == sorted(k for run in runs[:2] for k in run.keys)
    assert backend.output_names() == {name(p) for run in runs[:2] for p in run.all_files}
    assert quarantined_names(backend) == {name(p) for p in later_files}
    assert store.inspection.check().ok, store.inspection.check()
    rerun = rerun_pending(store, backend, later_keys)
    assert done_keys(store) == sorted(k for run in runs for k in run.keys)
    kept = {name(p) for run in runs[:2] for p in run.all_files}
    assert backend.output_names() == kept | {name(p) for p in rerun.all_files} and store.inspection.check().ok


def test_rewind_to_the_latest_commit_is_nothing_to_do(backend: Backend) -> None:
    store = backend.store()
    run = run_and_commit(store, backend, PARTITIONS)
    before = Picture.take(backend)
    plan = store.reprocessing.preview_rewind(run.epoch)
    assert plan.nothing_to_do and "Nothing" in plan.describe()
    result = store.reprocessing.rewind(run.epoch)
    assert result.epoch is None and Picture.take(backend) == before  # no fencing epoch either


def test_list_reprocesses_tells_the_history(backend: Backend) -> None:
    store = backend.store()
    run = run_and_commit(store, backend, PARTITIONS)
    first = store.reprocessing.run(Selection(keys=["a1"]), requested_by="alice")
    store.reprocessing.undo()
    second = store.reprocessing.rewind(run.epoch - 1 if run.epoch > 1 else 0)
    history = store.reprocessing.records()
    assert [(r.epoch, r.action) for r in history] == [(first.epoch, "reprocess"), (second.epoch, "rewind")]
    assert history[0].undone and history[0].requested_by == "alice" and history[0].files == 1
    assert not history[1].undone and history[1].finished
