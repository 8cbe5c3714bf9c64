"""Runs of the same job share one store: what a new run does after the earlier ones (docs/airflow.md,
"Re-running a day").

A *job* is what writes one output (for Airflow: a task, its map index and its run's logical date;
``hooks/default_location.py``). Its submits record it in their epochs (metadata ``"job"``) and the
commit copies it into ``commits/{n}.json``. A new submit of the job does, by the store's state:

* ``first`` — nothing of this job ran or was committed here: every key is processed.
* ``resume`` — the latest run did not commit (failed, cleared): its sealed keys are skipped and the
  commit deletes its orphans.
* ``replace`` — the job's output is committed and its keys were not kept (``delete_after_success``):
  every key is processed again and the commit retracts the earlier commits' files, so a reader
  never sees both.
* ``skip`` — as ``replace``, with ``on_rerun="skip"``: nothing runs, the committed output stays.
* ``incremental`` — committed keys were kept (``retain``): only keys not committed yet are processed.

What a commit retracts (:func:`superseded_files`): the files of every earlier commit record of the
same job none of whose checkpoints still counts (valid, or folded into the ``retain`` snapshot), minus
the files the new record names. It goes through the deletion guard like every other deletion.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_ckpt_provider.store.model import EpochStatus

#: Epoch metadata (and commit record field) naming the job a submit ran for.
JOB_METADATA_KEY = "job"
#: Commit record field: output paths of earlier commits of the job this commit retracted.
REPLACED_FIELD = "replaced_files"


class OnRerun(enum.StrEnum):
    """What a run does when its job's output is already committed (``delete_after_success`` stores)."""

    REPLACE = "replace"
    SKIP = "skip"


class RerunAction(enum.StrEnum):
    FIRST = "first"
    RESUME = "resume"
    REPLACE = "replace"
    SKIP = "skip"
    INCREMENTAL = "incremental"


@dataclass(frozen=True)
class RerunPlan:
    """What the next run of a job on this store does, and whose output is live now."""

    action: RerunAction
    #: The newest commit of the store (its epoch number), whose output a reader sees (under ``retain``, with
    #: the earlier commits' output: each commit added its new keys); None if none.
    live_commit: int | None = None
    #: The run that made it (its run id, when a task instance did).
    live_run: str | None = None
    live_files: int = 0
    live_rows: int = 0
    #: Whether the committed keys still count (``retain``): the output a reader sees is every commit's, of
    #: which ``live_*`` describe the newest; False: it is the newest commit's alone.
    earlier_commits_live: bool = False

    def describe(self) -> str:
        # Under retain the output is every commit's (each added its new keys): the newest commit is one part of it.
        what_live = "newest commit" if self.earlier_commits_live else "live output: commit"
        live = (
            f"{what_live} {self.live_commit}"
            + (f" by run {self.live_run}" if self.live_run else "")
            + f" ({self.live_files} files, {self.live_rows} rows"
            + ("; the earlier commits' output stays live)" if self.earlier_commits_live else ")")
            if self.live_commit is not None
            else "no committed output yet"
        )
        what = {
            RerunAction.FIRST: "a run processes every key",
            RerunAction.RESUME: "a run resumes the last one (skips its sealed keys; the commit deletes its orphans)",
            RerunAction.REPLACE: "a re-run processes every key again and its commit replaces the live output",
            RerunAction.SKIP: 'a re-run skips everything (on_rerun="skip"): the live output stays',
            RerunAction.INCREMENTAL: "a run processes only keys not committed yet (retain)",
        }[self.action]
        return f"{live}; {what}"

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "live_commit": self.live_commit,
            "live_run": self.live_run,
            "live_files": self.live_files,
            "live_rows": self.live_rows,
            "earlier_commits_live": self.earlier_commits_live,
        }


def plan_rerun(
    latest_status: EpochStatus | None,
    latest_job: str | None,
    kept_keys: bool,
    newest_commit: Mapping[str, Any] | None,
    job: str | None,
    on_rerun: OnRerun,
    *,
    committed_kept: bool,
) -> RerunPlan:
    """The action of a new submit of ``job``: ``latest_*`` describe the store's latest epoch, ``kept_keys``
    whether any keys still count (valid checkpoints or a snapshot), ``newest_commit`` its newest commit record,
    ``committed_kept`` whether that commit's checkpoints still count (right after a commit the same as
    ``kept_keys``; a failed run after it may have sealed checkpoints that are not committed)."""
    live = _live(newest_commit) | ({"earlier_commits_live": committed_kept} if newest_commit is not None else {})
    if latest_status is None:
        return RerunPlan(RerunAction.FIRST, **live)
    if latest_status is not EpochStatus.COMMITTED:
        return RerunPlan(RerunAction.RESUME, **live)
    if kept_keys:
        return RerunPlan(RerunAction.INCREMENTAL, **live)
    if job is None or latest_job != job:
        return RerunPlan(RerunAction.FIRST, **live)  # another job committed here (a store shared by dates)
    return RerunPlan(RerunAction.SKIP if on_rerun is OnRerun.SKIP else RerunAction.REPLACE, **live)


def _live(record: Mapping[str, Any] | None) -> dict[str, Any]:
    if record is None:
        return {}
    files = record.get("files") or []
    return {
        "live_commit": int(record["epoch"]),
        "live_run": record.get("run_id") if isinstance(record.get("run_id"), str) else None,
        "live_files": len(files),
        "live_rows": sum(int(f.get("num_rows") or 0) for f in files),
    }


def superseded_files(
    records: Sequence[Mapping[str, Any]],
    job: str | None,
    counting: Iterable[str],
    new_paths: Iterable[str],
    canonical: Any,
    live: set[str],
) -> list[str]:
    """Output paths a new commit of ``job`` retracts (see the module docstring). ``records``: the store's
    commit records, oldest first; ``counting``: checkpoint ids that still count; ``canonical``: the URI
    canonicaliser; ``live``: the committed output now (records, replacements and reprocess retractions
    applied), so a path a reprocess already took out is never touched again."""
    if job is None:
        return []
    still = set(counting)
    keep = {canonical(p) for p in new_paths}
    out: set[str] = set()
    for record in records:
        if record.get(JOB_METADATA_KEY) != job or still.intersection(record.get("checkpoint_ids") or []):
            continue
        out.update(
            p for p in (canonical(str(f["path"])) for f in record.get("files", [])) if p in live and p not in keep
        )
    return sorted(out)


def committed_output(records: Sequence[Mapping[str, Any]], canonical: Any) -> set[str]:
    """The output paths the commit records make authoritative, oldest first: each record adds its files
    after removing the ones it replaced (a later record may name a replaced path again)."""
    paths: set[str] = set()
    for record in records:
        paths.difference_update(canonical(str(p)) for p in record.get(REPLACED_FIELD) or [])
        paths.update(canonical(str(f["path"])) for f in record.get("files", []))
    return paths
