"""Campaign trials of a mapped DAG: mapped instances of one checkpointed spark-submit task running at once.

The DAG is the tenants DAG of the test suite (``tests/support/dags/tenants_dag.py``): the mapped
task ``tenants`` runs ``CheckpointedSparkSubmitOperator`` once per tenant (map index 0: tenant ``a``,
300 orders; map index 1: tenant ``b``, 400 orders), each instance on its own default store, its
``order_no`` keys overlapping the other's. A trial, in a real Airflow installation (SQLite metadata
DB, the Airflow CLI):

1. triggers a DAG run, then starts both instances at once (``airflow tasks test ... --map-index N``,
   each in its own process group, as two workers of a deployment run them);
2. crashes one of them (the *victim*): its user code raising on a bad record (``user.bad_record``),
   a failpoint of our executor code (raise, or the Python worker killed), or the whole instance
   SIGKILLed (worker, spark-submit and executors) after its first checkpoint;
3. retries the victim (the same owner takes its epoch over), then commits each instance's store as
   the mapped ``commit`` task does (``store.commit`` + retention).

Oracles: the other instance succeeded undisturbed; the crash fired; *progress* — after a failed run
whose driver lived, every write task Spark's event log records as finished has a sealed checkpoint
of that partition; *rerun* — the retry skipped exactly the keys sealed before it; after the commits,
each tenant's orders exactly once for a plain Parquet reader, no committed file deleted, no orphan,
``check()`` clean, and no key of one tenant in the other's store.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow.dataset as ds

from airflow_ckpt_provider.store import CheckpointStore, RetentionPolicy, open_store
from ckpt_testkit.faults.campaign import TrialResult
from ckpt_testkit.faults.oracle import CommitRecords, check_store, file_violations
from ckpt_testkit.faults.plans import EXECUTOR_FAILPOINTS
from ckpt_testkit.faults.workload import OutputLocation
from ckpt_testkit.spark_events import finished_write_tasks

DAG_ID = "ckpt_tenants"
TASK_ID = "tenants"
#: Map index -> (tenant, orders, key weight) as tenants_dag.py and tenant_job.py define them.
TENANTS = {0: ("a", 300, ord("a")), 1: ("b", 400, ord("b"))}
#: A bad record in the user's transformation (``TENANTS_BAD_KEY``): the UDF raises on it.
BAD_RECORD = "user.bad_record"
#: The victim instance's whole process group SIGKILLed (its worker, spark-submit and executors).
KILL_INSTANCE = "sigkill.instance"
MAPPED_CRASH_POINTS = (BAD_RECORD, KILL_INSTANCE, *EXECUTOR_FAILPOINTS)
#: The mapped trials' path in the campaign report.
PATH = "mapped DAG"


class Installation(Protocol):
    """What a trial needs of an Airflow installation (``tests.support.airflow_harness.AirflowHarness``)."""

    home: Path
    env: dict[str, str]

    def airflow(
        self, *args: str, env: Mapping[str, str] | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]: ...

    def default_store_uri(self, dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> str: ...


@dataclass(frozen=True)
class MappedTrial:
    """One mapped-DAG trial, drawn from the campaign seed."""

    seed: int
    index: int
    victim: int
    point: str
    kind: str
    #: ``user.bad_record``: the order that is malformed; SIGKILL: seconds after the victim's first seal.
    bad_order: int = 0
    kill_after: float = 0.0
    hit: int = 1
    row_delay_ms: int = 5
    #: ``write_parquet``'s engine for every run of the trial (``arrow`` for our executor failpoints).
    engine: str = "spark"

    @property
    def trial_id(self) -> str:
        return f"mapped#{self.index}"

    def describe(self) -> str:
        if self.point == BAD_RECORD:
            crash = f"{BAD_RECORD} order {self.bad_order}"
        elif self.point == KILL_INSTANCE:
            crash = f"{KILL_INSTANCE} +{self.kill_after:.1f}s after its first checkpoint"
        else:
            crash = f"{self.point}={self.kind}@{self.hit}"
        return (
            f"seed={self.seed} trial={self.trial_id} victim=map_index {self.victim} crash={crash} "
            f"row_delay_ms={self.row_delay_ms} engine={self.engine}"
        )


def deal(seed: int, index: int) -> MappedTrial:
    """Trial ``index`` of a campaign: the crash points dealt in a seeded order, the rest drawn."""
    points = list(MAPPED_CRASH_POINTS)
    random.Random(f"{seed}/mapped/deck").shuffle(points)
    point = points[index % len(points)]
    rng = random.Random(f"{seed}/mapped/{index}")
    victim = rng.choice(sorted(TENANTS))
    rows = TENANTS[victim][1]
    return MappedTrial(
        seed=seed,
        index=index,
        victim=victim,
        point=point,
        kind=rng.choice(("raise", "exit")) if point in EXECUTOR_FAILPOINTS else "kill",
        bad_order=rng.randrange(rows // 4, rows),
        kill_after=round(rng.uniform(0.0, 1.5), 2),
        # The first pass through the deck crashes at the first hit, so every point surely fires once.
        hit=1 if index < len(points) else rng.choice((1, 2)),
        row_delay_ms=10 if point == KILL_INSTANCE else 2,
        engine="arrow" if point in EXECUTOR_FAILPOINTS else rng.choice(("arrow", "spark")),
    )


def install(harness: Installation, dags: Path) -> None:
    """Put the tenants DAG in the installation (once per campaign)."""
    for name in ("tenants_dag.py", "tenant_job.py"):
        (harness.home / "dags" / name).write_bytes((dags / name).read_bytes())
    done = harness.airflow("dags", "reserialize", timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"airflow dags reserialize failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def run_trial(trial: MappedTrial, harness: Installation, work: Path) -> TrialResult:
    """Run one trial; the result lists the violations and whether the crash fired."""
    started = time.monotonic()
    result = TrialResult(trial.trial_id, "local", trial.describe(), kind="mapped", path=PATH)
    try:
        _run(trial, harness, work / f"t{trial.index}-{uuid.uuid4().hex[:6]}", result)
    except Exception as exc:  # the harness must report, not die: a crash here is a finding too
        result.violations.append(f"trial raised {type(exc).__name__}: {exc}")
    result.seconds = time.monotonic() - started
    return result


def _run(trial: MappedTrial, harness: Installation, where: Path, result: TrialResult) -> None:
    where.mkdir(parents=True)
    run_id = f"campaign-{trial.seed}-{trial.index}-{where.name[-6:]}"
    triggered = harness.airflow("dags", "trigger", DAG_ID, "-r", run_id, timeout=600)
    if triggered.returncode != 0:
        raise RuntimeError(f"airflow dags trigger failed:\n{triggered.stdout[-2000:]}{triggered.stderr[-2000:]}")
    output = where / "out"
    base = {
        "TENANTS_OUTPUT": str(output),
        "TENANTS_ROW_DELAY_MS": str(trial.row_delay_ms),
        "TENANTS_ENGINE": trial.engine,
    }
    stores = {i: open_store(harness.default_store_uri(DAG_ID, TASK_ID, run_id, i)) for i in TENANTS}
    events = where / "events"
    victim_env = dict(base, TENANTS_EVENT_LOG=str(events))
    if trial.point == BAD_RECORD:
        victim_env["TENANTS_BAD_KEY"] = f"{TENANTS[trial.victim][0]}:{trial.bad_order}"
    elif trial.point in EXECUTOR_FAILPOINTS:
        victim_env["CKPT_FAILPOINTS"] = f"{trial.point}={trial.kind}@{trial.hit}"

    procs = {
        i: start_instance(harness, run_id, i, victim_env if i == trial.victim else base, where / f"run-{i}.log")
        for i in TENANTS
    }
    killed = False
    if trial.point == KILL_INSTANCE:
        killed = _kill_after_first_seal(procs[trial.victim], stores[trial.victim], trial.kill_after)
    for proc in procs.values():
        proc.wait(timeout=1800)
    # `airflow tasks test` exits 0 whether the task succeeded or failed: the task's final state is in its log.
    ok = {i: instance_succeeded(where / f"run-{i}.log") for i in TENANTS}
    other = 1 - trial.victim
    result.note(f"first runs: succeeded {ok} (victim map_index {trial.victim})")
    if not ok[other]:
        result.violations.append(f"map_index {other} failed beside the victim: {_tail(where / f'run-{other}.log')}")
    fired = killed if trial.point == KILL_INSTANCE else not ok[trial.victim] and _fired(trial, where)
    result.armed.append((trial.point, fired))
    if ok[trial.victim]:
        if trial.point not in EXECUTOR_FAILPOINTS or trial.hit == 1:
            result.violations.append(f"the victim's run succeeded: the crash never happened ({trial.describe()})")
    else:
        result.violations += [f"after the crash: {p}" for p in check_store(stores[trial.victim])]
        if not killed:
            _check_progress(stores[trial.victim], events, output / TENANTS[trial.victim][0], result)
    sealed = _keys(stores[trial.victim])
    result.note(f"victim sealed {len(sealed)} keys before its retry")

    # The victim's retry: the same owner takes its open epoch over and skips what was sealed.
    retry = start_instance(harness, run_id, trial.victim, base, where / "retry.log")
    retry.wait(timeout=1800)
    if not instance_succeeded(where / "retry.log"):
        result.violations.append(f"the victim's retry failed: {_tail(where / 'retry.log')}")
        return
    if sealed:
        log = (where / "retry.log").read_text(errors="replace")
        if f"skipping {len(sealed)} keys already done" not in log:
            result.violations.append(f"rerun oracle: the retry did not skip exactly the {len(sealed)} sealed keys")
        result.rerun_checks += 1
        result.sealed_at_start += len(sealed)

    for i, (tenant, rows, weight) in TENANTS.items():
        # As the DAG's mapped commit task does (its output_roots are the instance's output directory).
        store = stores[i]
        store.commit([str(output / tenant)])
        store.housekeeping.cleanup(RetentionPolicy.RETAIN)
        result.violations += [f"map_index {i}: {v}" for v in _audit(store, output / tenant, rows, weight)]


def start_instance(
    harness: Installation, run_id: str, map_index: int, env: Mapping[str, str], log: Path
) -> subprocess.Popen[str]:
    """``airflow tasks test`` of one mapped instance of ``tenants``, in its own process group (so it can be
    killed whole, its spark-submit with it), as a worker of a real deployment runs it."""
    with open(log, "w", encoding="utf-8") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "airflow", "tasks", "test", DAG_ID, TASK_ID, run_id, "--map-index", str(map_index)],
            env={**harness.env, **env},
            cwd=harness.home,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )


def instance_succeeded(log: Path) -> bool:
    """Did the task instance end in ``success`` (the last state update its log records)? ``airflow tasks
    test`` exits 0 whether the task succeeded or failed (Airflow 3.3), so its exit code cannot say."""
    text = log.read_text(errors="replace") if log.exists() else ""
    states = [line.split("new_state=", 1)[1].split()[0] for line in text.splitlines() if "new_state=" in line]
    return bool(states) and states[-1] == "success"


def _kill_after_first_seal(proc: subprocess.Popen[str], store: CheckpointStore, delay: float) -> bool:
    """SIGKILL the instance's process group ``delay`` s after its first checkpoint seals; False if it ended first."""
    while proc.poll() is None:
        try:
            sealed = bool(store.inspection.valid_checkpoints())
        except Exception:  # the store does not exist yet
            sealed = False
        if sealed:
            time.sleep(delay)
            if proc.poll() is not None:
                return False
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
            return True
        time.sleep(0.2)
    return False


