"""Run fault-injection trials and count them: crash, resume, commit (crashing there too), audit.

A failpoint trial arms one crash in the example job (a failpoint of the write
task, of the driver, or a SIGKILL of the whole driver), runs the job until it
crashes, resumes it (maybe crashing again), commits (maybe crashing in the commit,
then retrying), and audits the result with :mod:`ckpt_testkit.faults.oracle`. Every
trial's seed and plan are printed, so any trial can be replayed alone.

Used by ``tests/faults`` (a few trials per run) and ``python -m bench.fault_campaign``
(as many as you like).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_ckpt_provider.store import CheckpointStore, open_store
from ckpt_testkit.faults.jobs.fault_job import USER_AFTER_EXCHANGE
from ckpt_testkit.faults.oracle import (
    audit_after_commit,
    check_store,
    progress_violations,
    reprocessed_violations,
    sealed_keys,
)
from ckpt_testkit.faults.plans import (
    EXECUTOR_FAILPOINTS,
    EXECUTOR_KILL,
    ONE_SEAL_POINTS,
    SIGKILL,
    USER_FAILPOINTS,
    Crash,
    TrialPlan,
)
from ckpt_testkit.faults.processes import REPO_ROOT, RunOutcome, SparkHost, run_commit, run_submit
from ckpt_testkit.faults.workload import OutputLocation, inputs_of_round
from ckpt_testkit.spark_cluster import SparkStandaloneCluster
from ckpt_testkit.spark_events import event_log_confs


@dataclass(frozen=True)
class Backend:
    """Where trials put their store and output: a local directory or an S3 bucket."""

    name: str
    root: str  # file:///abs/dir or s3://bucket/prefix
    options: Mapping[str, Any] = field(default_factory=dict)

    def locate(self, trial_id: str) -> tuple[str, str]:
        """A fresh (store URI, output URI) pair for one trial."""
        base = f"{self.root.rstrip('/')}/{trial_id.replace('#', '-')}-{uuid.uuid4().hex[:6]}"
        return f"{base}/store", f"{base}/out"


@dataclass
class TrialResult:
    trial_id: str
    backend: str
    description: str
    violations: list[str] = field(default_factory=list)
    #: (failpoint or SIGKILL, fired?) for every crash armed in this trial.
    armed: list[tuple[str, bool]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    seconds: float = 0.0
    degraded: bool = False
    kind: str = "failpoint"
    #: The job's path in the report (``TrialPlan.path``, e.g. ``C:*/S``; ``mapped DAG``); empty: none.
    path: str = ""
    #: Failed runs the progress oracle checked, and the tasks Spark recorded as finished in them.
    progress_checks: int = 0
    finished_tasks: int = 0
    #: Runs that started with keys sealed (the rerun oracle checked them), and those keys.
    rerun_checks: int = 0
    sealed_at_start: int = 0

    def note(self, line: str) -> None:
        self.log.append(line)


@dataclass
class CampaignReport:
    """Counts per failpoint and backend, store-fault outcomes, races, and every violation."""

    seed: int
    trials: list[TrialResult] = field(default_factory=list)
    races: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    #: When the last trial or race was recorded: in pytest other tests run after the campaign's.
    last: float = field(default_factory=time.monotonic)
    #: (crash point, path) pairs the decks dealt must arm and fire (:func:`ckpt_testkit.faults.plans.expected_cells`).
    expected: set[tuple[str, str]] = field(default_factory=set)

    def add(self, result: TrialResult) -> None:
        self.trials.append(result)
        self.last = time.monotonic()

    def add_race(self, race: dict[str, Any]) -> None:
        self.races.append(race)
        self.last = time.monotonic()

    @property
    def violations(self) -> list[str]:
        found = [f"[{t.trial_id}] {v}  ({t.description})" for t in self.trials for v in t.violations]
        found += [f"[race {r['name']}] {v}" for r in self.races for v in r.get("violations", ())]
        return found

    def format(self) -> str:
        backends = sorted({t.backend for t in self.trials if t.kind in ("failpoint", "reprocess", "mapped")})
        armed, fired = self._tally(lambda trial: trial.backend)
        lines = [
            f"Fault campaign seed={self.seed}: {len(self.trials)} trials, {len(self.violations)} violations, "
            f"wall {self.last - self.started:.0f}s",
            "",
        ]
        if armed:
            width = max(len(p) for p, _ in armed) + 2
            header = "crash point".ljust(width) + "".join(f"{b + ' armed/fired':>20}" for b in backends)
            lines += [header, "-" * len(header)]
            for point in sorted({p for p, _ in armed}):
                cells = "".join(f"{f'{armed[(point, b)]}/{fired[(point, b)]}':>20}" for b in backends)
                lines.append(point.ljust(width) + cells)
            per_backend = Counter(t.backend for t in self.trials if t.kind == "failpoint")
            lines.append("trials".ljust(width) + "".join(f"{per_backend[b]:>20}" for b in backends))
            for kind in ("reprocess", "mapped"):
                counted = Counter(t.backend for t in self.trials if t.kind == kind)
                if counted:
                    lines.append(f"{kind} trials".ljust(width) + "".join(f"{counted[b]:>20}" for b in backends))
            lines.append("")
            lines += self._by_path(width, armed, fired)
        faults = [t for t in self.trials if t.kind == "store-fault"]
        if faults:
            lines.append("Store faults (S3 store through the TCP proxy; output on local disk)")
            by_fault: dict[str, list[TrialResult]] = {}
            for trial in faults:
                by_fault.setdefault(trial.description.split("fault=")[1].split()[0], []).append(trial)
            for fault, group in sorted(by_fault.items()):
                degraded = sum(t.degraded for t in group)
                bad = sum(bool(t.violations) for t in group)
                lines.append(f"  {fault:<10} trials {len(group):>3}   degraded {degraded:>3}   with violations {bad}")
            lines.append("")
        for race in self.races:
            lines.append(f"Race {race['name']}: {race['summary']}")
        if self.races:
            lines.append("")
        checks = sum(t.progress_checks for t in self.trials)
        if checks:
            finished = sum(t.finished_tasks for t in self.trials)
            lines.append(
                f"Progress oracle: {checks} failed runs checked, {finished} finished write tasks (Spark's event "
                "log), every one's keys sealed unless listed below"
            )
            lines.append("")
        reruns = sum(t.rerun_checks for t in self.trials)
        if reruns:
            sealed = sum(t.sealed_at_start for t in self.trials)
            lines.append(
                f"Rerun oracle: {reruns} runs started with keys sealed ({sealed} keys in all); none of those keys "
                "went through the user's transformation again unless listed below"
            )
            lines.append("")
        seconds = [t.seconds for t in self.trials]
        if seconds:
            lines.append(
                f"trial seconds: median {statistics.median(seconds):.1f}, max {max(seconds):.1f}, "
                f"sum {sum(seconds):.0f}"
            )
        if self.violations:
            lines.append("VIOLATIONS:")
            lines += [f"  {v}" for v in self.violations]
        return "\n".join(lines)

    def _tally(self, column: Callable[[TrialResult], str]) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]]:
        """Armed and fired counts per (crash point, ``column(trial)``); trials whose column is empty are left out."""
        armed: Counter[tuple[str, str]] = Counter()
        fired: Counter[tuple[str, str]] = Counter()
        for trial in self.trials:
            if column(trial):
                for point, did_fire in trial.armed:
                    armed[(point, column(trial))] += 1
                    fired[(point, column(trial))] += int(did_fire)
        return armed, fired

    def _by_path(
        self, width: int, by_backend: Counter[tuple[str, str]], fired_by_backend: Counter[tuple[str, str]]
    ) -> list[str]:
        """Armed/fired per crash point and job path (key mode / writer), both backends together."""
        paths = sorted({t.path for t in self.trials if t.path})
        if not paths:
            return []
        armed, fired = self._tally(lambda trial: trial.path)
        cell = max(9, *(len(p) + 2 for p in paths))
        header = "by path".ljust(width) + "".join(f"{p:>{cell}}" for p in paths)
        lines = [header, "-" * len(header)]
        for point in sorted({p for p, _ in armed}):
            cells = "".join(
                f"{f'{armed[(point, p)]}/{fired[(point, p)]}' if armed[(point, p)] else '-':>{cell}}" for p in paths
            )
            lines.append(point.ljust(width) + cells)
        trials = Counter(t.path for t in self.trials if t.path)
        lines.append("trials".ljust(width) + "".join(f"{trials[p]:>{cell}}" for p in paths))
        legend = (
            "  paths: key mode (rows: several rows per key; uniq: unique row keys; comp: composite row keys; "
            "files: file keys) / writer (A: Arrow, S: Spark's own); C: on the standalone cluster (any key mode: *)"
        )
        return [*lines, legend, "", *self._coverage(armed, fired, by_backend, fired_by_backend), ""]

    def _coverage(
        self,
        armed: Counter[tuple[str, str]],
        fired: Counter[tuple[str, str]],
        by_backend: Counter[tuple[str, str]],
        fired_by_backend: Counter[tuple[str, str]],
    ) -> list[str]:
        """Did every crash point fire on every path it applies to? Against the decks dealt through (expected)."""
        never_fired = sorted(cell for cell in armed if not fired[cell])
        lines = [f"Coverage: {sum(1 for c in armed if fired[c])} (crash point, path) cells fired of {len(armed)} armed"]
        if self.expected:
            missing = sorted(self.expected - {c for c in armed if fired[c]})
            held = len(self.expected)
            lines[0] += f"; the decks dealt hold {held}, {held - len(missing)} of them fired"
            lines += [f"  expected, never fired: {point} on {path}" for point, path in missing]
        lines += [f"  armed, never fired: {point} on {path}" for point, path in never_fired]
        lines += [
            f"  armed, never fired on the {backend} backend: {point}"
            for point, backend in sorted(by_backend)
            if not fired_by_backend[(point, backend)]
        ]
        return lines


def _fired(crash: Crash, outcome: RunOutcome) -> bool:
    """Did this run end at its armed crash (and not for some other reason)?

    A crash on an executor fails the job with the failpoint's error or, when Spark
    reports a sibling Python worker of the failed task first, "Python worker
    exited unexpectedly"; both count. Any other failure is a finding.
    """
    if crash.point == EXECUTOR_KILL:  # the run may well succeed: Spark retries the lost tasks elsewhere
        return bool(outcome.extra.get("executor_killed"))
    if outcome.ok:
        return False
    if crash.point == SIGKILL:
        return outcome.killed
    if outcome.returncode == 17 or f"failpoint {crash.point} " in outcome.error:
        return True
    in_worker = crash.point in EXECUTOR_FAILPOINTS or crash.point in USER_FAILPOINTS
    return in_worker and "exited unexpectedly" in outcome.error


class Campaign:
    """Runs trials against backends with one resident Spark host; collects a :class:`CampaignReport`."""

    def __init__(
        self,
        seed: int,
        work_dir: Path,
        host: SparkHost,
        inputs: Sequence[str],
        backends: Mapping[str, Backend],
        *,
        report: CampaignReport | None = None,
        echo: Callable[[str], None] = print,
        cluster: SparkStandaloneCluster | None = None,
    ) -> None:
        self.seed = seed
        self.work_dir = work_dir
        self.host = host
        self.inputs = list(inputs)
        self.backends = dict(backends)
        self.echo = echo
        self.report = report if report is not None else CampaignReport(seed)
        self._submit_seconds: list[float] = []
        #: The standalone cluster for ``plan.cluster`` trials (started by the caller).
        self.cluster = cluster

    # ------------------------------------------------------------------ one trial

    def run_trial(self, plan: TrialPlan) -> TrialResult:
        backend = self.backends[plan.backend]
        result = TrialResult(plan.trial_id, plan.backend, plan.describe(), path=plan.path)
        self.echo(f"trial {plan.describe()}")
        started = time.monotonic()
        store_uri, output_uri = backend.locate(plan.trial_id)
        store = open_store(store_uri, **backend.options)
        output = OutputLocation(output_uri, backend.options)
        try:
            for round_number in range(1, plan.rounds + 1):
                inputs = inputs_of_round(self.inputs, round_number)
                spec = {
                    "store_uri": store_uri,
                    "output": output_uri,
                    "inputs": inputs,
                    "mode": plan.mode,
                    "num_partitions": plan.num_partitions,
                    "max_records_per_file": plan.max_records_per_file,
                    "owner": f"campaign-{plan.trial_id}",
                    "engine": plan.engine,
                }
                crash = plan.crash if round_number == 1 else plan.round2_crash
                resume = plan.resume_crash if round_number == 1 else None
                if not self._run_to_completion(plan, spec, crash, resume, backend, store, result):
                    break
                if not self._commit(plan, store_uri, output_uri, backend, store, result):
                    break
                audit = audit_after_commit(
                    store, output, inputs, mode=plan.mode, policy=plan.policy, store_faults=False
                )
                result.violations += [f"round {round_number}: {v}" for v in audit.violations]
        except Exception as exc:  # the harness must report, not die: a crash here is a finding too
            result.violations.append(f"trial raised {type(exc).__name__}: {exc}")
        finally:
            store.close()
        result.seconds = time.monotonic() - started
        verdict = "OK" if not result.violations else f"{len(result.violations)} VIOLATIONS: {result.violations}"
        self.echo(f"  -> {verdict} in {result.seconds:.1f}s")
        self.report.add(result)
        return result

    def _run_to_completion(
        self,
        plan: TrialPlan,
        spec: dict[str, Any],
        crash: Crash | None,
        resume: Crash | None,
        backend: Backend,
        store: CheckpointStore,
        result: TrialResult,
    ) -> bool:
        """Run, resume after each crash; True once a run succeeded. Violations go to ``result``."""
        attempts: list[Crash | None] = [crash]
        if resume is not None:
            attempts.append(resume)
        attempts.append(None)
        for number, armed in enumerate(attempts):
            sealed_before = sealed_keys(store)
            outcome = self._run(plan, spec, armed, backend, store, number)
            self._check_rerun(spec, outcome, sealed_before, result)
            fired = armed is not None and _fired(armed, outcome)
            if armed is not None:
                result.armed.append((armed.point, fired))
            what = armed.label() if armed else "unarmed"
            state = "ok" if outcome.ok else f"failed ({outcome.short_error(160)})"
            result.note(f"run {number} [{what}] via {outcome.where}: {state} in {outcome.seconds:.1f}s")
            self.echo(f"  run {number} [{what}] via {outcome.where}: {state} in {outcome.seconds:.1f}s")
            if outcome.ok:
                writes = (outcome.result or {}).get("writes") or [{}]
                result.note(
                    f"  result: rows {writes[0].get('rows')} files {writes[0].get('files')} keys "
                    f"{writes[0].get('keys')} sealed {writes[0].get('sealed_partitions')}/{writes[0].get('partitions')}"
                )
                if outcome.result is not None and outcome.result.get("degraded"):
                    result.violations.append(f"run {number} reported degraded=True without any store fault")
                return True
            if armed is None:
                result.violations.append(f"a run without failpoints failed: {outcome.short_error(600)}")
                return False
            if not fired:
                result.violations.append(f"run {number} failed, but not at {what}: {outcome.short_error(600)}")
            result.violations += [f"after the crash at {what}: {p}" for p in check_store(store)]
            self._check_progress(spec, outcome, store, result, what, armed)
        return False

    @staticmethod
    def _check_rerun(
        spec: Mapping[str, Any], outcome: RunOutcome, sealed_before: set[Any] | None, result: TrialResult
    ) -> None:
        """Rerun oracle: a run processes no key that was sealed when it started (whatever became of the run)."""
        key_log = outcome.extra.get("key_log")
        if not sealed_before or not key_log:
            return
        processed, violations = reprocessed_violations(Path(key_log), sealed_before, spec["inputs"], spec["mode"])
        result.rerun_checks += 1
        result.sealed_at_start += len(sealed_before)
        result.note(f"  rerun: {len(sealed_before)} keys sealed at the start, {processed} keys processed")
        result.violations += violations

    def _check_progress(
        self,
        spec: Mapping[str, Any],
        outcome: RunOutcome,
        store: CheckpointStore,
        result: TrialResult,
        what: str,
        armed: Crash,
    ) -> None:
        """Progress oracle: after a failed run whose driver lived, every finished write task's keys are sealed
        (but the one whose seal the failpoint failed)."""
        key_log = outcome.extra.get("key_log")
        if outcome.where not in ("host", "cluster") or outcome.extra.get("host_lost") or outcome.killed:
            return  # a dead driver logs no end of its job, and seals nothing after its death
        if not key_log:
            return
        check = progress_violations(
            store,
            Path(outcome.extra.get("event_dir") or self.host.event_dir),
            str(spec["output"]),
            Path(key_log),
            spec["inputs"],
            spec["mode"],
            unsealable=1 if armed.point in ONE_SEAL_POINTS and armed.kind == "raise" else 0,
        )
        result.progress_checks += 1
        result.finished_tasks += check.finished
        result.note(f"  progress: {check.finished} write tasks finished, {check.keys} of their keys sealed")
        result.violations += [f"after the crash at {what}: {v}" for v in check.violations]

    def _run(
        self,
        plan: TrialPlan,
        spec: Mapping[str, Any],
        armed: Crash | None,
        backend: Backend,
        store: CheckpointStore,
        number: int,
    ) -> RunOutcome:
        run_id = f"{plan.trial_id}/{number}/{uuid.uuid4().hex[:6]}"
        # The user's transformation logs the rows each task attempt held (the progress and rerun oracles' input).
        key_log = self.work_dir / "keys" / run_id.replace("/", "_").replace("#", "-")
        key_log.mkdir(parents=True, exist_ok=True)
        spec = {**spec, "key_log": str(key_log)}
        if plan.cluster:
            outcome = self._run_on_cluster(plan, spec, armed, backend, store, run_id)
            outcome.extra["key_log"] = str(key_log)
            return outcome
        if armed is None or not armed.needs_own_driver:
            outcome = self.host.run(spec, backend.options, armed.spec if armed else "", run_id=run_id)
            outcome.extra["key_log"] = str(key_log)
            return outcome
        kill_when = self._kill_condition(armed, store) if armed.point == SIGKILL else None
        outcome = run_submit(
            spec,
            backend.options,
            armed.spec,
            log_prefix=self.work_dir / "logs" / run_id.replace("/", "_").replace("#", "-"),
            master=plan.master,
            kill_when=kill_when,
        )
        if outcome.ok:
            self._submit_seconds.append(outcome.seconds)
        outcome.extra["key_log"] = str(key_log)
        return outcome

    def _run_on_cluster(
        self,
        plan: TrialPlan,
        spec: Mapping[str, Any],
        armed: Crash | None,
        backend: Backend,
        store: CheckpointStore,
        run_id: str,
    ) -> RunOutcome:
        """spark-submit to the standalone cluster (client mode): failpoints reach the executors' Python workers
        through ``spark.executorEnv``; an executor JVM is SIGKILLed, or the driver, when the crash says so."""
        cluster = self.cluster
        if cluster is None:
            raise RuntimeError("cluster trials need Campaign(cluster=a started SparkStandaloneCluster)")
        name = run_id.replace("/", "_").replace("#", "-")
        events = self.work_dir / "events" / name
        failpoints = armed.spec if armed else ""
        if armed is not None and armed.point == EXECUTOR_KILL:
            # Pace the write tasks (each sleeps a moment in the user's transformation), so that the kill lands
            # while the stage runs, not after a 400-row job has finished.
            failpoints = f"{USER_AFTER_EXCHANGE}=sleep:0.5@*"
        conf = {
            "spark.executor.memory": "768m",
            "spark.pyspark.python": sys.executable,
            "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
            "spark.executorEnv.PYTHONPATH": str(REPO_ROOT),
            "spark.executorEnv.CKPT_FAILPOINTS": failpoints,
            "spark.task.maxFailures": str(plan.max_failures),
            **event_log_confs(events),
        }
        kill_when = self._kill_condition(armed, store) if armed is not None and armed.point == SIGKILL else None
        killed: list[int] = []
        on_poll = None
        if armed is not None and armed.point == EXECUTOR_KILL:
            ready = self._kill_condition(armed, store)

            def on_poll() -> None:
                if killed or not ready():
                    return
                for pid in cluster.executor_pids()[:1]:  # a lost machine: the JVM and its Python workers
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)

        outcome = run_submit(
            spec,
            backend.options,
            failpoints,
            log_prefix=self.work_dir / "logs" / name,
            master=cluster.master_url,
            kill_when=kill_when,
            conf=conf,
            on_poll=on_poll,
        )
        outcome.where = "cluster"
        outcome.extra.update(event_dir=str(events), executor_killed=bool(killed))
        return outcome

    def _kill_condition(self, crash: Crash, store: CheckpointStore) -> Callable[[], bool]:
        """When to SIGKILL: a moment after the first new attempt directory appears (a task started writing), or at
        a blind time."""
        started = time.monotonic()
        if crash.kill_after_first_checkpoint is None:
            typical = statistics.median(self._submit_seconds) if self._submit_seconds else 30.0
            deadline = crash.kill_fraction * typical
            return lambda: time.monotonic() - started >= deadline
        before = set(store.blobs.list_dirs("attempts/"))
        seen_at: list[float] = []
        last_poll = [0.0]

        def condition() -> bool:
            now = time.monotonic()
            if not seen_at and now - last_poll[0] >= 0.2:
                last_poll[0] = now
                if set(store.blobs.list_dirs("attempts/")) - before:
                    seen_at.append(now)
            assert crash.kill_after_first_checkpoint is not None
            return bool(seen_at) and now - seen_at[0] >= crash.kill_after_first_checkpoint

        return condition

    def _commit(
        self,
        plan: TrialPlan,
        store_uri: str,
        output_uri: str,
        backend: Backend,
        store: CheckpointStore,
        result: TrialResult,
    ) -> bool:
        spec = {"store_uri": store_uri, "output_roots": [output_uri], "degraded": False, "policy": plan.policy.value}
        for crash in plan.commit_crashes:
            outcome = run_commit(spec, backend.options, crash.spec)
            fired = outcome.returncode == 17 or f"failpoint {crash.point} " in outcome.error
            result.armed.append((crash.point, fired))
            state = "ok" if outcome.ok else f"failed ({outcome.short_error(120)})"
            result.note(f"commit [{crash.label()}]: {state}")
            self.echo(f"  commit [{crash.label()}]: {state} in {outcome.seconds:.1f}s")
            if outcome.ok:
                return True
            if not fired:
                result.violations.append(f"the commit failed, but not at {crash.label()}: {outcome.short_error(600)}")
            result.violations += [f"after the commit crash at {crash.label()}: {p}" for p in check_store(store)]
        outcome = run_commit(spec, backend.options, "")
        self.echo(f"  commit [unarmed]: {'ok' if outcome.ok else 'FAILED'} in {outcome.seconds:.1f}s")
        if not outcome.ok:
            result.violations.append(f"the commit did not succeed on retry: {outcome.short_error(600)}")
            return False
        summary = (outcome.result or {}).get("result", {})
        result.note(f"commit: {json.dumps({k: len(v) if isinstance(v, list) else v for k, v in summary.items()})}")
        return True
