"""Runs of the same job share one store: what a new run does after the earlier ones, and what its
commit does with their output (docs/store-api.md, "Re-running a job"; docs/airflow.md, "Re-running a day").

A *job* is what writes one output. Every run names it when it opens its epoch
(``store.epochs.begin(job=...)``: for Airflow a task, its map index and its run's logical date,
``hooks/default_location.py``); a run that names none is for the store's one output
(:data:`DEFAULT_JOB`: one store, one output, when nobody says otherwise). The epoch records it and the
commit copies it into ``commits/{n}.json``, so the store's own history says, for every caller alike
(the operators, the TaskFlow operator, ``CheckpointedJob`` without Airflow, any direct caller):

* ``first`` — nothing ran here yet, or another job's output is the newest commit: every key is processed.
* ``resume`` — the latest run did not commit (failed, cleared): its sealed keys are skipped and the
  commit deletes its orphans.
* ``replace`` — the job's output is committed and its keys no longer count (``delete_after_success``,
  which records so before it deletes anything; ``Epoch.keys_deleted``): every key is processed again and
  the commit retracts the earlier commits' files, so a reader never sees both.
* ``skip`` — as ``replace``, with ``on_rerun="skip"``: nothing runs, the committed output stays.
* ``incremental`` — committed keys still count (``retain``, or no retention at all): only keys not
  committed yet are processed.

What a commit does with the live files of the earlier commits (:func:`earlier_output`): those of a
record any of whose checkpoints still counts are part of the output (each such run added its keys).
Of the others, only those under the directories this run writes to (:func:`within_roots`: the roots its
driver declared, else its opener's) are considered: those of the same job are retracted (replaced),
through the deletion guard like every other deletion; those of another named job sharing the store are
that job's output and stay; any other — a job named on one side only, or a record of an earlier
layout that names none — cannot be told from a duplicate, and the commit refuses with
:class:`RefusedError` (``earlier_output_live``) naming them and the ways out, before anything is
committed or deleted.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_ckpt_provider.store.deletion_guard import parse_location
from airflow_ckpt_provider.store.errors import InvalidArgumentError, RefusedError
from airflow_ckpt_provider.store.model import JOB_METADATA_KEY, EpochStatus

__all__ = [
    "DEFAULT_JOB",
    "JOB_METADATA_KEY",
    "KEPT_FIELD",
    "REPLACED_FIELD",
    "EarlierOutput",
    "OnRerun",
    "RerunAction",
    "RerunPlan",
    "committed_output",
    "earlier_output",
    "job_name",
    "on_rerun_of",
    "plan_rerun",
    "record_job",
    "within_roots",
]

#: The job of a run that names none: the store's one output.
DEFAULT_JOB = "default"
#: Commit record field: output paths of earlier commits of the job this commit retracted.
REPLACED_FIELD = "replaced_files"
#: Commit record field: live files of earlier commits that this commit could not attribute and that its caller
#: kept knowingly (``unknown_files="keep"``): output beside this commit's from then on, never asked about again.
KEPT_FIELD = "kept_earlier_files"


class OnRerun(enum.StrEnum):
    """What a run does when its job's output is already committed and its keys no longer count."""

    REPLACE = "replace"
    SKIP = "skip"


def on_rerun_of(value: OnRerun | str) -> OnRerun:
    """``value`` as an :class:`OnRerun` (case and surrounding blanks ignored, as a templated field renders it).
    Raises :class:`InvalidArgumentError` (``out_of_range``) for anything else."""
    try:
        return OnRerun(str(value).strip().lower())
    except ValueError:
        raise InvalidArgumentError(
            f"on_rerun={value!r}: give 'replace' (a re-run of committed output processes every key again and its "
            "commit replaces that output) or 'skip' (it runs nothing); nothing was changed",
            reason="out_of_range",
        ) from None


class RerunAction(enum.StrEnum):
    FIRST = "first"
    RESUME = "resume"
    REPLACE = "replace"
    SKIP = "skip"
    INCREMENTAL = "incremental"


def job_name(job: str | None, metadata: Mapping[str, Any] | None = None) -> str:
    """The job an epoch records: ``job``, or :data:`DEFAULT_JOB` when None. Raises
    :class:`InvalidArgumentError` (``job``) for an empty or non-string name, or for ``metadata`` that names
    a job itself (one way to name it: the ``job`` argument)."""
    if metadata and JOB_METADATA_KEY in metadata:
        raise InvalidArgumentError(
            f"the epoch's metadata names a {JOB_METADATA_KEY!r}: name the job with store.epochs.begin(job=...) "
            "(CheckpointedJob(job=...)); nothing was changed",
            reason="job",
        )
    if job is None:
        return DEFAULT_JOB
    if not isinstance(job, str) or not job.strip():
        raise InvalidArgumentError(
            f"job={job!r} is not a job name: give a non-empty string naming the output the run writes (e.g. "
            "'daily_orders/date=2024-06-01'), or None for the store's one output; nothing was changed",
            reason="job",
        )
    return job


