"""Histories of one store: a seeded slice of the state machine in ``ckpt_testkit.histories``,
and the reprocess-loss reproductions as explicit histories (they lost keys before the fix).

The machine's oracle after every step: a successful run processes exactly the pending input keys,
the store's done keys are the model's, and a plain pyarrow reader sees the rows of the done keys once
each. The large run is ``python -m bench.histories`` (bench/results/histories.txt).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import run_state_machine_as_test
from pyspark.sql import SparkSession

from ckpt_testkit import histories
from ckpt_testkit.faults.settings import CampaignSettings
from ckpt_testkit.histories import MODES, TALLY, StoreHistory, histories_of, history_steps, use_s3, use_session
from tests.spark.helpers import wait_for

pytestmark = pytest.mark.spark

#: Seeded CI slice: 2 histories of up to 5 steps after the first run for each key kind (a history takes 10-40 s
#: on 2 busy cores); the operations it may miss are covered by the history through every operation below.
SLICE = settings(
    max_examples=2,
    stateful_step_count=5,
    deadline=None,
    database=None,
    derandomize=False,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)
SEED = 20261127
#: The Connect slice's seed: here it drew file and unique row keys, failed runs, new input, discard and reprocess
#: (what a seed draws varies between runs: a failed run's progress depends on which tasks finished first).
CONNECT_SEED = 20261129


@pytest.fixture(scope="module", autouse=True)
def _session(spark: SparkSession) -> Iterator[None]:
    use_session(spark)
    yield


def _history(mode: str, orders: int, engine: str = "spark") -> StoreHistory:
    machine = StoreHistory()
    machine.start(mode, engine, orders)
    return machine


Step = str | tuple[str, Any] | Callable[[StoreHistory], None]


def _steps(machine: StoreHistory, *steps: Step) -> None:
    """Run ``steps`` (a rule's name; its name and argument, the argument possibly a function of the machine;
    or a function of the machine), checking the oracle after each."""
    try:
        for step in steps:
            if callable(step):
                step(machine)
            else:
                name, *argument = (step,) if isinstance(step, str) else step
                if argument and callable(argument[0]):
                    argument = [argument[0](machine)]
                getattr(machine, name)(*argument)
            machine.store_and_output_agree_with_the_model()
    finally:
        machine.teardown()


def test_reprocess_a_key_after_an_incremental_run_then_by_the_first_commit() -> None:
    """Reprocess data loss, reproductions 1 and 2 (row keys grouped at the source): the reruns processed 0 keys."""
    machine = _history("grouped", orders=12)
    first = ("reprocess_by_commit", 1)  # the first run is epoch 1, so its commit is commit 1
    _steps(
        machine,
        "run",
        "commit",
        ("new_input_file", 2),
        "run",
        "commit",
        ("reprocess_one_key", "o-0007"),
        "run",
        "commit",
        first,
        "run",
        "commit",
        "run",
    )


@pytest.mark.parametrize("mode", ["unique", "grouped"])
def test_reprocess_by_commit_after_a_run_with_nothing_pending_on_a_retain_store(mode: str) -> None:
    """Reprocess data loss, reproduction 3: a run with nothing pending vouched for input it had read anti-joined."""
    machine = _history(mode, orders=10)
    _steps(machine, "run", "commit", "retain_cleanup", "run", ("reprocess_by_commit", 1), "run", "commit")


def test_a_third_incremental_commit_keeps_the_output_of_the_first() -> None:
    """Data loss found by the TaskFlow redo DAG test (session 27): the ``retain`` snapshot's manifest names only
    the checkpoints its latest fold added, so the third commit of a job took the first commit's checkpoints
    for gone and retracted its files as replaced. A reader must see every done key once after each commit."""
    machine = _history("unique", orders=4)
    grow = ("new_input_file", 2)
    _steps(machine, "run", "commit", "retain_cleanup", grow, "run", "commit", "retain_cleanup", grow, "run", "commit")


def test_undo_after_a_rewind_with_nothing_to_do_undoes_the_rewind_before_it() -> None:
    """Found by the large run (both processes, shrunk): a rewind to a commit with nothing after it records
    nothing (result epoch None), so the undo that follows restores what the earlier rewind made pending."""
    machine = _history("grouped", orders=4)
    _steps(machine, "run", "commit", ("rewind_to", 0), ("rewind_to", 0), "undo", "run", "commit")


@pytest.mark.parametrize("mode", MODES)
def test_a_caller_naming_no_job_reruns_a_committed_store_without_duplicates(mode: str) -> None:
    """``CheckpointedJob`` opening its own epoch and naming no job (docs/spark.md, "Without Airflow"),
    every key mode, on one store and output: after every commit a plain reader sees each done key's rows once.
    A re-run after ``delete_after_success`` replaces the committed output (before the fix: both copies); without
    retention and under ``retain`` runs stay incremental and keep the earlier commits' output; a
    ``delete_after_success`` cut short by a crash and never run again still makes the next run replace."""
    machine = StoreHistory()
    machine.start(mode, "spark", 4, caller="library")
    _steps(
        machine,
        "run",
        "commit",
        "delete_after_success",
        "run",  # replace
        "commit",
        ("new_input_file", 1),
        "run",  # no retention: incremental
        "commit",
        lambda m: m.another_day(1, 1),  # retain: incremental
        _armed("store.cleanup.after_checkpoints", "delete_after_success"),
        "run",  # replace, though the cleanup was cut short
        "commit",
    )


def _first_file(machine: StoreHistory) -> object:
    return sorted(machine.done, key=str)[0]


def _latest_run(machine: StoreHistory) -> int:
    return max(machine.done.values())


@pytest.mark.s3
@pytest.mark.faults
def test_every_operation_on_s3_with_file_keys_and_crashes(s3_options: dict[str, Any], s3_bucket: str) -> None:
    """One history through every operation of the machine with the store on the S3 server (file keys; the
    reproductions above are row keys): failed run, run, commit, reprocess by file / time / epoch / commit,
    undo, purge, new input, rewind, retain, discard, delete_after_success and the re-run that replaces the
    committed output, another day of the job, clear. Seven of its steps crash at a driver-side failpoint (the
    fault campaign's histories: a crash at step k, not on a fresh store) and are recovered as documented (the
    same call again, or ``reprocessing.resume``; a ``delete_after_success`` cleanup is left cut short) before the
    oracle judges them."""
    use_s3(s3_options, s3_bucket)
    before, steps_before = dict(TALLY.crashes), Counter(TALLY.steps)
    machine = StoreHistory()
    machine.start("files", "spark", 6, on_s3=True)
    assert machine.on_s3
    _steps(
        machine,
        ("fail_on", _first_file_pending),
        "run",
        _armed("store.commit.between_phases", "commit"),
        _armed("store.reprocess.after_move", "reprocess_input_file", _first_file),
        _armed("store.undo.after_restore", "undo"),
        ("reprocess_by_epoch_time", _latest_run),
        _armed("store.purge.before_end", "purge"),
        ("new_input_file", 2),
        _armed("store.begin_epoch.after_create", "run"),
        "commit",
        ("rewind_to", lambda m: m.commits[0]),  # the keys of the run after the first commit become pending
        ("reprocess_by_epoch", _latest_run),  # and the first run's
        "run",
        "commit",
        _armed("store.cleanup.after_snapshot_keys", "retain_cleanup"),
        ("reprocess_by_commit", lambda m: m.commits[-1]),
        ("fail_on", _first_file_pending),
        "discard_uncommitted",
        "run",
        "commit",
        _armed("store.cleanup.start", "delete_after_success"),  # left cut short: the next run replaces all the same
        "run",
        "commit",
        lambda m: m.another_day(1, 2),
        "clear",
    )
    fired = {p for p, n in TALLY.crashes.items() if n > before.get(p, 0)}
    assert len(fired) == 7, fired
    # Every operation the machine has ran here (none refused), but the key reprocess, which needs row keys:
    # the first reproduction above runs it. Counted by this test alone, so it holds in any order or worker.
    ran = TALLY.steps - steps_before
    missing = [name for name in history_steps() if not ran[name] and name != "reprocess_key"]
    assert not missing, f"operations this history did not run: {missing}"


def _first_file_pending(machine: StoreHistory) -> object:
    return sorted(machine._input_keys() - set(machine.done), key=str)[0]


@pytest.mark.s3
@pytest.mark.parametrize(
    ("modes", "on_s3"),
    [(("files",), None), (("grouped", "unique", "composite"), True)],
    ids=["file-keys", "row-keys-s3"],
)
def test_random_histories(
    s3_options: dict[str, Any], s3_bucket: str, modes: tuple[str, ...], on_s3: bool | None
) -> None:
    """A seeded slice of random histories over the key modes (file keys on either store, row keys with the
    store on the S3 server), both writers and every operation; then the slice's own report (what this test
    ran, whatever ran before it in this process): its histories took steps beyond their first run, on these
    modes only. Which operations the seed draws varies; the history through every operation above runs all."""
    use_s3(s3_options, s3_bucket)
    histories_run, steps, ran = _run_slice(histories_of(modes, on_s3=on_s3), SEED, SLICE)
    table = "\n".join(f"  {name:22} {steps[name]}" for name in history_steps())
    print(f"\nhistories: {histories_run}; modes: {dict(ran)}\nsteps:\n{table}")
    assert {mode.split("/")[0] for mode in ran} <= set(modes), ran
    if on_s3:
        assert all(mode.endswith("/s3") for mode in ran), ran


@pytest.mark.s3
def test_random_histories_over_spark_connect(
    spark: SparkSession, connect_spark: Any, s3_options: dict[str, Any], s3_bucket: str
) -> None:
    """A seeded slice of three histories on a Spark Connect session (the suite's server; the Arrow writer, the
    one writer over Connect) over every key mode, the store local or on the S3 server: the oracle of the classic
    slices holds after every step (runs, runs failing in the user's code, new input, commits and the store's
    actions, as drawn). After a failed run the model reads the store once the server's job has no task left."""
    use_s3(s3_options, s3_bucket)
    tracker = spark.sparkContext.statusTracker()  # the server's application: the Connect service runs in it

    def quiesce() -> None:
        wait_for(lambda: not tracker.getActiveJobsIds(), 60, "the failed job's tasks on the server to end")

    use_session(connect_spark, quiesce)
    try:
        machine = histories_of(("files", "grouped", "unique", "composite"), engines=("arrow",))
        # No shrinking: a failure is reported as it happened (a replay over a server may take other steps).
        slice_settings = settings(SLICE, max_examples=3, phases=[Phase.explicit, Phase.generate])
        histories_run, steps, ran = _run_slice(machine, CONNECT_SEED, slice_settings)
    finally:
        use_session(spark)
    print(f"\nhistories over Connect: {histories_run}; modes: {dict(ran)}; steps: {dict(steps)}")
    assert all("/arrow" in mode for mode in ran), ran


