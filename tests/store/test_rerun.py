"""One output, one history (store/rerun.py): runs of the same job on one store, on both backends.

A "run" here is what every caller does (the operators, ``CheckpointedJob`` without Airflow, a direct caller):
an epoch opened for a job (or for none: the store's one output), tasks that record intents, write and seal, then
the commit and its retention policy. The plan and what the commit replaces follow from the store's history
alone. The Airflow-level tests (tests/operators/test_rerun.py) drive the same through real DAG runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from airflow_ckpt_provider import failpoints
from airflow_ckpt_provider.plugins.task_view import build_task_store_view
from airflow_ckpt_provider.store import (
    CheckpointStore,
    EpochStatus,
    InvalidArgumentError,
    RefusedError,
    RetentionPolicy,
    Selection,
)
from airflow_ckpt_provider.store.rerun import DEFAULT_JOB, JOB_METADATA_KEY, RerunAction
from tests.store.conftest import Backend
from tests.store.helpers import done_keys, names, write_task

DAY = "dag/task/date=2024-06-01"
OTHER_DAY = "dag/task/date=2024-06-02"
KEYS = [["a", "b"], ["c"], ["d", "e"]]


def _run(
    store: CheckpointStore,
    backend: Backend,
    job: str | None,
    run_id: str,
    keys: Sequence[Sequence[str]] = KEYS,
    *,
    fail_at: int | None = None,
    directory: str = "",
) -> tuple[int, set[str], set[str]]:
    """One submit of ``job`` (None: a caller naming none), writing under ``directory`` of the output root (declared
    as the run's output root): returns (epoch, names of sealed files, names of orphans)."""
    roots = [f"{backend.output_uri}/{directory}" if directory else backend.output_uri]
    epoch = store.epochs.begin(job=job, owner=f"{job}#{run_id}", metadata={"run_id": run_id}, output_roots=roots)
    done = set(done_keys(store))
    sealed: set[str] = set()
    orphans: set[str] = set()
    for partition, part in enumerate(keys):
        todo = [k for k in part if k not in done]
        if not todo:
            continue
        failing = partition == fail_at
        _, paths, _ = write_task(
            store, backend, epoch=epoch.number, partition=partition, keys=todo, seal=not failing, directory=directory
        )
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


def test_a_caller_naming_no_job_replaces_the_stores_committed_output(backend: Backend) -> None:
    """The store API without Airflow (what ``CheckpointedJob`` does): runs that name no job are runs of the
    store's one output. Re-run after a ``delete_after_success`` commit, the second commit retracts the first
    one's files: a reader sees each key once (before the fix it saw both copies, and nothing warned)."""
    store = backend.store()
    _, first, _ = _run(store, backend, None, "run1")
    assert store.epochs.current().job == DEFAULT_JOB  # type: ignore[union-attr]
    assert _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS) == set()
    plan = store.inspection.rerun_plan()
    assert (plan.action, plan.job, plan.live_job, plan.live_files) == (RerunAction.REPLACE, DEFAULT_JOB, DEFAULT_JOB, 3)
    assert store.inspection.rerun_plan(None, "skip").action is RerunAction.SKIP
    _, second, _ = _run(store, backend, None, "run2")
    assert _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS) == first
    assert backend.output_names() == second
    # No retention at all: the committed keys still count, the next run is incremental and adds only new keys.
    _, third, _ = _run(store, backend, None, "run3")
    store.commit([backend.output_uri])
    assert store.inspection.rerun_plan().action is RerunAction.INCREMENTAL
    _, fourth, _ = _run(store, backend, None, "run4", [["a", "z"]])
    assert names(store.commit([backend.output_uri]).replaced_files) == set() and len(fourth) == 1
    assert backend.output_names() == third | fourth and store.inspection.check().ok


def test_a_job_is_named_by_its_argument_only(backend: Backend) -> None:
    store = backend.store()
    for bad in ({"job": "x"}, None):
        with pytest.raises(InvalidArgumentError) as caught:
            store.epochs.begin(job="" if bad is None else None, metadata=bad)
        assert caught.value.reason == "job"
    assert store.epochs.current() is None  # nothing was opened


@pytest.mark.parametrize("point", ["store.cleanup.start", "store.cleanup.after_checkpoints"])
def test_a_delete_after_success_cut_short_still_makes_the_next_run_replace(backend: Backend, point: str) -> None:
    """Whether the committed keys were kept is read from the store's history, not from the checkpoints a cleanup left:
    ``delete_after_success`` records it before deleting anything. A cleanup that crashed (and was never run
    again) leaves no key counted: the next run re-does every key (its input may have changed: the reason to
    re-run a day) and its commit replaces the committed output. Before the fix the plan said incremental and
    the re-run skipped every key the crash left behind."""
    store = backend.store()
    _, first, _ = _run(store, backend, DAY, "run1")
    store.commit([backend.output_uri])
    failpoints.enable(point, kind="raise", hit=1)
    try:
        with pytest.raises(failpoints.InjectedFault):
            store.housekeeping.cleanup(RetentionPolicy.DELETE_AFTER_SUCCESS)
    finally:
        failpoints.disable_all()
    assert done_keys(store) == [] and store.inspection.progress().keys_done == 0
    assert store.inspection.rerun_plan(DAY).action is RerunAction.REPLACE
    _, second, _ = _run(store, backend, DAY, "run2")
    assert len(second) == len(KEYS) and store.epochs.current().base == ()  # type: ignore[union-attr]
    result = store.commit([backend.output_uri])
    assert names(result.replaced_files) == first and backend.output_names() == second
    assert done_keys(store) == ["a", "b", "c", "d", "e"] and store.inspection.check().ok