def record_job(record: Mapping[str, Any]) -> str | None:
    """The job a commit record names; None for a record of an earlier layout that names none."""
    value = record.get(JOB_METADATA_KEY)
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class RerunPlan:
    """What the next run of a job on this store does, and whose output is live now."""

    action: RerunAction
    #: The job the plan is for.
    job: str = DEFAULT_JOB
    #: The newest commit of the store (its epoch number), whose output a reader sees (under ``retain``, with
    #: the earlier commits' output: each commit added its new keys); None if none.
    live_commit: int | None = None
    #: The run that made it (its run id, when a task instance did).
    live_run: str | None = None
    #: The job it was for (None: a commit of an earlier layout, which names none).
    live_job: str | None = None
    live_files: int = 0
    live_rows: int = 0
    #: Whether the committed keys still count (``retain``): the output a reader sees is every commit's, of
    #: which ``live_*`` describe the newest; False: it is the newest commit's alone.
    earlier_commits_live: bool = False

    @property
    def another_job_live(self) -> bool:
        """Whether the newest commit is another job's (or names none) and its keys no longer count."""
        return self.live_commit is not None and not self.earlier_commits_live and self.live_job != self.job

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
        if self.action is RerunAction.FIRST and self.another_job_live:
            what += (
                f" (the live output is job {self.live_job!r}'s: it stays"
                if self.live_job is not None and DEFAULT_JOB not in (self.job, self.live_job)
                else f" (the live output is {_whose(self.live_job)}, not job {self.job!r}'s: the commit refuses "
                "over its files where this run writes; name the job the run is for"
            ) + ")"
        return f"{live}; {what}"

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "job": self.job,
            "live_commit": self.live_commit,
            "live_run": self.live_run,
            "live_job": self.live_job,
            "live_files": self.live_files,
            "live_rows": self.live_rows,
            "earlier_commits_live": self.earlier_commits_live,
        }


def _whose(job: str | None) -> str:
    return "a commit that names no job (an earlier layout)" if job is None else f"job {job!r}'s"


def plan_rerun(
    latest_status: EpochStatus | None,
    kept_keys: bool,
    newest_commit: Mapping[str, Any] | None,
    job: str | None,
    on_rerun: OnRerun,
    *,
    committed_kept: bool,
) -> RerunPlan:
    """The action of a new run of ``job`` (None: :data:`DEFAULT_JOB`): ``latest_status`` is the store's latest
    epoch's, ``kept_keys`` whether any keys still count (valid checkpoints or a snapshot), ``newest_commit``
    its newest commit record, ``committed_kept`` whether that commit's checkpoints still count (right after a
    commit the same as ``kept_keys``; a failed run after it may have sealed checkpoints that are not
    committed)."""
    name = job_name(job)
    live = _live(newest_commit) | ({"earlier_commits_live": committed_kept} if newest_commit is not None else {})
    if latest_status is None:
        return RerunPlan(RerunAction.FIRST, name, **live)
    if latest_status is not EpochStatus.COMMITTED:
        return RerunPlan(RerunAction.RESUME, name, **live)
    if kept_keys:
        return RerunPlan(RerunAction.INCREMENTAL, name, **live)
    if newest_commit is None or record_job(newest_commit) != name:
        return RerunPlan(RerunAction.FIRST, name, **live)  # another job committed here (a store shared by dates)
    return RerunPlan(RerunAction.SKIP if on_rerun is OnRerun.SKIP else RerunAction.REPLACE, name, **live)


def _live(record: Mapping[str, Any] | None) -> dict[str, Any]:
    if record is None:
        return {}
    files = record.get("files") or []
    return {
        "live_commit": int(record["epoch"]),
        "live_run": record.get("run_id") if isinstance(record.get("run_id"), str) else None,
        "live_job": record_job(record),
        "live_files": len(files),
        "live_rows": sum(int(f.get("num_rows") or 0) for f in files),
    }


@dataclass(frozen=True)
class EarlierOutput:
    """What a new commit does with the live files of the earlier commits whose keys no longer count."""

    #: Files of earlier commits of the same job: the new commit retracts them (canonical URIs, sorted).
    replaced: tuple[str, ...] = ()
    #: Files it cannot attribute, by earlier commit: (its epoch, its job or None, its files).
    unattributed: tuple[tuple[int, str | None, tuple[str, ...]], ...] = ()

    @property
    def unattributed_paths(self) -> tuple[str, ...]:
        return tuple(sorted({p for _, _, paths in self.unattributed for p in paths}))

    def without(self, gone: Iterable[str]) -> EarlierOutput:
        """The same, without the unattributed files in ``gone`` (no longer there: a reader cannot see them)."""
        absent = set(gone)
        kept = tuple(
            (epoch, job, tuple(p for p in paths if p not in absent))
            for epoch, job, paths in self.unattributed
            if any(p not in absent for p in paths)
        )
        return EarlierOutput(self.replaced, kept)


