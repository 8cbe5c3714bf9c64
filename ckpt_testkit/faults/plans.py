"""What a trial does, drawn from a seed: which failpoint, which hit, which crash kind, which job shape.

A campaign seed fixes every trial: trial *i* of a campaign uses
``random.Random(f"{seed}/{backend}/{i}")`` and the crash points are dealt from a
seeded shuffle, so a short campaign still spreads over the failpoints and any
trial can be replayed alone (``--seed S --only I``).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

from airflow_ckpt_provider.store import REPROCESS_FAILPOINTS, RetentionPolicy

#: Failpoints on the executors (Python workers), in the order a write task meets them.
EXECUTOR_FAILPOINTS = (
    "spark.task.before_write",
    "spark.sink.after_file",
    "spark.task.after_write",
    "store.after_stage_files",
    "store.after_stage_keys",
    "spark.task.before_seal",
    "store.checkpoint.before_manifest",
    "store.checkpoint.after_manifest",
    "spark.task.after_seal",
)
#: Failpoints in the user's own code (the example job's steps), before and after skip_completed's exchange.
#: Users' jobs fail there most: a bad record, a bug, a lost dependency.
USER_FAILPOINTS = ("user.before_exchange", "user.after_exchange")
#: Failpoints in the driver (the job opens its own epoch).
DRIVER_FAILPOINTS = ("store.begin_epoch.before_create", "store.begin_epoch.after_create")
#: Failpoints of compaction (loose manifests into a segment; docs/store-api.md, "Segments"). The driver compacts
#: when each write ends, so they fire there; compaction never fails a job (a raise is logged and swallowed), so
#: they are dealt only as a driver exit (spark-submit trials): the crash between a segment and the state object,
#: between the state object and deleting the loose manifests, and mid-deletion.
COMPACTION_FAILPOINTS = (
    "store.compact.after_segment",
    "store.compact.after_state",
    "store.compact.during_delete_loose",
)
#: Failpoints of the native (Spark) writer: in the driver, around the seal of one committed task.
#: Only file-key jobs with local output use that writer, so only the local backend deals them.
NATIVE_FAILPOINTS = ("spark.native.before_seal", "spark.native.after_seal")
#: Spark's writer: the seal of a committed task that wrote files fails (an orphan for the commit, surely).
SEAL_WITH_FILES = "spark.native.before_seal.with_files"
#: Failpoints inside one task's seal: raised in the driver (Spark's writer seals there), they leave that one
#: task committed but unsealed. The progress oracle allows that task, and only it.
ONE_SEAL_POINTS = (
    "spark.native.before_seal",
    SEAL_WITH_FILES,
    "store.after_stage_files",
    "store.after_stage_keys",
    "store.checkpoint.before_manifest",
)
#: Failpoints of the commit task (commit, then retention cleanup).
COMMIT_FAILPOINTS = (
    "store.commit.between_phases",
    "store.commit.before_delete_orphans",
    "store.commit.during_delete_orphans",
    "store.cleanup.start",
    "store.cleanup.after_snapshot_keys",
    "store.cleanup.after_snapshot_manifest",
)
#: Executor failpoints where a worker killed with ``os._exit`` leaves a written file behind (an orphan).
#: Those from the first complete output file up to (not including) the manifest.
ORPHAN_POINTS = EXECUTOR_FAILPOINTS[
    EXECUTOR_FAILPOINTS.index("spark.sink.after_file") : EXECUTOR_FAILPOINTS.index("store.checkpoint.after_manifest")
]
#: Retention failpoints reached only when the policy keeps keys (retain: the committed keys go into a snapshot).
SNAPSHOT_POINTS = ("store.cleanup.after_snapshot_keys", "store.cleanup.after_snapshot_manifest")
#: Commit failpoints that are reached only when there are orphans to delete.
ORPHAN_COMMIT_POINTS = ("store.commit.before_delete_orphans", "store.commit.during_delete_orphans")
#: Failpoints of reprocess, rewind, undo and purge: dealt by ckpt_testkit/faults/reprocess_trials.py.
REPROCESS_POINTS = REPROCESS_FAILPOINTS
#: Not a failpoint: SIGKILL of the spark-submit process group at a random moment.
SIGKILL = "sigkill.driver"
#: Not a failpoint: SIGKILL of one executor JVM of the standalone cluster while the job runs (a lost machine).
EXECUTOR_KILL = "sigkill.executor"
#: What a trial on the standalone cluster deals: the user's code failing, our executor code crashing (raise,
#: or the Python worker killed), an executor JVM lost, the driver killed.
CLUSTER_CRASH_POINTS = (*USER_FAILPOINTS, *EXECUTOR_FAILPOINTS, EXECUTOR_KILL, SIGKILL)
CRASH_POINTS = (
    *USER_FAILPOINTS,
    *EXECUTOR_FAILPOINTS,
    *DRIVER_FAILPOINTS,
    *COMPACTION_FAILPOINTS,
    *NATIVE_FAILPOINTS,
    SIGKILL,
)
#: Job shapes: row keys with several rows per key (an exchange at the source), unique row keys (no
#: exchange), composite row keys (two columns, two rows per key; an exchange), file keys.
MODES = ("rows", "rows-unique", "rows-composite", "files")
STORE_FAULTS = ("reset", "stall", "http500", "http503", "revoke")


#: Short names of key modes and writers for the report's columns.
MODE_LABELS = {"rows": "rows", "rows-unique": "uniq", "rows-composite": "comp", "files": "files", "*": "*"}


def path_of(mode: str, engine: str, *, cluster: bool = False) -> str:
    """A path in the report: ``[C:]mode/writer`` (``A`` the Arrow writer, ``S`` Spark's own). On the standalone
    cluster (``C:``) the path is the writer alone (``C:*/A``): the key mode is drawn at random there, since what
    the cluster changes (executors on other hosts, lost JVMs) does not depend on it."""
    return f"{'C:' if cluster else ''}{MODE_LABELS.get(mode, mode)}/{'S' if engine == 'spark' else 'A'}"


def engines(backend: str) -> tuple[str, ...]:
    """The writers a backend's trials use: Spark's own writes local output only (no s3a here)."""
    return ("arrow", "spark") if backend == "local" else ("arrow",)


def host_points(engine: str) -> tuple[str, ...]:
    """What a resident-host trial's first run crashes at, by writer: our executor failpoints exist only in the
    Arrow writer, the native writer's seal failpoints only in Spark's."""
    if engine == "spark":
        return (*USER_FAILPOINTS, *DRIVER_FAILPOINTS, *NATIVE_FAILPOINTS)
    return (*USER_FAILPOINTS, *EXECUTOR_FAILPOINTS, *DRIVER_FAILPOINTS)


def cluster_points(engine: str) -> tuple[str, ...]:
    """What a cluster trial crashes at. Spark's writer has no executor failpoints: its user-code points are
    dealt twice (raise or a killed worker), so its path gets as many trials as commit failpoints."""
    if engine == "spark":
        return (*USER_FAILPOINTS, *USER_FAILPOINTS, EXECUTOR_KILL, SIGKILL)
    return CLUSTER_CRASH_POINTS


#: One card of a deck: (crash point, key mode, writer).
Cell = tuple[str, str, str]


def deck_cells(kind: str, backend: str) -> tuple[list[Cell], list[Cell]]:
    """The cells a kind of trial deals on ``backend``: those each pass of the deck must cover (every crash point
    on every path it applies to), then extras dealt after them (the driver's exits in spark-submit trials, which
    resident trials already cover as a raise)."""
    if kind == "host":
        return [(p, m, e) for e in engines(backend) for m in MODES for p in host_points(e)], []
    if kind == "submit":
        must = [(p, m, e) for e in engines(backend) for m in MODES for p in (SIGKILL, *COMPACTION_FAILPOINTS)]
        extra = [
            (p, m, e)
            for e in engines(backend)
            for m in MODES
            for p in (*DRIVER_FAILPOINTS, *(NATIVE_FAILPOINTS if e == "spark" else ()))
        ]
        return must, extra
    if kind == "cluster":
        return [(p, "*", e) for e in engines(backend) for p in cluster_points(e)], []
    raise ValueError(kind)


def expected_cells(kinds: dict[str, int], backends: list[str]) -> set[tuple[str, str]]:
    """(crash point, path) pairs that trials of ``kinds`` (kind -> trials per backend) must arm and fire: for
    each deck dealt through at least once, each card's crash point on its path and every commit failpoint on
    every path the deck holds (each path deals them in turn, and a resident-host or cluster path holds at least
    as many cards as there are commit failpoints)."""
    cells: set[tuple[str, str]] = set()
    for backend in backends:
        for kind, count in kinds.items():
            must, _ = deck_cells(kind, backend)
            if count < len(must):
                continue
            for point, mode, engine in must:
                path = path_of(mode, engine, cluster=kind == "cluster")
                cells.add((point, path))
                cells.update((commit, path) for commit in COMMIT_FAILPOINTS)
    return cells


@dataclass(frozen=True)
class Crash:
    """One armed crash: a failpoint, its kind (``raise``/``exit``) and which hit fires."""

    point: str
    kind: str = "raise"
    hit: int = 1
    #: SIGKILL only: kill this long after the first checkpoint directory appears (None: at a blind time).
    kill_after_first_checkpoint: float | None = None
    #: SIGKILL only, blind: fraction of a typical run's duration.
    kill_fraction: float = 0.5

    @property
    def spec(self) -> str:
        """The ``CKPT_FAILPOINTS`` value ('' for SIGKILL, which is not a failpoint)."""
        return "" if self.point in (SIGKILL, EXECUTOR_KILL) else f"{self.point}={self.kind}@{self.hit}"

    @property
    def needs_own_driver(self) -> bool:
        """Crashes that end the driver process: run with spark-submit, not in the resident host."""
        in_driver = self.point in (*DRIVER_FAILPOINTS, *NATIVE_FAILPOINTS, *COMPACTION_FAILPOINTS)
        return self.point in (SIGKILL, EXECUTOR_KILL) or (in_driver and self.kind == "exit")

    def label(self) -> str:
        if self.point == EXECUTOR_KILL:
            return f"SIGKILL an executor +{self.kill_after_first_checkpoint or 0.0:.1f}s after 1st checkpoint"
        if self.point == SIGKILL:
            when = (
                f"+{self.kill_after_first_checkpoint:.1f}s after 1st checkpoint"
                if self.kill_after_first_checkpoint is not None
                else f"at {self.kill_fraction:.0%} of a run"
            )
            return f"SIGKILL {when}"
        return f"{self.point}={self.kind}@{self.hit}"


@dataclass(frozen=True)
class TrialPlan:
    """Everything a failpoint or SIGKILL trial does; printed with the trial so it can be replayed."""

    campaign_seed: int
    backend: str
    index: int
    crash: Crash
    resume_crash: Crash | None
    commit_crashes: tuple[Crash, ...]
    mode: str
    num_partitions: int
    max_records_per_file: int | None
    policy: RetentionPolicy
    rounds: int
    round2_crash: Crash | None = None
    master: str = "local[2]"
    own_driver: bool = False
    #: Submitted to the standalone cluster (client mode, two single-core workers), with this many attempts per
    #: task (``spark.task.maxFailures``; 2: a lost executor's tasks are retried on the other worker).
    cluster: bool = False
    max_failures: int = 1
    #: ``write_parquet``'s engine: ``spark`` (local output) for the native writer's seal failpoints and
    #: half the SIGKILL, driver and user-code trials of the local backend, else ``arrow`` (the writer's
    #: Python-worker failpoints exist only there).
    engine: str = "arrow"

    @property
    def trial_id(self) -> str:
        kind = "-cluster" if self.cluster else "-submit" if self.own_driver else ""
        return f"{self.backend}{kind}#{self.index}"

    @property
    def path(self) -> str:
        """The trial's path in the report (:func:`path_of`)."""
        return path_of("*" if self.cluster else self.mode, self.engine, cluster=self.cluster)

    def describe(self) -> str:
        parts = [
            f"seed={self.campaign_seed} trial={self.trial_id}",
            f"crash={self.crash.label()}",
            f"resume_crash={self.resume_crash.label() if self.resume_crash else '-'}",
            f"commit_crashes={[c.label() for c in self.commit_crashes] or '-'}",
            f"mode={self.mode} partitions={self.num_partitions} max_records_per_file={self.max_records_per_file}",
            f"policy={self.policy.value} rounds={self.rounds} engine={self.engine}",
        ]
        if self.round2_crash:
            parts.append(f"round2_crash={self.round2_crash.label()}")
        if self.cluster:
            parts.append(f"master=standalone-cluster maxFailures={self.max_failures}")
        elif self.crash.needs_own_driver:
            parts.append(f"master={self.master}")
        return " ".join(parts)


@dataclass(frozen=True)
class StoreFaultPlan:
    """A store-fault trial: the fault, when it starts, whether it ends before the job does."""

    campaign_seed: int
    index: int
    fault: str
    delay: float
    window: float | None  # None: until the job ends
    mode: str
    num_partitions: int
    policy: RetentionPolicy

    @property
    def trial_id(self) -> str:
        return f"s3-fault#{self.index}"

    def describe(self) -> str:
        window = "until the job ends" if self.window is None else f"for {self.window:.1f}s"
        return (
            f"seed={self.campaign_seed} trial={self.trial_id} fault={self.fault} from +{self.delay:.2f}s after the "
            f"write stage began, {window}; mode={self.mode} partitions={self.num_partitions} "
            f"policy={self.policy.value}"
        )


@dataclass
class Planner:
    """Deals trials from one seed."""

    seed: int
    _decks: dict[str, list[str]] = field(default_factory=dict)
    _cells: dict[str, list[Cell]] = field(default_factory=dict)

    def _deal(self, deck: str, cards: tuple[str, ...], index: int) -> str:
        if deck not in self._decks:
            shuffled = list(cards)
            random.Random(f"{self.seed}/deck/{deck}").shuffle(shuffled)
            self._decks[deck] = shuffled
        cards_in_order = self._decks[deck]
        return cards_in_order[index % len(cards_in_order)]

    @staticmethod
    def _executor_crash(rng: random.Random, point: str | None = None) -> Crash:
        point = point or rng.choice(EXECUTOR_FAILPOINTS)
        # Hits count per Python worker and run: a worker sees 1-3 write tasks of a run, a few files each.
        hit = rng.randint(1, 4) if point == "spark.sink.after_file" else rng.choice((1, 1, 2))
        return Crash(point, rng.choice(("raise", "exit")), hit)

    def _crash(self, rng: random.Random, point: str) -> Crash:
        if point == SIGKILL:
            if rng.random() < 0.6:
                return Crash(SIGKILL, "kill", kill_after_first_checkpoint=round(rng.uniform(0.0, 2.0), 2))
            return Crash(SIGKILL, "kill", kill_fraction=round(rng.uniform(0.2, 0.95), 2))
        if point in DRIVER_FAILPOINTS:
            return Crash(point, rng.choice(("raise", "exit")), 1)
        if point in COMPACTION_FAILPOINTS:
            return Crash(point, "exit", 1)
        if point in NATIVE_FAILPOINTS:
            return Crash(point, rng.choice(("raise", "exit")), rng.randint(1, 3))
        if point in USER_FAILPOINTS:
            # Hits count per Python worker: a worker runs 1-3 tasks of a run.
            return Crash(point, rng.choice(("raise", "exit")), rng.choice((1, 1, 2)))
        return self._executor_crash(rng, point)

    def _cell(self, kind: str, backend: str, index: int) -> tuple[Cell, int, int]:
        """Trial ``index``'s cell from the seeded deck of ``kind`` on ``backend``; which pass of the deck it is in
        (0: the first); and how many trials of the same path came before it (it deals the path's commit crash)."""
        name = f"{backend}/{kind}"
        if name not in self._cells:
            must, extra = deck_cells(kind, backend)
            for cards, part in ((must, "cells"), (extra, "extra")):
                random.Random(f"{self.seed}/deck/{name}/{part}").shuffle(cards)
            self._cells[name] = [*must, *extra]
        deck = self._cells[name]
        turn, position = divmod(index, len(deck))
        cell = deck[position]
        per_pass = sum(1 for c in deck if c[1:] == cell[1:])
        before = sum(1 for c in deck[:position] if c[1:] == cell[1:])
        return cell, turn, turn * per_pass + before

    def _commit_crash(self, rng: random.Random, deck: str, path_index: int) -> Crash:
        return Crash(self._deal(deck, COMMIT_FAILPOINTS, path_index), rng.choice(("raise", "exit")), 1)

    def trial(self, backend: str, index: int, *, own_driver: bool = False) -> TrialPlan:
        """Trial ``index`` on ``backend``. ``own_driver``: deal from the crashes that need spark-submit.

        Its crash point, key mode and writer are one card of a seeded deck holding every crash point on every
        path (key mode x writer) it applies to, and each path deals the commit's failpoints in turn: so a pass
        through the deck arms every crash point on every path. In the first pass every crash is dealt where it
        surely fires (its first hit, a SIGKILL soon after the first checkpoint); later passes vary that.
        """
        rng = random.Random(f"{self.seed}/{backend}/{index}/{own_driver}")
        kind = "submit" if own_driver else "host"
        (point, mode, engine), turn, path_index = self._cell(kind, backend, index)
        crash = self._crash(rng, point)
        if own_driver and point in (*DRIVER_FAILPOINTS, *NATIVE_FAILPOINTS, *COMPACTION_FAILPOINTS):
            crash = dataclasses.replace(crash, kind="exit")
        elif not own_driver and (point in DRIVER_FAILPOINTS or point in NATIVE_FAILPOINTS):
            crash = dataclasses.replace(crash, kind="raise")
        if turn == 0:
            crash = self._sure_to_fire(rng, crash)
        native_run = engine == "spark"
        if crash.point in NATIVE_FAILPOINTS:
            # The native writer's own crash, then maybe a failing seal in the resumed run too.
            resume_crash = Crash(rng.choice(NATIVE_FAILPOINTS), "raise", 1) if rng.random() < 0.35 else None
        else:
            resume_crash = self._executor_crash(rng) if rng.random() < 0.35 else None
        commit_crashes = [self._commit_crash(rng, f"{backend}/{kind}-commit/{mode}/{engine}", path_index)]
        if rng.random() < 0.3:
            commit_crashes.append(Crash(rng.choice(COMMIT_FAILPOINTS), rng.choice(("raise", "exit")), 1))
        leaves_orphans = crash.point == SIGKILL or (
            crash.kind == "exit" and crash.point in ORPHAN_POINTS and crash.hit == 1
        )
        if commit_crashes[0].point in ORPHAN_COMMIT_POINTS and not leaves_orphans:
            # Those failpoints sit in the loop over orphans: without one they can never fire (the first
            # campaign armed store.commit.during_delete_orphans 6 times on S3 and it fired 0 times). So the
            # first crash surely fires (partitions stay pending) and the resume leaves an orphan: a worker
            # killed mid-write (Arrow), or the seal of a committed task with files failing (Spark's writer).
            crash = dataclasses.replace(crash, hit=1)
            resume_crash = self._orphan_left(rng, engine)
        policy = rng.choice((RetentionPolicy.DELETE_AFTER_SUCCESS, RetentionPolicy.RETAIN))
        if commit_crashes[0].point in SNAPSHOT_POINTS:
            policy = RetentionPolicy.RETAIN  # only retention's compaction writes a snapshot
        rounds = 2 if policy is RetentionPolicy.RETAIN and rng.random() < 0.4 else 1
        round2_crash = self._executor_crash(rng) if rounds == 2 else None
        if native_run:
            # Spark's writer (any key kind, local output); its crashes are the driver's seal failpoints.
            if resume_crash is not None and resume_crash.point in EXECUTOR_FAILPOINTS:
                resume_crash = Crash(rng.choice(NATIVE_FAILPOINTS), "raise", rng.randint(1, 2))
            if round2_crash is not None:
                round2_crash = Crash(rng.choice(NATIVE_FAILPOINTS), "raise", 1)
        return TrialPlan(
            campaign_seed=self.seed,
            backend=backend,
            index=index,
            crash=crash,
            resume_crash=resume_crash,
            commit_crashes=tuple(commit_crashes),
            mode=mode,
            num_partitions=rng.randint(4, 8),
            max_records_per_file=rng.choice((None, 25)),
            policy=policy,
            rounds=rounds,
            round2_crash=round2_crash,
            master=rng.choice(("local[2]", "local[2,2]")),
            own_driver=own_driver,
            engine=engine,
        )

    @staticmethod
    def _orphan_left(rng: random.Random, engine: str) -> Crash:
        """A resumed run's crash that leaves an orphan for the commit's orphan loop: a worker killed mid-write
        (Arrow), or the seal of a committed task *with files* failing in the driver (Spark's writer). The
        first seal of a resumed run is often an empty task's (its keys were done): failing that one leaves
        nothing (seed 20261127 at 168e1d1: store.commit.during_delete_orphans on comp/S, 3 armed, 0 fired)."""
        if engine == "spark":
            return Crash(SEAL_WITH_FILES, "raise", 1)
        return Crash(rng.choice(ORPHAN_POINTS), "exit", 1)

    @staticmethod
    def _sure_to_fire(rng: random.Random, crash: Crash) -> Crash:
        """The first pass of a deck: the first hit (a worker may see only one task), a SIGKILL of the driver
        soon after the first checkpoint (a blind or late kill may find the job already done)."""
        if crash.point == SIGKILL:
            return Crash(SIGKILL, "kill", kill_after_first_checkpoint=round(rng.uniform(0.0, 0.5), 2))
        if crash.point == EXECUTOR_KILL:
            # A later kill may find a short job done (seed 20261127's s3-cluster#7: +1.5 s, 4 tasks, no kill).
            # Scaled, not drawn again: the trial's other draws stay what that campaign dealt.
            return dataclasses.replace(
                crash, kill_after_first_checkpoint=round((crash.kill_after_first_checkpoint or 0) / 5, 2)
            )
        return dataclasses.replace(crash, hit=1)

    def cluster_trial(self, backend: str, index: int) -> TrialPlan:
        """Trial ``index`` on ``backend`` submitted to the standalone cluster: a crash in the user's code or in
        our executor code, an executor JVM killed, or the driver killed; resumed on the cluster, committed.
        Dealt like :meth:`trial`, from a deck of crash point x writer (the key mode drawn at random)."""
        rng = random.Random(f"{self.seed}/{backend}/{index}/cluster")
        (point, _, engine), turn, path_index = self._cell("cluster", backend, index)
        max_failures = 1
        if point == EXECUTOR_KILL:
            crash = Crash(EXECUTOR_KILL, "kill", kill_after_first_checkpoint=round(rng.uniform(0.0, 1.5), 2))
            max_failures = rng.choice((1, 2))  # 2: Spark retries the lost tasks on the other worker
        else:
            crash = self._crash(rng, point)
        if turn == 0:
            crash = self._sure_to_fire(rng, crash)
        resume_crash = self._executor_crash(rng) if rng.random() < 0.25 and engine == "arrow" else None
        commit_crashes = [
            dataclasses.replace(self._commit_crash(rng, f"{backend}/cluster-commit/{engine}", path_index), kind="raise")
        ]
        policy = rng.choice((RetentionPolicy.DELETE_AFTER_SUCCESS, RetentionPolicy.RETAIN))
        if commit_crashes[0].point in SNAPSHOT_POINTS:
            policy = RetentionPolicy.RETAIN
        if commit_crashes[0].point in ORPHAN_COMMIT_POINTS and crash.point not in (SIGKILL, EXECUTOR_KILL):
            crash = dataclasses.replace(crash, hit=1)
            resume_crash = self._orphan_left(rng, engine)
        return TrialPlan(
            campaign_seed=self.seed,
            backend=backend,
            index=index,
            crash=crash,
            resume_crash=resume_crash,
            commit_crashes=tuple(commit_crashes),
            mode=rng.choice(MODES),
            num_partitions=rng.randint(4, 8),
            max_records_per_file=rng.choice((None, 25)),
            policy=policy,
            rounds=1,
            own_driver=True,
            cluster=True,
            max_failures=max_failures,
            engine=engine,
        )

    def store_fault(self, index: int) -> StoreFaultPlan:
        rng = random.Random(f"{self.seed}/s3-fault/{index}")
        return StoreFaultPlan(
            campaign_seed=self.seed,
            index=index,
            fault=self._deal("store-fault", STORE_FAULTS, index),
            delay=round(rng.uniform(0.0, 1.0), 2),
            window=None if rng.random() < 0.6 else round(rng.uniform(1.0, 3.0), 1),
            mode=rng.choice(("rows", "files")),
            num_partitions=rng.randint(4, 6),
            policy=rng.choice((RetentionPolicy.DELETE_AFTER_SUCCESS, RetentionPolicy.RETAIN)),
        )
