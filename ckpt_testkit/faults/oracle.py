"""The campaign's oracle: what must hold after a commit, however the run before it crashed.

Every check reads the state back with plain tools — pyarrow for the output, the
store's own records for the commits — and returns violations as sentences; an
empty list means the trial kept every promise:

* every input row exactly once in the output directory, read by a plain Parquet reader;
* no file named by any commit record is gone;
* no orphan after a successful commit: every file under the output root is in a
  commit record, or the commit reported it (``unknown_files``, ``kept_unprovable``);
* without store faults, nothing is unknown or kept (every file was announced);
* ``store.inspection.check()`` reports no problem;
* retention did what it says (``retain``: the done keys are exactly the input
  keys, once each; ``delete_after_success``: no checkpoint directory is left).

And after a failed run (:func:`progress_violations`): the keys of every write task
Spark reports finished are sealed; and for every run (:func:`reprocessed_violations`):
no key sealed before the run started went through the user's transformation again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_ckpt_provider.store import CheckpointStore, RetentionPolicy
from airflow_ckpt_provider.store.reprocess.records import retracted_paths
from ckpt_testkit.faults.workload import (
    OutputLocation,
    done_key_values,
    exactly_once_violations,
    expected_keys,
    expected_rows,
    key_of_row,
)
from ckpt_testkit.spark_events import finished_write_tasks


@dataclass
class Audit:
    violations: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CommitRecords:
    """Everything the store's commits say about the output."""

    committed: frozenset[str]
    unknown: frozenset[str]
    kept: frozenset[str]
    deleted: frozenset[str]
    latest_done_epoch: int | None

    @classmethod
    def read(cls, store: CheckpointStore) -> CommitRecords:
        committed: set[str] = set()
        unknown: set[str] = set()
        kept: set[str] = set()
        deleted: set[str] = set()
        latest: int | None = None
        for info in store.blobs.list("commits/"):
            record: dict[str, Any] = json.loads(store.blobs.get(info.key)[0])
            if info.key.endswith(".done.json"):
                unknown.update(record.get("unknown_files", ()))
                kept.update(record.get("kept_unprovable", ()))
                deleted.update(record.get("deleted_files", ()))
                latest = max(latest or 0, int(record["epoch"]))
            else:
                committed.update(str(f["path"]) for f in record.get("files", ()))
        # A reprocess or rewind took these out of the committed output on purpose (docs/reprocess.md).
        committed -= retracted_paths(store.blobs)
        return cls(frozenset(committed), frozenset(unknown), frozenset(kept), frozenset(deleted), latest)


def file_violations(records: CommitRecords, on_disk: set[str]) -> list[str]:
    """After a successful commit: no file a commit record names is gone, and every file under the output
    root is committed, or was reported by the commit (unknown, kept unprovable)."""
    violations = []
    gone = sorted(records.committed - on_disk)
    if gone:
        violations.append(f"{len(gone)} committed files were deleted, e.g. {gone[:3]}")
    orphans = sorted(on_disk - records.committed - records.unknown - records.kept)
    if orphans:
        violations.append(f"{len(orphans)} orphans left after a successful commit, e.g. {orphans[:3]}")
    return violations


def check_store(store: CheckpointStore) -> list[str]:
    """``store.inspection.check()`` problems (it must never raise either: a crash mid-way is its job to describe)."""
    try:
        report = store.inspection.check()
    except Exception as exc:  # the checker itself failing is a finding
        return [f"store.inspection.check() raised {type(exc).__name__}: {exc}"]
    return [f"store.inspection.check(): {p}" for p in report.problems]


def audit_after_commit(
    store: CheckpointStore,
    output: OutputLocation,
    inputs: Sequence[str],
    *,
    mode: str,
    policy: RetentionPolicy,
    store_faults: bool,
) -> Audit:
    """Every promise of a successful commit (see the module doc)."""
    audit = Audit()
    violations = audit.violations
    on_disk = output.files()
    records = CommitRecords.read(store)
    violations += exactly_once_violations(output.read_rows(), expected_rows(inputs))
    violations += file_violations(records, on_disk)
    if not store_faults and (records.unknown or records.kept):
        violations.append(
            f"without store faults every file has an intent, yet the commit reported {len(records.unknown)} "
            f"unknown and kept {len(records.kept)} unprovable files"
        )
    deleted_committed = sorted(records.deleted & records.committed)
    if deleted_committed:
        violations.append(f"a commit deleted committed files: {deleted_committed[:3]}")
    try:
        epoch = store.epochs.current()
        if epoch is None or records.latest_done_epoch != epoch.number:
            violations.append(f"the latest epoch ({epoch and epoch.number}) is not the committed one")
    except Exception as exc:  # an unreadable store is a finding, not a harness error
        violations.append(f"the store's epochs cannot be read: {type(exc).__name__}: {exc}")
    violations += check_store(store)
    try:
        violations += _retention_violations(store, inputs, mode=mode, policy=policy, store_faults=store_faults)
    except Exception as exc:
        violations.append(f"the store's done keys cannot be read: {type(exc).__name__}: {exc}")
    return audit


