"""Model-based testing of store histories: a Hypothesis state machine over what a user does
to one store and one output, with an oracle after every step.

One history: a key mode (row keys grouped at the source, ``unique=True``, a composite key, or file
keys), a writer (Spark's or the Arrow one), a caller (``operator``: the epoch opened for the job ``JOB``,
as the Airflow operators do; ``library``: ``CheckpointedJob`` opening its own epoch and naming no job, as
a user without Airflow does), a tiny input (a few Parquet files, tens of rows), then a
sequence of: successful runs, runs failing in the user's code on a bad record, new input files,
commits, days of an incremental job (``retain``, new input, run, commit, one to three times in one step),
``retain`` cleanups, ``delete_after_success`` cleanups (the next run of the same job then
replaces the committed output, whoever calls it; a cleanup crashed there is left cut short, as a user
who does not run it again leaves it), reprocess by key / input file / epoch / commit / time
window, undo, purge of the quarantine, rewind, discard of uncommitted work, clear. The store is
local, or on the S3 server when the caller gives one (:func:`use_s3`). The model says which keys
are done (and since which epoch, committed by which commit); the oracle after every step checks

* a successful run processes exactly the input keys that are pending (none lost, none twice) and
  leaves every input key done;
* the store's done keys (``get_checkpointed_keys``) are what the model says (bounded by it after a
  failed run or a reprocess by key, whose exact extent is the store's choice);
* the output, read by a plain pyarrow reader, holds exactly the rows of the done keys once each
  (plus the committed rows a ``clear`` or a ``delete_after_success`` cleanup left, until the next
  commit of the same job replaces them), whenever no failed attempt may have left orphans (the
  next commit deletes them).

Used by ``tests/spark/test_histories.py`` (a CI slice, the reprocess-loss reproductions as explicit
histories) and ``bench/histories.py`` (a large seeded run). The Spark session is the caller's
(:func:`use_session`): one for every history.
"""

from __future__ import annotations

import datetime as dt
import itertools
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from pyspark.sql import SparkSession
from pyspark.sql.types import DoubleType, StructField, StructType

from airflow_ckpt_provider import failpoints
from airflow_ckpt_provider.spark import CheckpointedJob
from airflow_ckpt_provider.spark.paths import arrow_filesystem, arrow_path, file_key
from airflow_ckpt_provider.store import (
    REPROCESS_FAILPOINTS,
    CheckpointError,
    CheckpointStore,
    CommitResult,
    EpochStatus,
    ReprocessResult,
    RetentionPolicy,
    Selection,
    open_blobs,
    open_store,
)
from airflow_ckpt_provider.store.rerun import RerunAction
from ckpt_testkit.faults.plans import COMMIT_FAILPOINTS

MODES = ("grouped", "unique", "composite", "files")
ENGINES = ("spark", "arrow")
#: Who opens a run's epoch: the machine for ``JOB`` (the operators' way), or ``CheckpointedJob`` itself naming no
#: job (the store's one output: docs/store-api.md, "Re-running a job").
CALLERS = ("operator", "library")
OUTPUT_COLUMNS = ["order_id", "line"]
RowId = tuple[str, int]
T = TypeVar("T")
#: Driver-side failpoints a history may crash at (``raise`` in this process: the operation stops there, as a
#: killed process would, except that ``finally`` blocks run). Executor-side crashes are the campaign's.
CRASH_POINTS = (
    "store.begin_epoch.after_create",
    *COMMIT_FAILPOINTS,
    "store.cleanup.after_checkpoints",
    *REPROCESS_FAILPOINTS,
)
#: Where a crashed ``delete_after_success`` cleanup is left as it is (not run again): the next run must replace.
CUT_SHORT_CLEANUP = ("store.cleanup.start", "store.cleanup.after_checkpoints")
#: Whether histories arm crashes (``arm_crash``): the fault campaign's histories (bench/histories.py --crashes).
CRASHES = False
#: The job every run of an ``operator`` history is for (``epochs.begin(job=...)``): a run after a
#: ``delete_after_success`` cleanup replaces the committed output of the same job (store/rerun.py). A ``library``
#: history's runs name none: the store's ``DEFAULT_JOB``.
JOB = "histories/day=2026-11-27"