def _fired(trial: MappedTrial, where: Path) -> bool:
    log = (where / f"run-{trial.victim}.log").read_text(errors="replace")
    if trial.point == BAD_RECORD:
        return f"order {trial.bad_order} of tenant {TENANTS[trial.victim][0]} is malformed" in log
    return f"failpoint {trial.point} " in log or "exited unexpectedly" in log or "exit code 17" in log


def _check_progress(store: CheckpointStore, events: Path, output: Path, result: TrialResult) -> None:
    """Every write task Spark's event log records as finished has a sealed checkpoint of its partition."""
    try:
        finished = finished_write_tasks(events, f"file://{output}", timeout=30.0)
    except TimeoutError:
        return  # the write job never started
    sealed = {c.partition for c in store.inspection.valid_checkpoints()}
    result.progress_checks += 1
    result.finished_tasks += len(finished)
    lost = sorted(t.partition for t in finished if t.partition not in sealed)
    if lost:
        result.violations.append(f"progress oracle: finished write tasks of partitions {lost} are not sealed")


def _keys(store: CheckpointStore) -> list[Any]:
    try:
        return list(store.get_checkpointed_keys().column(0).to_pylist())
    except Exception:  # nothing sealed yet: no store, or an empty one
        return []


def _audit(store: CheckpointStore, output: Path, rows: int, weight: int) -> list[str]:
    """One tenant's output and store after its commit."""
    problems: list[str] = []
    files = OutputLocation(f"file://{output}", {}).files()  # every file under the root
    # What a plain Parquet reader of the directory sees (it skips _/. names, as the campaign's readers do).
    table = ds.dataset(str(output), format="parquet").to_table() if files else None
    orders = table.column("order_no").to_pylist() if table is not None else []
    counts = Counter(orders)
    missing = sorted(set(range(rows)) - set(counts))
    twice = sorted(k for k, c in counts.items() if c > 1)
    extra = sorted(set(counts) - set(range(rows)))
    if missing or twice or extra:
        problems.append(
            f"orders missing {missing[:5]} ({len(missing)}), twice {twice[:5]} ({len(twice)}), extra {extra[:5]}"
        )
    if table is not None and table.column("amount").to_pylist() != [o * weight for o in orders]:
        problems.append("amounts differ from order_no x the tenant's weight (another tenant's rows?)")
    problems += file_violations(CommitRecords.read(store), files)
    problems += check_store(store)
    keys = _keys(store)
    if sorted(keys) != list(range(rows)):
        problems.append(f"the store's done keys are not this tenant's orders once each ({len(keys)} keys)")
    return problems


def _tail(path: Path, limit: int = 1500) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-limit:].replace("\n", " | ")
