"""Model-based testing of store histories: a Hypothesis state machine over what a user does
to one store and one output, with an oracle after every step.

One history: a key mode (row keys grouped at the source, ``unique=True``, a composite key, or file
keys), a writer (Spark's or the Arrow one), a tiny input (a few Parquet files, tens of rows), then a
sequence of: successful runs, runs failing in the user's code on a bad record, new input files,
commits, ``retain`` cleanups, reprocess by key / input file / commit, undo, rewind, discard of
uncommitted work, clear. The model says which keys are done (and since which epoch, committed by
which commit); the oracle after every step checks

* a successful run processes exactly the input keys that are pending (none lost, none twice) and
  leaves every input key done;
* the store's done keys (``get_checkpointed_keys``) are what the model says (bounded by it after a
  failed run or a reprocess by key, whose exact extent is the store's choice);
* the output, read by a plain pyarrow reader, holds exactly the rows of the done keys once each
  (plus rows a ``clear`` left behind, which no store tracks any more), whenever no failed attempt
  may have left orphans (the next commit deletes them).

Used by ``tests/spark/test_histories.py`` (a CI slice, the reprocess-loss reproductions as explicit
histories) and ``bench/histories.py`` (a large seeded run). The Spark session is the caller's
(:func:`use_session`): one for every history.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from pyspark.sql import SparkSession
from pyspark.sql.types import DoubleType, StructField, StructType

from airflow_ckpt_provider.spark import CheckpointedJob
from airflow_ckpt_provider.spark.paths import file_key
from airflow_ckpt_provider.store import (
    CheckpointError,
    CheckpointStore,
    EpochStatus,
    RetentionPolicy,
    Selection,
    open_store,
)

MODES = ("grouped", "unique", "composite", "files")
ENGINES = ("spark", "arrow")
OUTPUT_COLUMNS = ["order_id", "line"]
RowId = tuple[str, int]

_session: SparkSession | None = None


def use_session(spark: SparkSession) -> None:
    """The Spark session every history runs its jobs in."""
    global _session
    _session = spark


@dataclass
class Tally:
    """What the histories ran (the bench report and the CI slice's coverage check)."""

    histories: int = 0
    steps: Counter[str] = field(default_factory=Counter)
    modes: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
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
        self.store_uri = f"file://{self.tmp}/store"
        self.output = f"file://{self.tmp}/out"
        self.store: CheckpointStore = open_store(self.store_uri)
        self.mode = "grouped"
        self.engine = "spark"
        self.inputs: list[str] = []
        self.rows: dict[RowId, tuple[str, Any]] = {}  # row -> (its file, its key)
        self.next_order = 0
        # The model: done key -> epoch that sealed it; done key -> commit that committed it.
        self.done: dict[Any, int] = {}
        self.committed_by: dict[Any, int] = {}
        self.commits: list[int] = []
        self.untracked: Counter[RowId] = Counter()  # rows a clear left in the output
        self.orphans_possible = False
        self.latest = "none"  # none | run_ok | run_failed | committed | maintenance
        self.undo_state: tuple[dict[Any, int], dict[Any, int]] | None = None
        TALLY.histories += 1
        self.started = time.monotonic()
        self.log: list[str] = []

    def teardown(self) -> None:
        if VERBOSE:
            took = time.monotonic() - self.started
            print(
                f"history {TALLY.histories}: {self.mode}/{self.engine} {took:.0f} s: {' '.join(self.log)}", flush=True
            )
        self.store.close()
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
        directory = self.tmp / "out"
        if not directory.exists():
            return Counter()
        dataset = ds.dataset(str(directory), format="parquet")
        if not dataset.files:
            return Counter()
        table = dataset.to_table(columns=OUTPUT_COLUMNS)
        return Counter(zip(table.column("order_id").to_pylist(), table.column("line").to_pylist(), strict=True))

    def _expected_rows(self) -> Counter[RowId]:
        tracked = Counter(row for row, (_, key) in self.rows.items() if key in self.done)
        return tracked + self.untracked

    # ------------------------------------------------------------------ a run

    def _run(self, poison: frozenset[str]) -> int | None:
        assert _session is not None, "call use_session(spark) first"
        spark = _session
        epoch = self.store.begin_epoch(owner="histories").number
        job = CheckpointedJob(spark, self.store_uri, epoch=epoch)
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
            self.store.end_epoch(epoch, status=EpochStatus.FAILED)
            return None
        self.store.end_epoch(epoch, status=EpochStatus.SUCCEEDED)
        assert not poison, "the run with a bad record succeeded"
        self._epoch = epoch
        return summary.keys

    # ------------------------------------------------------------------ rules

    @initialize(
        mode=st.sampled_from(MODES),
        engine=st.sampled_from(ENGINES),
        orders=st.integers(4, 10),
        first=st.sampled_from(["run+commit", "run", "nothing"]),
    )
    def begin(self, mode: str, engine: str, orders: int, first: str) -> None:
        """A history's input, and (so that short histories reach reprocess) usually a first run."""
        self.start(mode, engine, orders)
        if first != "nothing":
            self.run()
        if first == "run+commit":
            self.commit()

    def start(self, mode: str, engine: str, orders: int) -> None:
        self.mode, self.engine = mode, engine
        (self.tmp / "in").mkdir(parents=True)
        self._write_files(range(orders), 3)
        self.next_order = orders
        TALLY.modes[f"{mode}/{engine}"] += 1

    # A second run in a row with nothing pending adds nothing a history needs (one is kept: it vouched wrongly).
    @precondition(lambda self: self.latest != "run_ok" or bool(self._input_keys() - set(self.done)))
    @rule()
    def run(self) -> None:
        pending = self._input_keys() - set(self.done)
        processed = self._run(frozenset())
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
        self._done_step("run")

    @precondition(lambda self: bool(self._input_keys() - set(self.done)))
    @rule(data=st.data())
    def failed_run(self, data: st.DataObject) -> None:
        pending = sorted(self._input_keys() - set(self.done), key=str)
        bad = data.draw(st.sampled_from(pending))
        order = next(row[0] for row, (_, key) in self.rows.items() if key == bad)
        epoch = self.store.current_epoch()
        before = set(self.done)
        assert self._run(frozenset({order})) is None
        number = self.store.current_epoch()
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
        # After a clear, the committed output it left is no record's any more: keep it, knowingly.
        result = self.store.commit(output_roots=[self.output], unknown_files="keep" if self.untracked else "fail")
        number = self._epoch
        for key in self.done:
            self.committed_by.setdefault(key, number)
        self.commits.append(number)
        self.orphans_possible = False
        self.latest = "committed"
        report = self.store.check()
        assert report.ok, report
        assert result is not None
        self._done_step("commit")

    @precondition(lambda self: self.latest == "committed")
    @rule()
    def retain_cleanup(self) -> None:
        self.store.cleanup(RetentionPolicy.RETAIN)
        self._done_step("retain_cleanup")

    def _done_step(self, name: str) -> None:
        TALLY.steps[name] += 1
        self.log.append(name)

    def _maintenance(self, name: str, action: Any) -> set[Any] | None:
        """Run a reprocess-like action; None if the store refused it (then nothing changed)."""
        before = set(self.done)
        saved = (dict(self.done), dict(self.committed_by))
        try:
            action()
        except CheckpointError as exc:
            TALLY.refused[f"{name}: {type(exc).__name__}"] += 1
            assert self._store_done() == before, f"a refused {name} changed the done keys"
            return None
        done = self._store_done()
        assert done <= before, f"{name} made keys done"
        pending = before - done
        for key in pending:
            self.done.pop(key, None)
            self.committed_by.pop(key, None)
        self.undo_state = saved
        self.latest = "maintenance"
        self._done_step(name)
        return pending

    @precondition(lambda self: bool(self.done))
    @rule(data=st.data())
    def reprocess_key(self, data: st.DataObject) -> None:
        self.reprocess_one_key(data.draw(st.sampled_from(sorted(self.done, key=str))))

    def reprocess_one_key(self, key: Any) -> None:
        selected = {"tenant": key[0], "order_id": key[1]} if self.mode == "composite" else key
        pending = self._maintenance("reprocess_key", lambda: self.store.reprocess(Selection(keys=[selected])))
        if pending is not None:
            assert key in pending

    @precondition(lambda self: self.mode == "files" and bool(self.done))
    @rule(data=st.data())
    def reprocess_file(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.done, key=str)))
        path = next(p for p, k in self.rows.values() if k == key)
        pending = self._maintenance("reprocess_file", lambda: self.store.reprocess(Selection(files=[path])))
        if pending is not None:
            assert pending == {key}

    @precondition(lambda self: bool(self.commits))
    @rule(data=st.data())
    def reprocess_commit(self, data: st.DataObject) -> None:
        self.reprocess_by_commit(data.draw(st.sampled_from(self.commits)))

    def reprocess_by_commit(self, number: int) -> None:
        expected = {k for k, c in self.committed_by.items() if c == number}
        pending = self._maintenance("reprocess_commit", lambda: self.store.reprocess(Selection(commits=[number])))
        if pending is not None:
            assert pending == expected, f"reprocess of commit {number}: {len(pending)} pending, {len(expected)} want"

    @precondition(lambda self: bool(self.commits))
    @rule(data=st.data())
    def rewind(self, data: st.DataObject) -> None:
        to = data.draw(st.sampled_from([0, *self.commits]))
        expected = {k for k, e in self.done.items() if e > to}
        pending = self._maintenance("rewind", lambda: self.store.rewind(to))
        if pending is not None:
            assert pending == expected, f"rewind to {to}: {len(pending)} pending, {len(expected)} want"

    @precondition(lambda self: self.undo_state is not None and self.latest == "maintenance")
    @rule()
    def undo(self) -> None:
        assert self.undo_state is not None
        done, committed_by = self.undo_state
        try:
            self.store.undo_reprocess()
        except CheckpointError as exc:
            TALLY.refused[f"undo: {type(exc).__name__}"] += 1
            return
        self.done, self.committed_by = dict(done), dict(committed_by)
        self.undo_state = None
        assert self._store_done() == set(self.done), "undo did not restore the done keys exactly"
        self._done_step("undo")

    @precondition(lambda self: bool(self.done))
    @rule()
    def discard_uncommitted(self) -> None:
        try:
            self.store.discard_uncommitted()
        except CheckpointError as exc:
            TALLY.refused[f"discard_uncommitted: {type(exc).__name__}"] += 1
            return
        self.done = {k: e for k, e in self.done.items() if k in self.committed_by}
        self.latest, self.undo_state = "maintenance", None  # orphans of failed attempts: the commit's
        self._done_step("discard_uncommitted")

    @precondition(lambda self: bool(self.done))
    @rule()
    def clear(self) -> None:
        try:
            self.store.clear()
        except CheckpointError as exc:
            TALLY.refused[f"clear: {type(exc).__name__}"] += 1
            return
        committed = {k for k in self.done if k in self.committed_by}
        self.untracked += Counter(row for row, (_, key) in self.rows.items() if key in committed)
        self.done, self.committed_by = {}, {}
        self.latest, self.undo_state = "maintenance", None
        self._done_step("clear")

    # ------------------------------------------------------------------ oracle

    @invariant()
    def store_and_output_agree_with_the_model(self) -> None:
        if not self.inputs:  # before start
            return
        assert self._store_done() == set(self.done), "the store's done keys differ from the model's"
        if not self.orphans_possible:
            got, want = self._output_rows(), self._expected_rows()
            missing, extra = want - got, got - want
            assert not missing and not extra, (
                f"output: {sum(missing.values())} rows missing (e.g. {sorted(missing)[:3]}), "
                f"{sum(extra.values())} extra (e.g. {sorted(extra)[:3]})"
            )


def history_steps() -> Iterable[str]:
    """Rule names (for the bench report's coverage)."""
    return itertools.chain(
        [
            "run",
            "failed_run",
            "new_input_file",
            "commit",
            "retain_cleanup",
            "reprocess_key",
            "reprocess_file",
            "reprocess_commit",
            "rewind",
            "undo",
            "discard_uncommitted",
            "clear",
        ]
    )