def _forget_jobs(backend: Backend, epoch: int) -> None:
    """Rewrite epoch ``epoch``'s records as a store of an earlier layout holds them: naming no job."""
    blobs = backend.store_blobs()
    for key, field in ((f"commits/{epoch:08d}.json", None), (f"epochs/{epoch:08d}.json", "metadata")):
        record = json.loads(blobs.get(key)[0])
        (record if field is None else record[field]).pop(JOB_METADATA_KEY)
        blobs.put(key, json.dumps(record).encode())


def test_a_commit_refuses_live_output_it_cannot_attribute_and_keeps_it_only_when_asked(backend: Backend) -> None:
    """A commit of an earlier layout names no job: the store cannot tell whether its live files are an earlier
    copy of this run's output. The next commit refuses (typed, the files named, nothing committed or deleted)
    rather than publish possible duplicates; kept knowingly, they stay for good and are never asked about again."""
    store = backend.store()
    _, first, _ = _run(store, backend, DAY, "run1")
    _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS)
    _forget_jobs(backend, 1)
    plan = store.inspection.rerun_plan(DAY)
    assert plan.action is RerunAction.FIRST and plan.live_job is None and "names no job" in plan.describe()
    epoch, second, _ = _run(store, backend, DAY, "run2")
    with pytest.raises(RefusedError) as caught:
        store.commit([backend.output_uri])
    assert caught.value.reason == "earlier_output_live" and names(caught.value.paths) == first
    assert "commit 1 (a commit that names no job" in str(caught.value) and 'unknown_files="keep"' in str(caught.value)
    assert backend.output_names() == first | second and not backend.store_blobs().exists(f"commits/{epoch:08d}.json")
    result = store.commit([backend.output_uri], unknown_files="keep")
    assert names(result.kept_earlier_files) == first and result.replaced_files == ()
    store.housekeeping.cleanup(RetentionPolicy.DELETE_AFTER_SUCCESS)
    _, third, _ = _run(store, backend, DAY, "run3")  # the kept files are output now: only run2's are replaced
    assert _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS) == second
    assert backend.output_names() == first | third and store.inspection.check().ok


def test_files_moved_away_are_no_duplicates(backend: Backend) -> None:
    store = backend.store()
    _, first, _ = _run(store, backend, DAY, "run1")
    _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS)
    _forget_jobs(backend, 1)
    _, second, _ = _run(store, backend, DAY, "run2")
    backend.output_blobs().delete_many(sorted(first))  # the way out the refusal names: move them away
    assert names(store.commit([backend.output_uri]).kept_earlier_files) == set()
    assert backend.output_names() == second


def test_a_run_naming_no_job_over_a_named_jobs_output_is_refused_with_the_job_to_name(backend: Backend) -> None:
    """A run by hand (no job) over output an Airflow task committed (its job named): one side named no job, so
    the store cannot tell a re-run from another output. The commit refuses and names the job that would make the
    run a replace; the run re-done as that job replaces the output."""
    store = backend.store()
    _, first, _ = _run(store, backend, DAY, "run1")
    _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS)
    plan = store.inspection.rerun_plan()
    assert plan.action is RerunAction.FIRST and plan.another_job_live and "name the job" in plan.describe()
    _run(store, backend, None, "by-hand")
    with pytest.raises(RefusedError) as caught:
        store.commit([backend.output_uri])
    assert caught.value.reason == "earlier_output_live" and f"job={DAY!r}" in str(caught.value)
    store.housekeeping.discard_uncommitted()
    _, again, _ = _run(store, backend, DAY, "by-hand")
    assert names(store.commit([backend.output_uri]).replaced_files) == first and backend.output_names() == again


def test_runs_writing_other_directories_never_retract_each_others_output(backend: Backend) -> None:
    """A store shared by runs that name no job but write disjoint directories (a date each): a commit retracts
    earlier output only where its run writes, so the second date never takes the first date's files; a re-run of
    the first date replaces that date's files only."""
    store = backend.store()
    _, june1, _ = _run(store, backend, None, "d1", [["x"]], directory="date=06-01")
    _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS)
    _, june2, _ = _run(store, backend, None, "d2", [["y"]], directory="date=06-02")
    assert _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS) == set()
    _, again, _ = _run(store, backend, None, "d1-again", [["x"]], directory="date=06-01")
    assert _commit(store, backend, RetentionPolicy.DELETE_AFTER_SUCCESS) == names(sorted(june1))
    assert {n.rsplit("/", 1)[-1] for n in backend.output_names()} == june2 | again
    assert store.inspection.check().ok