_session: SparkSession | None = None
#: Waits until the session's failed job has no task left running (:func:`use_session`); None: no wait.
_quiesce: Callable[[], None] | None = None
#: The S3 server's ``open_store`` options and a bucket (:func:`use_s3`); None: every store is local.
_s3: tuple[dict[str, Any], str] | None = None


def use_session(spark: Any, quiesce: Callable[[], None] | None = None) -> None:
    """The Spark session every history runs its jobs in (classic or Spark Connect). ``quiesce``: waits until
    the Spark application has no job running, called after a run failed and before the model reads the
    store: a task of the failed job still running (the server aborts them asynchronously) may yet seal, which
    is progress the model must count."""
    global _session, _quiesce
    _session, _quiesce = spark, quiesce


def use_s3(options: dict[str, Any] | None, bucket: str | None = None) -> None:
    """Histories that draw ``on_s3`` keep their store and output in ``bucket`` on this S3 server (None: none)."""
    global _s3
    _s3 = None if options is None or bucket is None else (dict(options), bucket)


@dataclass
class Tally:
    """What the histories ran (the bench report and the CI slice's coverage check)."""

    histories: int = 0
    steps: Counter[str] = field(default_factory=Counter)
    modes: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    #: Crashes that fired, by failpoint (each followed by its recovery and the oracle).
    crashes: Counter[str] = field(default_factory=Counter)
    #: Wall time by step kind (and "oracle": the checks after every step), for where a history's time goes.
    seconds: Counter[str] = field(default_factory=Counter)
    keys_rerun: int = 0


TALLY = Tally()
#: Print each history's steps and time when it ends (the bench runner's progress).
VERBOSE = False


class UserRecordError(RuntimeError):
    """The user's transformation meeting a bad record (a failed run)."""