def earlier_output(
    records: Sequence[Mapping[str, Any]],
    job: str | None,
    counting: Iterable[str],
    new_paths: Iterable[str],
    canonical: Callable[[str], str],
    live: set[str],
    within: Callable[[str], bool],
) -> EarlierOutput:
    """Sort the live files of earlier commits for a new commit of ``job`` (None: its epoch names none), as the
    module docstring says. ``records``: the store's commit records, oldest first; ``counting``: checkpoint ids
    that still count (valid, or folded into the ``retain`` snapshot); ``new_paths``: the new record's files;
    ``canonical``: the URI canonicaliser; ``live``: the committed output now (records, replacements and
    reprocess retractions applied, so a path already taken out is never touched again); ``within``: whether a
    path lies where this run writes. Reads nothing."""
    still = set(counting)
    keep = {canonical(p) for p in new_paths}
    counted: set[str] = set()
    acknowledged: set[str] = set()
    for record in records:
        acknowledged.update(canonical(str(p)) for p in record.get(KEPT_FIELD) or [])
        if still.intersection(record.get("checkpoint_ids") or []):
            counted.update(_paths(record, canonical))
    replaced: set[str] = set()
    found: list[tuple[int, str | None, set[str]]] = []
    for record in records:
        if still.intersection(record.get("checkpoint_ids") or []):
            continue  # its keys still count: its files are part of the output
        paths = {
            p
            for p in _paths(record, canonical)
            if p in live and p not in keep and p not in counted and p not in acknowledged and within(p)
        }
        if not paths:
            continue
        theirs = record_job(record)
        if job is not None and theirs == job:
            replaced |= paths
        elif job is None or theirs is None or DEFAULT_JOB in (job, theirs):
            found.append((int(record["epoch"]), theirs, paths))
        # else: another named job's output, sharing the store (and perhaps the directory): it stays
    unattributed = tuple(
        (epoch, theirs, tuple(sorted(paths - replaced))) for epoch, theirs, paths in found if paths - replaced
    )
    return EarlierOutput(tuple(sorted(replaced)), unattributed)


def _paths(record: Mapping[str, Any], canonical: Callable[[str], str]) -> set[str]:
    return {canonical(str(f["path"])) for f in record.get("files") or []}


def within_roots(roots: Sequence[str]) -> Callable[[str], bool]:
    """Whether a path lies under one of ``roots`` (canonical locations); every path when there are none."""
    parsed = [r for r in (parse_location(root) for root in roots) if r is not None]
    if not parsed:
        return lambda _path: True

    def inside(path: str) -> bool:
        found = parse_location(path)
        return found is not None and any(found.is_under(root) for root in parsed)

    return inside


def refuse_unattributed(uri: str, job: str | None, earlier: EarlierOutput, new_files: int) -> None:
    """:class:`RefusedError` (``earlier_output_live``, ``exc.paths``) for the live files of earlier commits
    that the new commit of ``job`` cannot attribute (:func:`earlier_output`)."""
    if not earlier.unattributed:
        return
    paths = earlier.unattributed_paths
    commits = "; ".join(
        f"commit {epoch} ({_whose(theirs)}, {len(files)} file(s))" for epoch, theirs, files in earlier.unattributed
    )
    shown = "\n  ".join(paths[:20]) + (f"\n  ... and {len(paths) - 20} more" if len(paths) > 20 else "")
    named = [theirs for _, theirs, _ in earlier.unattributed if theirs is not None]
    rename = (
        f"if this run re-did that output, run it as the same job (job={named[-1]!r}: store.epochs.begin(job=...), "
        "CheckpointedJob(job=...)) so that its commit replaces it — discard this run's work first "
        "(`airflow-ckpt discard`); "
        if named
        else ""
    )
    raise RefusedError(
        f"{len(paths)} file(s) of earlier commits of {uri} are live where this run of "
        f"{'an epoch that names no job' if job is None else f'job {job!r}'} writes, and their keys no longer count: "
        f"{commits}:\n  {shown}\nThe store cannot tell whether they are an earlier copy of this run's output "
        f"(a reader would read their rows beside the {new_files} file(s) this commit makes authoritative) or "
        "another job's. Nothing was committed or deleted. Ways out: "
        + rename
        + "if they are an earlier copy, move them out of the output roots and retry the commit; if they are "
        'another output\'s, keep them knowingly: store.commit(unknown_files="keep"), '
        'CheckpointCommitOperator(unknown_files="keep") or `airflow-ckpt commit --keep-unknown-files` (this '
        "commit records them, and later commits keep them too)",
        reason="earlier_output_live",
        paths=paths,
    )


def committed_output(records: Sequence[Mapping[str, Any]], canonical: Callable[[str], str]) -> set[str]:
    """The output paths the commit records make authoritative, oldest first: each record adds its files
    after removing the ones it replaced (a later record may name a replaced path again)."""
    paths: set[str] = set()
    for record in records:
        paths.difference_update(canonical(str(p)) for p in record.get(REPLACED_FIELD) or [])
        paths.update(canonical(str(f["path"])) for f in record.get("files", []))
    return paths
