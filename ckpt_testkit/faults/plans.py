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
#: Failpoints inside one task's seal: raised in the driver (Spark's writer seals there), they leave that one
#: task committed but unsealed. The progress oracle allows that task, and only it.
ONE_SEAL_POINTS = (
    "spark.native.before_seal",
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

    def trial(self, backend: str, index: int, *, own_driver: bool = False) -> TrialPlan:
        """Trial ``index`` on ``backend``. ``own_driver``: deal from the crashes that need spark-submit."""
        rng = random.Random(f"{self.seed}/{backend}/{index}/{own_driver}")
        native = NATIVE_FAILPOINTS if backend == "local" else ()
        if own_driver:
            point = self._deal(
                f"{backend}/driver", (SIGKILL, *DRIVER_FAILPOINTS, *COMPACTION_FAILPOINTS, *native), index
            )
            crash = self._crash(rng, point)
            if point in (*DRIVER_FAILPOINTS, *NATIVE_FAILPOINTS, *COMPACTION_FAILPOINTS):
                crash = dataclasses.replace(crash, kind="exit")
        else:
            point = self._deal(
                f"{backend}/host", (*USER_FAILPOINTS, *EXECUTOR_FAILPOINTS, *DRIVER_FAILPOINTS, *native), index
            )
            crash = self._crash(rng, point)
            if point in DRIVER_FAILPOINTS or point in NATIVE_FAILPOINTS:
                crash = dataclasses.replace(crash, kind="raise")
        if crash.point in NATIVE_FAILPOINTS:
            # The native writer's own crash, then maybe a failing seal in the resumed run too.
            resume_crash = Crash(rng.choice(NATIVE_FAILPOINTS), "raise", 1) if rng.random() < 0.35 else None
        else:
            resume_crash = self._executor_crash(rng) if rng.random() < 0.35 else None
        commit_crashes: list[Crash] = []
        if rng.random() < 0.8:
            first = self._deal(f"{backend}/commit", COMMIT_FAILPOINTS, index)
            commit_crashes.append(Crash(first, rng.choice(("raise", "exit")), 1))
            if rng.random() < 0.3:
                commit_crashes.append(Crash(rng.choice(COMMIT_FAILPOINTS), rng.choice(("raise", "exit")), 1))
        leaves_orphans = (
            crash.point == SIGKILL
            or crash.point == "spark.native.before_seal"  # the committed task's files are never sealed
            or (crash.kind == "exit" and crash.point in ORPHAN_POINTS and crash.hit == 1)
        )
        if commit_crashes and commit_crashes[0].point in ORPHAN_COMMIT_POINTS and not leaves_orphans:
            # Those failpoints sit in the loop over orphans: without one they can never fire (the first
            # campaign armed store.commit.during_delete_orphans 6 times on S3 and it fired 0 times). So the
            # first crash surely fires (partitions stay pending) and the resume kills a worker mid-write.
            crash = dataclasses.replace(crash, hit=1)
            resume_crash = Crash(rng.choice(ORPHAN_POINTS), "exit", 1)
        policy = rng.choice((RetentionPolicy.DELETE_AFTER_SUCCESS, RetentionPolicy.RETAIN))
        rounds = 2 if policy is RetentionPolicy.RETAIN and rng.random() < 0.4 else 1
        mode = rng.choice(MODES)
        round2_crash = self._executor_crash(rng) if rounds == 2 else None
        engine = "arrow"
        native_run = crash.point in NATIVE_FAILPOINTS or (
            crash.point not in EXECUTOR_FAILPOINTS and native and rng.random() < 0.5
        )
        if native_run:
            # Spark's writer (any key kind, local output); its crashes are the driver's seal failpoints.
            engine = "spark"
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

    def cluster_trial(self, backend: str, index: int) -> TrialPlan:
        """Trial ``index`` on ``backend`` submitted to the standalone cluster: a crash in the user's code or in
        our executor code, an executor JVM killed, or the driver killed; resumed on the cluster, committed."""
        rng = random.Random(f"{self.seed}/{backend}/{index}/cluster")
        point = self._deal(f"{backend}/cluster", CLUSTER_CRASH_POINTS, index)
        max_failures = 1
        if point == EXECUTOR_KILL:
            crash = Crash(EXECUTOR_KILL, "kill", kill_after_first_checkpoint=round(rng.uniform(0.0, 1.5), 2))
            max_failures = rng.choice((1, 2))  # 2: Spark retries the lost tasks on the other worker
        else:
            crash = self._crash(rng, point)
        resume_crash = self._executor_crash(rng) if rng.random() < 0.25 else None
        commit_crashes: list[Crash] = []
        if rng.random() < 0.5:
            commit_crashes.append(Crash(self._deal(f"{backend}/cluster-commit", COMMIT_FAILPOINTS, index), "raise", 1))
        mode = rng.choice(MODES)
        # Spark's writer (local output only) for half the trials whose crash is not in the Arrow writer.
        engine = "arrow"
        if backend == "local" and point not in EXECUTOR_FAILPOINTS and rng.random() < 0.5:
            engine = "spark"
            resume_crash = None
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
            policy=rng.choice((RetentionPolicy.DELETE_AFTER_SUCCESS, RetentionPolicy.RETAIN)),
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