def _retention_violations(
    store: CheckpointStore, inputs: Sequence[str], *, mode: str, policy: RetentionPolicy, store_faults: bool
) -> list[str]:
    violations: list[str] = []
    if policy is RetentionPolicy.RETAIN and not store_faults:
        keys = done_key_values(store.get_checkpointed_keys())
        want = expected_keys(inputs, mode)
        if len(keys) != len(set(keys)):
            violations.append(f"the store holds {len(keys) - len(set(keys))} done keys twice")
        if set(keys) != want:
            lost, extra = sorted(want - set(keys)), sorted(set(keys) - want)
            violations.append(
                f"done keys differ from the input keys: {len(lost)} missing {lost[:3]}, extra {extra[:3]}"
            )
    if policy is RetentionPolicy.DELETE_AFTER_SUCCESS:
        left = store.blobs.list_dirs("checkpoints/") + store.blobs.list_dirs("attempts/")
        if left:
            violations.append(f"delete_after_success left {len(left)} checkpoint or attempt directories")
        segments = store.blobs.list_dirs("segments/")
        if segments or store.blobs.exists("state.json"):
            violations.append(f"delete_after_success left {len(segments)} segments or the state object")
    return violations


@dataclass(frozen=True)
class ProgressCheck:
    finished: int
    keys: int
    violations: list[str]


def progress_violations(
    store: CheckpointStore,
    event_log: Path,
    output: str,
    key_log: Path,
    inputs: Sequence[str],
    mode: str,
    *,
    unsealable: int = 0,
) -> ProgressCheck:
    """The progress oracle, after a failed run whose driver lived: the keys sealed hold every key of every
    write task Spark's event log records as finished (``ckpt_testkit.spark_events``); the job's own
    transformation logged which rows each task attempt held (``t<task attempt id>.rows``).

    ``unsealable``: how many finished tasks the crash itself may have left unsealed (a failpoint that
    raises inside one task's seal on the driver: that task committed its files, its seal failed). Every
    other finished task must be sealed whole."""
    try:
        finished = finished_write_tasks(event_log, output, timeout=30.0)
    except TimeoutError:
        return ProgressCheck(0, 0, [])  # the write job never started (the run failed before it)
    key_of = key_of_row(inputs, mode)
    per_task: list[set[Any]] = []
    for task in finished:
        path = key_log / f"t{task.task_attempt_id}.rows"
        rows = {int(line) for line in path.read_text().splitlines() if line.strip()} if path.exists() else set()
        per_task.append({key_of[row] for row in rows if row in key_of})
    wanted = set().union(*per_task)
    try:
        sealed = set(done_key_values(store.get_checkpointed_keys()))
    except Exception as exc:  # unreadable done keys are a finding, not a harness error
        return ProgressCheck(len(finished), 0, [f"progress oracle: done keys unreadable: {exc}"])
    unsealed_tasks = [keys - sealed for keys in per_task if keys - sealed]
    violations = []
    if len(unsealed_tasks) > unsealable:
        lost = set().union(*unsealed_tasks)
        violations.append(
            f"progress oracle: {len(lost)} keys of {len(unsealed_tasks)} of {len(finished)} finished write tasks "
            f"are not sealed ({unsealable} may be), e.g. {sorted(lost, key=str)[:5]}"
        )
    return ProgressCheck(len(finished), len(wanted), violations)


def sealed_keys(store: CheckpointStore) -> set[Any] | None:
    """The done keys now, as :func:`~ckpt_testkit.faults.workload.key_of_row` spells them (None: unreadable,
    which the other oracles report)."""
    try:
        return set(done_key_values(store.get_checkpointed_keys()))
    except Exception:  # reported by check_store and the audit; this oracle then has nothing to compare
        return None


def reprocessed_violations(
    key_log: Path, sealed_before: set[Any], inputs: Sequence[str], mode: str
) -> tuple[int, list[str]]:
    """The rerun oracle: no row of a key sealed before the run started went through the user's transformation
    in that run (any task attempt: the job's transformation logs the rows each attempt held). Returns how many
    distinct keys the run processed, and the violations."""
    key_of = key_of_row(inputs, mode)
    processed: set[Any] = set()
    for path in key_log.glob("t*.rows"):
        # A worker killed mid-write leaves its last line cut short: only whole lines count.
        lines = path.read_text().split("\n")[:-1]
        processed.update(key_of[int(line)] for line in lines if line.strip())
    again = processed & sealed_before
    if not again:
        return len(processed), []
    return len(processed), [
        f"rerun oracle: {len(again)} keys sealed before the run started were processed again, "
        f"e.g. {sorted(again, key=str)[:5]}"
    ]
