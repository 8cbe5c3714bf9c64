"""Fault trials of reprocess, rewind, undo and purge: a crash at one of their failpoints, the re-run
that finishes it, then the next run and its commit, judged by the campaign's oracle.

A trial: two committed rounds of the workload (``retain``), then the action with one failpoint
armed — ``raise`` in this process, or ``exit`` (``os._exit``, a killed process) in a child
process — then checks: nothing was lost at the crash (every output file is in the output or in
the quarantine), a re-run finishes the action (``reprocessing.resume``), ``check()`` is clean, and
after the next run's commit every input row is in the output exactly once (docs/reprocess.md).

The workload's job is passed in (``run_job(store, output_uri, inputs) -> epoch``; default: the
store-API job, fast), so the same trials can run with a Spark job. The campaign runs them with
``python -m bench.fault_campaign --reprocess-trials N`` and CI with ``CKPT_FAULT_REPROCESS_TRIALS``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_ckpt_provider import failpoints
from airflow_ckpt_provider.spark.paths import file_key
from airflow_ckpt_provider.store import (
    REPROCESS_FAILPOINTS,
    CheckpointStore,
    RetentionPolicy,
    Selection,
    open_store,
)
from ckpt_testkit.faults.campaign import TrialResult
from ckpt_testkit.faults.oracle import audit_after_commit, check_store
from ckpt_testkit.faults.store_api_job import run_job as store_api_run_job
from ckpt_testkit.faults.workload import OutputLocation, inputs_of_round

ACTIONS = ("reprocess", "rewind", "undo", "purge")
KINDS = ("raise", "exit")
RunJob = Callable[[CheckpointStore, str, Sequence[str]], int]


def points_of(action: str) -> tuple[str, ...]:
    """The failpoints an action meets (a rewind is a reprocess with another selection)."""
    family = "reprocess" if action == "rewind" else action
    return tuple(p for p in REPROCESS_FAILPOINTS if p.split(".")[1] == family)


@dataclass(frozen=True)
class ReprocessTrial:
    index: int
    action: str
    point: str
    kind: str

    def describe(self) -> str:
        return f"reprocess trial {self.index}: {self.action}, {self.point}={self.kind}"


def deal(seed: str, count: int | None = None) -> list[ReprocessTrial]:
    """Trials for a campaign seed: every (action, failpoint, kind) once, in a seeded order, then
    repeated; ``count`` None: each combination once."""
    combos = [(a, p, k) for a in ACTIONS for p in points_of(a) for k in KINDS]
    random.Random(f"{seed}/reprocess").shuffle(combos)
    count = len(combos) if count is None else count
    return [ReprocessTrial(i, *combos[i % len(combos)]) for i in range(count)]


def _selection(inputs: Sequence[str]) -> Selection:
    return Selection(files=[inputs[1], inputs[4]])  # two input files of round 1 (file keys)


def _operate(store: CheckpointStore, action: str, inputs: Sequence[str]) -> None:
    if action == "reprocess":
        store.reprocessing.run(_selection(inputs))
    elif action == "rewind":
        store.reprocessing.rewind(1)
    elif action == "undo":
        store.reprocessing.undo()
    else:
        store.reprocessing.purge()


def _operate_in_child(store_uri: str, options: Mapping[str, Any], action: str, inputs: Sequence[str], spec: str) -> int:
    """The action in a fresh process with ``CKPT_FAILPOINTS=spec``; returns its exit code."""
    script = textwrap.dedent(
        f"""
        import json
        from airflow_ckpt_provider.store import open_store
        from ckpt_testkit.faults.reprocess_trials import _operate
        store = open_store({store_uri!r}, **json.loads({json.dumps(json.dumps(dict(options)))}))
        _operate(store, {action!r}, json.loads({json.dumps(json.dumps(list(inputs)))}))
        """
    )
    env = {**os.environ, failpoints.ENV_VAR: spec}
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=300).returncode


def _everywhere(store: CheckpointStore, output: OutputLocation) -> set[str]:
    """Names of the files in the output and in the quarantine."""
    names = {p.rsplit("/", 1)[-1] for p in output.files()}
    return names | {i.key.rsplit("/", 1)[-1] for i in store.blobs.list("quarantine/")}


def run_trial(
    trial: ReprocessTrial,
    *,
    backend: str,
    store_uri: str,
    options: Mapping[str, Any],
    output_uri: str,
    inputs: Sequence[str],
    run_job: RunJob = store_api_run_job,
) -> TrialResult:
    """Run one trial; its result lists the violations (none: every promise kept) and whether the
    armed failpoint fired, for the campaign's report."""
    started = time.monotonic()
    result = TrialResult(f"{backend}-reprocess#{trial.index}", backend, trial.describe(), kind="reprocess")
    violations = _run(
        trial, store_uri=store_uri, options=options, output_uri=output_uri, inputs=inputs, run_job=run_job
    )
    fired = not any(v.startswith(f"{trial.point} did not fire") or "the child exited" in v for v in violations)
    result.armed.append((trial.point, fired))
    result.violations += violations
    result.seconds = time.monotonic() - started
    return result


def _run(
    trial: ReprocessTrial,
    *,
    store_uri: str,
    options: Mapping[str, Any],
    output_uri: str,
    inputs: Sequence[str],
    run_job: RunJob,
) -> list[str]:
    # Opened as the operators open it: with the output roots the DAG declares (an S3 store may then
    # declare a local output root, docs/security.md "The trust model").
    store_options = {**options, "trusted_output_roots": [output_uri]}
    store = open_store(store_uri, **store_options)
    output = OutputLocation(output_uri, options)
    for round_number in (1, 2):
        run_job(store, output_uri, inputs_of_round(inputs, round_number))
        store.commit([output_uri])
        store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    if trial.action in ("undo", "purge"):
        store.reprocessing.run(_selection(inputs))
    before = _everywhere(store, output)
    violations: list[str] = []

    if trial.kind == "raise":
        failpoints.enable(trial.point, kind="raise", hit=1)
        try:
            _operate(store, trial.action, inputs)
            violations.append(f"{trial.point} did not fire")
        except failpoints.InjectedFault:
            pass
        finally:
            failpoints.disable_all()
    else:
        code = _operate_in_child(store_uri, store_options, trial.action, inputs, f"{trial.point}=exit")
        if code != failpoints.EXIT_CODE:
            violations.append(f"{trial.point}=exit: the child exited {code}, not {failpoints.EXIT_CODE}")

    lost = before - _everywhere(store, output)
    if lost and trial.action != "purge":
        violations.append(
            f"{len(lost)} files neither in the output nor in the quarantine after the crash: {sorted(lost)[:3]}"
        )
    if store.reprocessing.resume() is None:
        if not trial.point.endswith("before_epoch"):
            violations.append(f"nothing to resume after a crash at {trial.point}")
        _operate(store, trial.action, inputs)  # nothing had happened: do it again
    violations += check_store(store)
    if trial.action in ("reprocess", "rewind"):
        pending = set(file_key(p) for p in inputs) - set(store.get_checkpointed_keys().column(0).to_pylist())
        wanted = {file_key(inputs[1]), file_key(inputs[4])} if trial.action == "reprocess" else None
        if wanted is not None and not wanted <= pending:
            violations.append(
                f"the selected files are not pending after the {trial.action}: {sorted(wanted - pending)}"
            )

    run_job(store, output_uri, inputs)
    store.commit([output_uri])
    store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    audit = audit_after_commit(store, output, inputs, mode="files", policy=RetentionPolicy.RETAIN, store_faults=False)
    return violations + audit.violations