def _transform(poison: frozenset[str]) -> Any:
    def transform(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        for batch in batches:
            if poison and pc.any(pc.is_in(batch.column("order_id"), pa.array(sorted(poison)))).as_py():
                raise UserRecordError("bad record")
            amount2 = pc.multiply(batch.column("amount"), 2.0)
            yield pa.RecordBatch.from_arrays([*batch.columns, amount2], names=[*batch.schema.names, "amount2"])

    return transform


class StoreHistory(RuleBasedStateMachine):
    """One store, one output, one input directory; see the module doc."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="ckpt-history-"))
        self.options: dict[str, Any] = {}
        self.store_uri = f"file://{self.tmp}/store"
        self.output = f"file://{self.tmp}/out"
        self.store: CheckpointStore = open_store(self.store_uri)
        self.on_s3 = False
        self.mode = "grouped"
        self.engine = "spark"
        self.caller = "operator"
        self._planned: RerunAction | None = None  # what the store planned for the latest run
        self.inputs: list[str] = []
        self.rows: dict[RowId, tuple[str, Any]] = {}  # row -> (its file, its key)
        self.next_order = 0
        # The model: done key -> epoch that sealed it; done key -> commit that committed it.
        self.done: dict[Any, int] = {}
        self.committed_by: dict[Any, int] = {}
        self.commits: list[int] = []
        # Committed rows whose keys a clear or a delete_after_success cleanup dropped: the next commit of the
        # same job retracts them (store/rerun.py: a re-run replaces the committed output, never adds a copy).
        self.replaceable: Counter[RowId] = Counter()
        self.windows: dict[int, tuple[str, str]] = {}  # run epoch -> (just before it began, just after it ended)
        self.quarantined = False  # a reprocess, rewind or undo moved files a purge may delete
        self.armed: str | None = None  # the failpoint the next crashable operation meets (arm_crash)
        self.orphans_possible = False
        self.latest = "none"  # none | run_ok | run_failed | committed | maintenance
        self.undo_state: tuple[dict[Any, int], dict[Any, int]] | None = None
        TALLY.histories += 1
        self.started = time.monotonic()
        self.mark = self.started  # when the current step began (the last oracle check ended)
        self.log: list[str] = []

    def teardown(self) -> None:
        if VERBOSE:
            took = time.monotonic() - self.started
            print(
                f"history {TALLY.histories}: {self.mode}/{self.engine}/{self.caller} {took:.0f} s: "
                f"{' '.join(self.log)}",
                flush=True,
            )
        self.store.close()
        if self.on_s3:
            blobs = open_blobs(self.store_uri.rsplit("/", 1)[0], **self.options)
            blobs.delete_many([i.key for i in blobs.list("")])
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------------ input

    def _key(self, order: int, path: str) -> Any:
        order_id = f"o-{order:04d}"
        if self.mode == "composite":
            return (f"t{order % 3}", order_id)
        if self.mode == "files":
            return file_key(path)
        return order_id

    def _write_files(self, orders: range, files: int) -> None:
        start = len(self.inputs)
        parts: list[list[tuple[int, int]]] = [[] for _ in range(files)]
        for order in orders:
            lines = 1 if self.mode == "unique" else 1 + order % 3
            for line in range(lines):
                parts[(order + line) % files].append((order, line))
        for index, part in enumerate(parts):
            if not part:
                continue
            path = str(self.tmp / "in" / f"in-{start + index:03d}.parquet")
            table = pa.table(
                {
                    "order_id": [f"o-{o:04d}" for o, _ in part],
                    "tenant": [f"t{o % 3}" for o, _ in part],
                    "line": pa.array([ln for _, ln in part], pa.int32()),
                    "amount": [float(o * 10 + ln) for o, ln in part],
                }
            )
            pq.write_table(table, path)
            self.inputs.append(path)
            for order, line in part:
                self.rows[(f"o-{order:04d}", line)] = (path, self._key(order, path))

    def _input_keys(self) -> set[Any]:
        return {key for _, key in self.rows.values()}

    # ------------------------------------------------------------------ store and output

    def _store_done(self) -> set[Any]:
        table = self.store.get_checkpointed_keys()
        if table.num_rows == 0:
            return set()
        return {tuple(k.values()) if isinstance(k, dict) else k for k in table.column(0).to_pylist()}

    def _output_rows(self) -> Counter[RowId]:
        filesystem = arrow_filesystem(self.output, self.options)
        selector = pa.fs.FileSelector(arrow_path(self.output), recursive=True, allow_not_found=True)
        root = arrow_path(self.output).rstrip("/") + "/"
        files = [
            i.path
            for i in filesystem.get_file_info(selector)
            if i.type == pa.fs.FileType.File
            # What a plain reader skips: hidden files and directories (_SUCCESS, _temporary/, .crc)
            and not any(part.startswith(("_", ".")) for part in i.path.removeprefix(root).split("/"))
        ]
        if not files:
            return Counter()
        table = ds.dataset(files, filesystem=filesystem, format="parquet").to_table(columns=OUTPUT_COLUMNS)
        return Counter(zip(table.column("order_id").to_pylist(), table.column("line").to_pylist(), strict=True))

    def _expected_rows(self) -> Counter[RowId]:
        tracked = Counter(row for row, (_, key) in self.rows.items() if key in self.done)
        return tracked + self.replaceable

    # ------------------------------------------------------------------ a run

    def _run(self, poison: frozenset[str]) -> int | None:
        assert _session is not None, "call use_session(spark) first"
        spark = _session
        before = _now()
        run_id = f"run-{len(self.windows) + 1}"
        metadata = {"run_id": run_id}

        def begin() -> int:
            # The operator declares its output root at the submit; so do histories (a store on S3 may then
            # write its output to local disk).
            return self.store.epochs.begin(
                job=JOB, owner="histories", metadata=metadata, output_roots=[self.output]
            ).number

        if self.caller == "library":
            # The job opens its own epoch after the store's plan (a crashed one is opened again: it takes over its
            # own epoch). Its driver declares the output root; a store on S3 is told it may (the output is local).
            trusted = {"trusted_output_roots": [self.output]} if self.on_s3 else {}

            def library() -> CheckpointedJob:
                return CheckpointedJob(spark, self.store_uri, **self.options, **trusted)

            self._planned = self.store.inspection.rerun_plan().action
            job = self._crashing(library, library)
            epoch = job.epoch
            # The job asked the store the same plan (after a crashed begin its retry resumes the epoch it opened).
            assert job.rerun is not None and (job.rerun.action is self._planned or self.log[-1].startswith("crashed:"))
        else:
            self._planned = self.store.inspection.rerun_plan(JOB).action
            epoch = self._crashing(begin, begin)  # a crashed submit is submitted again (it takes over its epoch)
            job = CheckpointedJob(spark, self.store_uri, epoch=epoch, **self.options)
        try:
            if self.mode == "files":
                df = job.read_parquet(self.inputs, min_partitions=2)
            else:
                source = spark.read.parquet(*self.inputs)
                key: Any = ["tenant", "order_id"] if self.mode == "composite" else "order_id"
                df = job.skip_completed(source, key, unique=self.mode == "unique", num_partitions=2)
            schema = StructType([*df.schema.fields, StructField("amount2", DoubleType())])
            out = df.mapInArrow(_transform(poison), schema)
            summary = job.write_parquet(out, self.output, num_partitions=2, engine=self.engine)
        except Exception:
            if not poison:
                raise
            self._end(job, epoch, succeeded=False)
            self.windows[epoch] = (before, _now())
            return None
        self._end(job, epoch, succeeded=True)
        self.windows[epoch] = (before, _now())
        assert not poison, "the run with a bad record succeeded"
        self._epoch = epoch
        return summary.keys

    def _end(self, job: CheckpointedJob, epoch: int, *, succeeded: bool) -> None:
        """End the run's epoch: the job its own, the machine the one it opened (as the operator does)."""
        if self.caller == "library":
            job.finish(succeeded=succeeded)
        else:
            self.store.epochs.end(epoch, status=EpochStatus.SUCCEEDED if succeeded else EpochStatus.FAILED)

    # ------------------------------------------------------------------ rules

    @initialize(
        mode=st.sampled_from(MODES),
        engine=st.sampled_from(ENGINES),
        orders=st.integers(4, 10),
        first=st.sampled_from(["run+commit", "run", "nothing"]),
        on_s3=st.booleans(),
        caller=st.sampled_from(CALLERS),
    )
    def begin(self, mode: str, engine: str, orders: int, first: str, on_s3: bool, caller: str) -> None:
        """A history's input, and (so that short histories reach reprocess) usually a first run."""
        self.start(mode, engine, orders, on_s3=on_s3, caller=caller)
        if first != "nothing":
            self.run()
        if first == "run+commit":
            self.commit()

    def start(self, mode: str, engine: str, orders: int, *, on_s3: bool = False, caller: str = "operator") -> None:
        if on_s3 and _s3 is not None:
            # The store on S3, the output on local disk (both writers can write it; the Arrow writer to
            # S3 is the campaign's and tests/spark's, Spark's own writer needs s3a://, which this Spark has not).
            options, bucket = _s3
            self.store.close()
            self.options, self.on_s3 = options, True
            self.store_uri = f"s3://{bucket}/{self.tmp.name}/store"
            self.store = open_store(self.store_uri, trusted_output_roots=[self.output], **options)
        assert caller in CALLERS, caller
        self.mode, self.engine, self.caller = mode, engine, caller
        (self.tmp / "in").mkdir(parents=True)
        self._write_files(range(orders), 3)
        self.next_order = orders
        TALLY.modes[f"{mode}/{engine}{'/library' if caller == 'library' else ''}{'/s3' if self.on_s3 else ''}"] += 1

    # A second run in a row with nothing pending adds nothing a history needs (one is kept: it vouched wrongly).
    @precondition(lambda self: self.latest != "run_ok" or bool(self._input_keys() - set(self.done)))
    @rule()
    def run(self) -> None:
        pending = self._input_keys() - set(self.done)
        replacing = self.latest == "deleted"
        processed = self._run(frozenset())
        # A new run of the same job after its output was committed and its keys deleted replaces it, by either caller.
        assert (self._planned is RerunAction.REPLACE) == replacing, (self._planned, self.latest)
        epoch = self._epoch
        assert processed == len(pending), (
            f"the run processed {processed} keys, {len(pending)} were pending: {sorted(map(str, pending))[:5]}"
        )
        done = self._store_done()
        assert done == self._input_keys(), f"after a successful run {len(self._input_keys() - done)} keys pending"
        for key in pending:
            self.done[key] = epoch
        TALLY.keys_rerun += processed or 0
        self.latest, self.undo_state = "run_ok", None
        self._done_step("rerun_replace" if replacing else "run")

    @precondition(lambda self: bool(self._input_keys() - set(self.done)))
    @rule(data=st.data())
    def failed_run(self, data: st.DataObject) -> None:
        self.fail_on(data.draw(st.sampled_from(sorted(self._input_keys() - set(self.done), key=str))))

    def fail_on(self, bad: Any) -> None:
        """A run whose user code fails on the row(s) of the pending key ``bad``."""
        order = next(row[0] for row, (_, key) in self.rows.items() if key == bad)
        epoch = self.store.epochs.current()
        before = set(self.done)
        assert self._run(frozenset({order})) is None
        if _quiesce is not None:
            _quiesce()
        number = self.store.epochs.current()
        assert number is not None and (epoch is None or number.number > epoch.number)
        done = self._store_done()
        assert before <= done <= self._input_keys(), "a failed run lost done keys or invented some"
        assert bad not in done, "the key of the bad record was checkpointed"
        for key in done - before:
            self.done[key] = number.number
        self.orphans_possible = True
        self.latest, self.undo_state = "run_failed", None
        self._done_step("failed_run")

    @rule(orders=st.integers(1, 3))
    def new_input_file(self, orders: int) -> None:
        self._write_files(range(self.next_order, self.next_order + orders), 1)
        self.next_order += orders
        self._done_step("new_input_file")

    @precondition(lambda self: self.latest == "run_ok")
    @rule()
    def commit(self) -> None:
        def commit() -> CommitResult:
            return self.store.commit(output_roots=[self.output])

        result = self._crashing(commit, commit)  # a crashed commit is retried: it finishes the job
        number = self._epoch
        for key in self.done:
            self.committed_by.setdefault(key, number)
        self.commits.append(number)
        self.orphans_possible = False
        self.latest = "committed"
        report = self.store.inspection.check()
        assert report.ok, report
        if self.replaceable:  # the earlier commits of this job no longer count: their files were retracted
            assert result.replaced_files, "the commit of a re-run did not replace the committed output"
            self.replaceable = Counter()
        self._done_step("commit")

    @precondition(lambda self: self.latest == "committed")
    @rule(days=st.integers(1, 3), orders=st.integers(1, 3))
    def another_day(self, days: int, orders: int) -> None:
        """The daily job of an incremental pipeline, ``days`` times: the committed day's checkpoints kept
        (``retain``: folded into the snapshot), the next day's input arrives, the job runs and commits. One draw
        is the sequence of several rules a random history seldom draws in a row (a third incremental commit of
        the same job once retracted the first's files: tests/spark/test_histories.py)."""
        for _ in range(days):
            self.retain_cleanup()
            self.new_input_file(orders)
            self.run()
            self.commit()
        TALLY.steps["another_day"] += 1
        self.log.append(f"(another_day x{days})")

    @precondition(lambda self: self.latest == "committed")
    @rule()
    def retain_cleanup(self) -> None:
        self._cleanup(RetentionPolicy.RETAIN)
        self._done_step("retain_cleanup")

    @precondition(lambda self: self.latest == "committed")
    @rule()
    def delete_after_success(self) -> None:
        """The per-run policy: every checkpoint goes; the committed output stays until the next run of the
        job replaces it (its commit retracts these files). A crash here is not recovered: the cleanup stays cut
        short, and none of the committed keys may count all the same (the store recorded the policy first)."""
        self._cleanup(RetentionPolicy.DELETE_AFTER_SUCCESS, recover=False)
        assert not self._store_done(), "delete_after_success kept done keys"
        self.replaceable += Counter(row for row, (_, key) in self.rows.items() if key in self.done)
        self.done, self.committed_by, self.commits = {}, {}, []
        self.latest, self.undo_state, self.quarantined = "deleted", None, False
        self._done_step("delete_after_success")

    # ------------------------------------------------------------------ crashes (the fault campaign's histories)

    @precondition(lambda self: CRASHES and self.armed is None)
    @rule(point=st.sampled_from(CRASH_POINTS))
    def arm_crash(self, point: str) -> None:
        """Crash (``raise`` at ``point``) the next operation that meets it; the operation is then recovered
        as documented (the same call again, or ``reprocessing.resume``) and the oracle judges the result."""
        self.armed = point
        self.log.append(f"arm:{point}")

    def _crashing(self, action: Callable[[], T], recover: Callable[[], T]) -> T:
        """``action()``, crashed at the armed failpoint (if it meets it) and then ``recover()``-ed."""
        point, self.armed = self.armed, None
        if point is None:
            return action()
        failpoints.enable(point, "raise")
        try:
            return action()
        except failpoints.InjectedFault:
            TALLY.crashes[point] += 1
            self.log.append(f"crashed:{point}")
        finally:
            failpoints.disable_all()
        return recover()

    def _cleanup(self, policy: RetentionPolicy, *, recover: bool = True) -> None:
        def cleanup() -> None:
            self.store.housekeeping.cleanup(policy)

        def cut_short() -> None:
            assert self.log[-1] in {f"crashed:{p}" for p in CUT_SHORT_CLEANUP}, self.log[-1]

        self._crashing(cleanup, cleanup if recover else cut_short)  # else left cut short, as the crash left it

    def _resume(self, action: Callable[[], Any]) -> Any:
        """Finish a crashed reprocess, rewind, undo or purge: resume it, or (crashed before it began) run it again."""
        resumed = self.store.reprocessing.resume()
        return action() if resumed is None else resumed

    def _done_step(self, name: str) -> None:
        now = time.monotonic()
        TALLY.seconds[name] += now - self.mark
        self.mark = now
        TALLY.steps[name] += 1
        self.log.append(name)

    def _maintenance(self, name: str, action: Any) -> set[Any] | None:
        """Run a reprocess-like action; None if the store refused it (then nothing changed)."""
        before = set(self.done)
        saved = (dict(self.done), dict(self.committed_by))
        try:
            result = self._crashing(action, lambda: self._resume(action))
        except CheckpointError as exc:
            TALLY.refused[f"{name}: {type(exc).__name__}"] += 1
            assert self._store_done() == before, f"a refused {name} changed the done keys"
            return None
        if isinstance(result, ReprocessResult) and result.epoch is None:
            # Nothing to do (a rewind to the latest commit, a selection whose keys are all pending): the store
            # records nothing, so undo still means the maintenance before it, and nothing changed.
            assert self._store_done() == before, f"a {name} with nothing to do changed the done keys"
            TALLY.refused[f"{name}: nothing to do"] += 1
            return set()
        done = self._store_done()
        assert done <= before, f"{name} made keys done"
        pending = before - done
        for key in pending:
            self.done.pop(key, None)
            self.committed_by.pop(key, None)
        self.undo_state = saved
        self.latest = "maintenance"
        self.quarantined = True
        self._done_step(name)
        return pending

    @precondition(lambda self: bool(self.done) and not self.replaceable)
    @rule(data=st.data())
    def reprocess_key(self, data: st.DataObject) -> None:
        self.reprocess_one_key(data.draw(st.sampled_from(sorted(self.done, key=str))))

    def reprocess_one_key(self, key: Any) -> None:
        selected = {"tenant": key[0], "order_id": key[1]} if self.mode == "composite" else key
        pending = self._maintenance("reprocess_key", lambda: self.store.reprocessing.run(Selection(keys=[selected])))
        if pending is not None:
            assert key in pending

    @precondition(lambda self: self.mode == "files" and bool(self.done) and not self.replaceable)
    @rule(data=st.data())
    def reprocess_file(self, data: st.DataObject) -> None:
        self.reprocess_input_file(data.draw(st.sampled_from(sorted(self.done, key=str))))

    def reprocess_input_file(self, key: Any) -> None:
        path = next(p for p, k in self.rows.values() if k == key)
        pending = self._maintenance("reprocess_file", lambda: self.store.reprocessing.run(Selection(files=[path])))
        if pending is not None:
            assert pending == {key}

    @precondition(lambda self: bool(self.done) and not self.replaceable)
    @rule(data=st.data(), by_time=st.booleans())
    def reprocess_epoch(self, data: st.DataObject, by_time: bool) -> None:
        """Reprocess what one run sealed: by its epoch number, or by a time window around it."""
        self.reprocess_by_epoch(data.draw(st.sampled_from(sorted(set(self.done.values())))), by_time=by_time)

    def reprocess_by_epoch_time(self, number: int) -> None:
        self.reprocess_by_epoch(number, by_time=True)

    def reprocess_by_epoch(self, number: int, *, by_time: bool = False) -> None:
        expected = {k for k, e in self.done.items() if e == number}
        if by_time:
            after, before = self.windows[number]
            selection = Selection(sealed_after=after, sealed_before=before)
        else:
            selection = Selection(epochs=[number])
        name = "reprocess_time" if by_time else "reprocess_epoch"
        pending = self._maintenance(name, lambda: self.store.reprocessing.run(selection))
        if pending is not None:
            assert pending == expected, f"{name} {number}: {len(pending)} pending, {len(expected)} want"

    # Not while a clear's or a cleanup's committed rows wait for the next commit to replace them.
    @precondition(lambda self: bool(self.commits) and not self.replaceable)
    @rule(data=st.data())
    def reprocess_commit(self, data: st.DataObject) -> None:
        self.reprocess_by_commit(data.draw(st.sampled_from(self.commits)))

    def reprocess_by_commit(self, number: int) -> None:
        expected = {k for k, c in self.committed_by.items() if c == number}
        pending = self._maintenance(
            "reprocess_commit", lambda: self.store.reprocessing.run(Selection(commits=[number]))
        )
        if pending is not None:
            assert pending == expected, f"reprocess of commit {number}: {len(pending)} pending, {len(expected)} want"

    @precondition(lambda self: bool(self.commits) and not self.replaceable)
    @rule(data=st.data())
    def rewind(self, data: st.DataObject) -> None:
        self.rewind_to(data.draw(st.sampled_from([0, *self.commits])))

    def rewind_to(self, to: int) -> None:
        expected = {k for k, e in self.done.items() if e > to}
        pending = self._maintenance("rewind", lambda: self.store.reprocessing.rewind(to))
        if pending is not None:
            assert pending == expected, f"rewind to {to}: {len(pending)} pending, {len(expected)} want"

    @precondition(lambda self: self.undo_state is not None and self.latest == "maintenance")
    @rule()
    def undo(self) -> None:
        assert self.undo_state is not None
        done, committed_by = self.undo_state
        try:
            self._crashing(self.store.reprocessing.undo, lambda: self._resume(self.store.reprocessing.undo))
        except CheckpointError as exc:
            TALLY.refused[f"undo: {type(exc).__name__}"] += 1
            return
        self.done, self.committed_by = dict(done), dict(committed_by)
        self.undo_state = None
        assert self._store_done() == set(self.done), "undo did not restore the done keys exactly"
        self._done_step("undo")

    @precondition(lambda self: self.quarantined)
    @rule()
    def purge(self) -> None:
        """Delete the quarantined files for good: nothing a reader or the store counts changes; undo ends."""
        before = self._store_done()
        try:
            self._crashing(self.store.reprocessing.purge, lambda: self._resume(self.store.reprocessing.purge))
        except CheckpointError as exc:
            TALLY.refused[f"purge: {type(exc).__name__}"] += 1
            return
        assert self._store_done() == before, "a purge changed the done keys"
        self.undo_state, self.quarantined = None, False
        if self.latest == "maintenance":
            self.latest = "purged"
        self._done_step("purge")

    # Only with uncommitted work to discard (a discard of nothing, again and again, filled whole histories).
    @precondition(lambda self: any(k not in self.committed_by for k in self.done) and not self.replaceable)
    @rule()
    def discard_uncommitted(self) -> None:
        try:
            self.store.housekeeping.discard_uncommitted()
        except CheckpointError as exc:
            TALLY.refused[f"discard_uncommitted: {type(exc).__name__}"] += 1
            return
        self.done = {k: e for k, e in self.done.items() if k in self.committed_by}
        self.latest, self.undo_state = "maintenance", None  # orphans of failed attempts: the commit's
        self._done_step("discard_uncommitted")

    @precondition(lambda self: bool(self.done) and not self.replaceable)
    @rule()
    def clear(self) -> None:
        try:
            self.store.housekeeping.clear()
        except CheckpointError as exc:
            TALLY.refused[f"clear: {type(exc).__name__}"] += 1
            return
        committed = {k for k in self.done if k in self.committed_by}
        self.replaceable += Counter(row for row, (_, key) in self.rows.items() if key in committed)
        self.done, self.committed_by = {}, {}
        self.latest, self.undo_state = "maintenance", None
        self._done_step("clear")

    # ------------------------------------------------------------------ oracle

    @invariant()
    def store_and_output_agree_with_the_model(self) -> None:
        if not self.inputs:  # before start
            return
        started = time.monotonic()
        try:
            self._check_oracle()
        finally:
            self.mark = time.monotonic()
            TALLY.seconds["oracle"] += self.mark - started

    def _check_oracle(self) -> None:
        assert self._store_done() == set(self.done), "the store's done keys differ from the model's"
        if not self.orphans_possible:
            got, want = self._output_rows(), self._expected_rows()
            missing, extra = want - got, got - want
            assert not missing and not extra, (
                f"output: {sum(missing.values())} rows missing (e.g. {sorted(missing)[:3]}), "
                f"{sum(extra.values())} extra (e.g. {sorted(extra)[:3]})"
            )


def histories_of(
    modes: Iterable[str], *, on_s3: bool | None = None, engines: Iterable[str] = ENGINES
) -> type[StoreHistory]:
    """The machine with its histories drawn over ``modes`` and ``engines`` only, their store on S3 (True), local
    (False) or either (None): a seeded slice of a few histories then covers what its test says whatever the seed
    draws. Over Spark Connect only the Arrow writer runs (``engines=("arrow",)``)."""
    modes, engines = tuple(modes), tuple(engines)
    assert set(modes) <= set(MODES) and set(engines) <= set(ENGINES), (modes, engines)
    stores = st.booleans() if on_s3 is None else st.just(on_s3)

    class Histories(StoreHistory):
        @initialize(
            mode=st.sampled_from(modes),
            engine=st.sampled_from(engines),
            orders=st.integers(4, 10),
            first=st.sampled_from(["run+commit", "run", "nothing"]),
            on_s3=stores,
            caller=st.sampled_from(CALLERS),
        )
        def begin(self, mode: str, engine: str, orders: int, first: str, on_s3: bool, caller: str) -> None:
            super().begin(mode, engine, orders, first, on_s3, caller)

    Histories.__name__ = Histories.__qualname__ = f"Histories_{'_'.join(modes)}"
    return Histories


def history_steps() -> Iterable[str]:
    """Rule names (for the bench report's coverage)."""
    return itertools.chain(
        [
            "run",
            "failed_run",
            "new_input_file",
            "commit",
            "another_day",
            "retain_cleanup",
            "delete_after_success",
            "rerun_replace",
            "reprocess_key",
            "reprocess_file",
            "reprocess_epoch",
            "reprocess_time",
            "reprocess_commit",
            "rewind",
            "undo",
            "purge",
            "discard_uncommitted",
            "clear",
        ]
    )


def _now() -> str:
    """The time as the store writes it (store/records.py ``now``: milliseconds), for time-window selections."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