def _run_slice(
    machine: type[StoreHistory], seed_value: int, slice_settings: Any
) -> tuple[int, Counter[str], Counter[str]]:
    """Run a seeded slice; what it ran (histories, steps, modes: this slice's only, whatever ran before it in
    this process). Each history took steps beyond its first run and commit."""
    histories_before, steps_before, modes_before = TALLY.histories, Counter(TALLY.steps), Counter(TALLY.modes)
    seed(seed_value)(machine)
    run_state_machine_as_test(machine, settings=slice_settings)
    histories_run, steps = TALLY.histories - histories_before, TALLY.steps - steps_before
    assert histories_run >= slice_settings.max_examples
    assert sum(steps.values()) - steps["run"] - steps["commit"] >= slice_settings.max_examples, steps
    return histories_run, steps, TALLY.modes - modes_before


def _armed(point: str, step: str, argument: Callable[[StoreHistory], Any] | None = None) -> Step:
    """``step`` with a crash armed at ``point`` (``raise`` there, then the documented recovery)."""

    def crashing(machine: StoreHistory) -> None:
        machine.armed = point
        getattr(machine, step)(*([] if argument is None else [argument(machine)]))
        assert machine.armed is None, f"{step} did not meet a crashable operation"

    return crashing


@pytest.mark.faults
def test_random_histories_with_crashes() -> None:
    """A seeded slice of random histories whose steps may crash (``arm_crash``): CKPT_FAULT_HISTORY_TRIALS."""
    settings = CampaignSettings.from_env()
    histories.CRASHES = True
    try:
        seed(settings.seed)(StoreHistory)
        run_state_machine_as_test(
            StoreHistory, settings=settings_for(max_examples=settings.history_trials, stateful_step_count=4)
        )
    finally:
        histories.CRASHES = False
    print(f"\ncrash histories (seed {settings.seed}): crashes fired {dict(TALLY.crashes)}")


def settings_for(**changes: Any) -> settings:
    return settings(SLICE, **changes)
