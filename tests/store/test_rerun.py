"""One output, one history (store/rerun.py): runs of the same job on one store, on both backends.

A "run" here is what the submit operator does: an epoch opened with the job in its metadata, tasks
that record intents, write and seal, then the commit and its retention policy. The Airflow-level
tests (tests/operators/test_rerun.py) drive the same through real DAG runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_ckpt_provider.plugins.task_view import build_task_store_view
from airflow_ckpt_provider.store import CheckpointStore, EpochStatus, RetentionPolicy, Selection
from airflow_ckpt_provider.store.rerun import JOB_METADATA_KEY, RerunAction
from tests.store.conftest import Backend
from tests.store.helpers import begin, done_keys, names, write_task

DAY = "dag/task/date=2024-06-01"
OTHER_DAY = "dag/task/date=2024-06-02"
KEYS = [["a", "b"], ["c"], ["d", "e"]]


def _run(
    store: CheckpointStore,
    backend: Backend,
    job: str,
    run_id: str,
    keys: Sequence[Sequence[str]] = KEYS,
    *,
    fail_at: int | None = None,
) -> tuple[int, set[str], set[str]]:
    """One submit: returns (epoch, names of sealed files, names of orphans)."""
    epoch = begin(store, backend, owner=f"{job}#{run_id}", metadata={JOB_METADATA_KEY: job, "run_id": run_id})
    done = set(done_keys(store))
    sealed: set[str] = set()
    orphans: set[str] = set()
    for partition, part in enumerate(keys):
        todo = [k for k in part if k not in done]
        if not todo:
            continue
        failing = partition == fail_at
        _, paths, _ = write_task(store, backend, epoch=epoch.number, partition=partition, keys=todo, seal=not failing)
        (orphans if failing else sealed).update(names(paths))
        if failing:
            break
    status = EpochStatus.FAILED if fail_at is not None else EpochStatus.SUCCEEDED
    store.epochs.end(epoch.number, status=status)
    return epoch.number, sealed, orphans


def _commit(store: CheckpointStore, backend: Backend, policy: RetentionPolicy) -> set[str]:
    result = store.commit([backend.output_uri])
    store.housekeeping.cleanup(policy)
    return names(result.replaced_files)


def test_a_rerun_of_committed_output_replaces_it(backend: Backend) -> None:
    store = backend.store()
    assert store.inspection.rerun_plan(DAY).action is RerunAction.FIRST
    _, first, _ = _run(store, backend, DAY, "run1")
    assert _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS) == set()

    plan = store.inspection.rerun_plan(DAY)
    assert (plan.action, plan.live_run, plan.live_files) == (RerunAction.REPLACE, "run1", 3)
    assert store.inspection.rerun_plan(DAY, "skip").action is RerunAction.SKIP
    _, second, _ = _run(store, backend, DAY, "run2")
    assert backend.output_names() == first | second  # both until the commit
    assert _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS) == first
    assert backend.output_names() == second  # a reader sees each key once, from the new run
    assert store.inspection.check().ok, store.inspection.check().problems
    # Once more (a Clear of the run that replaced it): the second run's files go, nothing else.
    _, third, _ = _run(store, backend, DAY, "run2")
    assert _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS) == second
    assert backend.output_names() == third and store.inspection.check().ok


def test_a_failed_rerun_is_resumed_and_its_commit_still_replaces(backend: Backend) -> None:
    store = backend.store()
    _, first, _ = _run(store, backend, DAY, "run1")
    _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS)
    _, sealed, orphans = _run(store, backend, DAY, "run2", fail_at=1)
    plan = store.inspection.rerun_plan(DAY)
    assert plan.action is RerunAction.RESUME
    # The failed run's sealed checkpoints are not the commit's: the resumed run's commit replaces its output.
    assert not plan.earlier_commits_live and plan.describe().startswith("live output: commit 1 by run run1")
    assert not store.inspection.rerun_plan(DAY, progress=store.inspection.progress()).earlier_commits_live
    _, rest, _ = _run(store, backend, DAY, "run3")
    result = store.commit([backend.output_uri])
    assert names(result.replaced_files) == first and names(result.deleted_files) == orphans
    assert backend.output_names() == sealed | rest
    assert done_keys(store) == ["a", "b", "c", "d", "e"] and store.inspection.check().ok


def test_retain_stays_incremental_and_another_job_is_never_replaced(backend: Backend) -> None:
    store = backend.store()
    _, first, _ = _run(store, backend, DAY, "run1")
    _commit(store, backend, RetentionPolicy.RETAIN)
    plan = store.inspection.rerun_plan(DAY)
    assert plan.action is RerunAction.INCREMENTAL
    assert plan.describe().startswith("newest commit 1 by run run1 (3 files, 5 rows; the earlier commits' output")
    assert plan.to_json()["earlier_commits_live"] is True
    _, second, _ = _run(store, backend, DAY, "run2", [["a", "b", "f"]])  # only the new key is processed
    assert _commit(store, backend, RetentionPolicy.RETAIN) == set()
    assert backend.output_names() == first | second
    # A third run of the day: the first two runs' output stays (both are folded into the snapshot).
    _, third, _ = _run(store, backend, DAY, "run3", [["a", "f", "g"]])
    assert _commit(store, backend, RetentionPolicy.RETAIN) == set()
    assert backend.output_names() == first | second | third
    assert done_keys(store) == ["a", "b", "c", "d", "e", "f", "g"] and store.inspection.check().ok
    # A run of the day failing halfway: the plan of its resume says the earlier commits' output stays live too.
    newest = store.inspection.rerun_plan(DAY).live_commit
    _run(store, backend, DAY, "run4", [["h"], ["i"]], fail_at=1)
    plan = store.inspection.rerun_plan(DAY)
    assert plan.action is RerunAction.RESUME and plan.earlier_commits_live
    assert store.inspection.rerun_plan(DAY, progress=store.inspection.progress()).earlier_commits_live
    assert plan.describe().startswith(f"newest commit {newest} by run run3 (1 files, 1 rows; the earlier commits'")


def test_another_job_on_a_shared_store_is_never_replaced(backend: Backend) -> None:
    store = backend.store()  # a store shared by days (a checkpoint_uri without the date)
    _, day_one, _ = _run(store, backend, DAY, "d1", [["x"]])
    _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS)
    assert store.inspection.rerun_plan(OTHER_DAY).action is RerunAction.FIRST
    _, day_two, _ = _run(store, backend, OTHER_DAY, "d2", [["y"]])
    assert _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS) == set()
    assert backend.output_names() == day_one | day_two
    assert store.inspection.rerun_plan(OTHER_DAY).action is RerunAction.REPLACE


def test_the_task_view_shows_the_committed_figures_and_what_a_rerun_does(backend: Backend) -> None:
    store = backend.store()
    _run(store, backend, DAY, "run1")
    view = build_task_store_view(store)
    assert view.progress["rerun"]["action"] == "resume" and view.progress["figures"] == "checkpoints"
    _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS)
    view = build_task_store_view(store)
    progress = view.progress
    assert progress["committed"] and progress["valid_checkpoints"] == 0  # retention deleted them...
    assert progress["figures"] == "committed"  # ...so the page shows what the commit made authoritative
    assert (progress["keys_done"], progress["sealed_partitions"], progress["files"], progress["rows"]) == (5, 3, 3, 5)
    assert progress["bytes"] > 0
    rerun = progress["rerun"]
    assert (rerun["action"], rerun["live_run"], rerun["job"]) == ("replace", "run1", DAY)
    assert "replaces the live output" in rerun["description"]


def test_after_clear_checkpoints_the_next_run_of_the_job_replaces_the_committed_output(backend: Backend) -> None:
    """Clear checkpoints keeps committed output and makes every key pending; the next run of the job
    writes every key again, and its commit retracts the output it re-did instead of refusing it as
    unknown files or keeping both (a plain reader sees each key once)."""
    store = backend.store()
    _, first, _ = _run(store, backend, DAY, "run1")
    _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS)
    store.housekeeping.clear()
    assert backend.output_names() == first  # clear never deletes committed output
    assert done_keys(store) == []
    _, second, _ = _run(store, backend, DAY, "run2")
    assert _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS) == first
    assert backend.output_names() == second
    assert store.inspection.check().ok, store.inspection.check().problems


def test_a_reprocess_never_counts_output_a_rerun_replaced(backend: Backend) -> None:
    """A commit whose files a re-run of its job replaced no longer counts for the output: selecting
    it plans nothing, instead of checkpoints, rows and files that are gone already."""
    store = backend.store()
    _run(store, backend, DAY, "run1")
    _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS)
    _, second, _ = _run(store, backend, DAY, "run2")
    _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS)

    stale = store.reprocessing.preview(Selection(commits=(1,)))
    assert (stale.checkpoints, stale.files, stale.refused_paths, stale.new_epoch) == ((), (), (), None)
    live = store.reprocessing.preview(Selection(commits=(2,)))
    assert len(live.checkpoints) == len(KEYS) and all(f.present for f in live.files)
    assert names([f.path for f in live.files] + list(live.refused_paths)) == second
