"""The commit: the only authority over output files (docs/design.md, invariant 5).

Phase 1 writes ``commits/{n}.json`` naming every file of every valid checkpoint, in
one atomic write, after checking that the valid checkpoints' keys are disjoint.
Phase 2 deletes orphans: files a writer of this store recorded an intent for that no
valid checkpoint owns, and unsealed or invalid checkpoint directories. A rerun after
a crash in either phase finishes the job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.deletion_guard import canonical_uri
from airflow_ckpt_provider.store.errors import InvalidArgumentError, PreconditionFailedError, RefusedError
from airflow_ckpt_provider.store.input_audit import audit_findings
from airflow_ckpt_provider.store.key_reader import key_sources
from airflow_ckpt_provider.store.keys import duplicate_keys
from airflow_ckpt_provider.store.layout import commit_done_key, commit_key
from airflow_ckpt_provider.store.model import CommitResult, Epoch, EpochStatus, FileMetadata, UnknownFiles
from airflow_ckpt_provider.store.parts import PartsUser
from airflow_ckpt_provider.store.records import commit_result_from_json, dumps, now
from airflow_ckpt_provider.store.reprocess.lineage import read_snapshot_index, write_lineage
from airflow_ckpt_provider.store.reprocess.maintenance import refuse_unfinished_maintenance
from airflow_ckpt_provider.store.reprocess.records import PLAN_FIELD
from airflow_ckpt_provider.store.rerun import (
    JOB_METADATA_KEY,
    KEPT_FIELD,
    REPLACED_FIELD,
    EarlierOutput,
    earlier_output,
    refuse_unattributed,
    within_roots,
)
from airflow_ckpt_provider.store.segment_reader import segment_intents
from airflow_ckpt_provider.store.state import StateReader
from airflow_ckpt_provider.store.store_state import StoreState
from airflow_ckpt_provider.store.sweep import OrphanSweep, plan_orphan_sweep


@dataclass
class _OrphanPlan:
    """A commit's phase 2, listed and sorted but not run: the orphan sweep and the stale directories."""

    state: StoreState
    record: Mapping[str, Any]
    committed_files: tuple[FileMetadata, ...]
    sweep: OrphanSweep
    stale_ids: tuple[str, ...]
    degraded: bool
    refused_records: list[str]
    #: Files of earlier commits of the same job that this commit retracts (a re-run replaced them).
    replaced: tuple[str, ...] = ()

    @property
    def unknown(self) -> tuple[str, ...]:
        return self.sweep.unknown


class Committer(PartsUser):
    """Commits the latest epoch and deletes its orphans."""

    def commit(
        self, output_roots: Sequence[str] | None, *, degraded: bool, unknown_files: UnknownFiles = UnknownFiles.FAIL
    ) -> CommitResult:
        # Fold what the job left loose first: the state read below is then a few segments.
        self._compactor.compact(min_loose=1)
        state = self._reader.read(keep_inline=True)
        epoch = state.latest
        if epoch is None:
            raise InvalidArgumentError(
                f"{self._context.uri} has no epoch: nothing ran against it, so there is nothing to commit",
                reason="no_epoch",
            )
        record_key = commit_key(epoch.number)
        done_key = commit_done_key(epoch.number)
        done = self._blobs.get_if_exists(done_key)
        if done is not None and done[0]:  # empty: its upload was cut short and its process died; redo it
            return commit_result_from_json(self._context.parse_json(done_key, done[0]), already=True)

        existing = self._blobs.get_if_exists(record_key)
        written: tuple[FileMetadata, ...] | None = None  # the record's files, when this call wrote it
        sweep: _OrphanPlan | None = None
        if existing is not None and existing[0]:  # empty: an upload cut short, by a commit that died (rewritten)
            record = self._context.parse_json(record_key, existing[0])
        else:
            refuse_unfinished_maintenance(self._context.uri, epoch, "commit")
            if epoch.metadata.get(PLAN_FIELD) and epoch.status is EpochStatus.RETRACTED:
                raise RefusedError(
                    f"epoch {epoch.number} of {self._context.uri} is a {epoch.metadata.get('action')}: its keys "
                    "are pending. Nothing to commit: run the job (it reprocesses the pending keys), then commit "
                    "that run. Nothing was deleted",
                    reason="epoch_retracted",
                )
            if epoch.status is EpochStatus.FAILED:
                raise RefusedError(
                    f"epoch {epoch.number} of {self._context.uri} failed: run the job again to completion (it "
                    "resumes), then commit. Nothing was deleted",
                    reason="epoch_failed",
                )
            refuse_skipped_input(self._context, self._reader, state)
            check_disjoint(self._reader, state)
            files_by_id = self._reader.files.files_by_checkpoint(state.valid)
            files = [f for c in state.valid for f in files_by_id[c.checkpoint_id]]
            guard = self._roots.guard(output_roots)
            job = epoch.job
            earlier = self._earlier_output(state, epoch, job, files)
            if unknown_files is UnknownFiles.FAIL:
                refuse_unattributed(self._context.uri, job, earlier, len(files))
            record = {
                "epoch": epoch.number,
                "checkpoint_ids": [c.checkpoint_id for c in state.valid],
                "files": [f.to_json() for f in files],
                "degraded": bool(degraded or epoch.degraded),
                "created_at": now(),
                # Kept with the commit record: the roots outlive epoch records that retention prunes.
                "output_roots": list(guard.root_uris),
                JOB_METADATA_KEY: job,
                "run_id": epoch.metadata.get("run_id") if isinstance(epoch.metadata.get("run_id"), str) else None,
                REPLACED_FIELD: list(earlier.replaced),
                KEPT_FIELD: list(earlier.unattributed_paths),
            }
            # Listed before the record is written: unknown files refuse the commit with nothing changed.
            sweep = self._plan_orphans(state, record, output_roots, degraded=bool(record["degraded"]), files=files)
            self._refuse_unknown(sweep, unknown_files)
            # Which checkpoint wrote which file, kept after compaction deletes the manifests (docs/reprocess.md).
            write_lineage(self._blobs, epoch.number, state.valid, files_by_id, list(guard.root_uris))
            try:
                self._blobs.put(record_key, dumps(record), if_absent=True)
                written = tuple(files)
            except PreconditionFailedError:  # a concurrent commit won; use its record
                record = self._context.read_json(record_key)
                sweep = None
        # Writing the record marked every checkpoint it names committed, in one atomic write:
        # readers take the newest commit record as the authority (manifests are not rewritten).
        failpoint("store.commit.between_phases")
        if sweep is None:  # a retry after a crash, or a concurrent commit's record
            sweep = self._plan_orphans(
                state, record, output_roots, degraded=bool(record.get("degraded")) or degraded or epoch.degraded
            )
            self._refuse_unknown(sweep, unknown_files)
        result = self._delete_orphans(sweep, committed_files=written)
        self._blobs.put(done_key, dumps(result.to_json()))
        self._epoch_log.write_end(epoch.number, EpochStatus.COMMITTED, result.summary())
        return result

    def _earlier_output(
        self, state: StoreState, epoch: Epoch, job: str | None, files: Sequence[FileMetadata]
    ) -> EarlierOutput:
        """The live files of earlier commits whose keys no longer count, where this run writes: those of the
        same job (replaced) and those it cannot attribute that are still there (store/rerun.py)."""
        records = self._reader.commits.commit_records()
        earlier = earlier_output(
            records,
            job,
            [*state.valid_ids, *self._snapshot_checkpoints(state)],
            [f.path for f in files],
            canonical_uri,
            self._reader.commits.committed_paths(records),
            within_roots(self._roots.run_roots(epoch)),
        )
        if not earlier.unattributed:
            return earlier
        # Only files a reader would read beside this commit's: gone ones (moved away by hand) are no duplicates.
        return earlier.without(self._reader.files.missing_outputs(earlier.unattributed_paths))

    def _snapshot_checkpoints(self, state: StoreState) -> set[str]:
        """Every checkpoint whose keys the ``retain`` snapshot holds: those folded by any earlier commit
        (its index), not only by the latest one (``state.folded``, the manifest's ids)."""
        if state.snapshot is None:
            return set()
        return state.folded | set(read_snapshot_index(self._blobs, int(state.snapshot["snapshot"])))

    def _plan_orphans(
        self,
        state: StoreState,
        record: Mapping[str, Any],
        output_roots: Sequence[str] | None,
        *,
        degraded: bool,
        files: Sequence[FileMetadata] | None = None,
    ) -> _OrphanPlan:
        """List the output roots and sort what they hold against ``record`` (its files: ``files`` when
        the caller has them parsed). Deletes nothing."""
        epoch_number = int(record["epoch"])
        committed_files = (
            tuple(files) if files is not None else tuple(FileMetadata.from_json(f) for f in record["files"])
        )
        authoritative = {canonical_uri(f.path) for f in committed_files}
        valid_ids = set(state.valid_ids) | set(record["checkpoint_ids"])
        recorded = self._deleter.intents(skip=valid_ids, extra=segment_intents(state, skip=valid_ids))
        intents = recorded.paths
        guard = self._roots.guard(output_roots)
        refused_records = [f"{cid}: {why}" for cid, why in recorded.rejected]
        if output_roots is not None:
            roots, refused_roots = guard.sweep_roots(output_roots)
            refused_records += [f"output root {r}: not declared for this store, not swept" for r in refused_roots]
        else:
            # Only the directories writers recorded files in: listing a whole declared root (years
            # of a data lake) would cost far more than the orphans it can hold.
            wanted = {p.rsplit("/", 1)[0] for p in intents} | {p.root for p in recorded.patterns}
            roots, _ = guard.sweep_roots(sorted(wanted))

        def unprovable(checkpoint_id: str, epoch: int | None) -> bool:
            # In a degraded epoch a task may have finished its output but failed to seal.
            if not degraded or state.is_sealed(checkpoint_id):
                return False
            return epoch is None or epoch == epoch_number

        # The files this commit replaces are deleted by name after the sweep (_delete_orphans), never "unknown".
        replaced = {canonical_uri(str(p)) for p in record.get(REPLACED_FIELD) or []} - authoritative
        # Committed output is never an orphan, even where the checkpoint that wrote it no longer counts (its keys
        # were deleted, or cleared) and its intent record is still there: only a replacement retracts it.
        committed = self._reader.commits.committed_paths()
        # A name intent outside the roots is not swept (its root is not listed); check() reports it.
        sweep = plan_orphan_sweep(
            self._deleter,
            guard,
            recorded,
            keep_ids=valid_ids,
            keep_paths=authoritative | (committed - replaced),
            known=set(intents) | committed | replaced,
            unprovable=unprovable,
            roots=roots,
        )
        stale_ids = sorted(((state.sealed_ids() - valid_ids) | set(state.unsealed)) - sweep.kept_ids)
        return _OrphanPlan(
            replaced=tuple(sorted(replaced)),
            state=state,
            record=record,
            committed_files=committed_files,
            sweep=sweep,
            stale_ids=tuple(stale_ids),
            degraded=degraded,
            refused_records=[*refused_records, *sweep.refused],
        )

    def _refuse_unknown(self, plan: _OrphanPlan, policy: UnknownFiles) -> None:
        """:class:`RefusedError` (``unknown_output_files``) when the output holds files no writer of this store
        recorded,
        unless the caller keeps them knowingly. A degraded run's writers could not record every file, so
        its unknown files are kept and reported (the summary says the run was degraded)."""
        if not plan.unknown or policy is UnknownFiles.KEEP or plan.degraded:
            return
        shown = "\n  ".join(plan.unknown[:20])
        more = f"\n  ... and {len(plan.unknown) - 20} more" if len(plan.unknown) > 20 else ""
        raise RefusedError(
            f"{len(plan.unknown)} file(s) under the output roots of {self._context.uri} were written by no run of "
            f"this store:\n  {shown}{more}\nA reader of the output would read them beside the "
            f"{len(plan.committed_files)} file(s) this commit makes authoritative (duplicates, or another job's "
            "data). Nothing was committed or deleted. Move them out of the output roots and retry the commit; if a "
            "run with another store committed them, retract them there (`airflow-ckpt reprocess`); or keep them "
            'knowingly: CheckpointCommitOperator(unknown_files="keep"), store.commit(unknown_files="keep") or '
            "`airflow-ckpt commit --keep-unknown-files`",
            reason="unknown_output_files",
            paths=plan.unknown,
        )

    def _delete_orphans(
        self, plan: _OrphanPlan, *, committed_files: tuple[FileMetadata, ...] | None = None
    ) -> CommitResult:
        """Run the sweep ``plan`` listed and delete the stale checkpoint directories."""
        sweep = plan.sweep.run(self._deleter)
        refused_records = [*plan.refused_records, *(f"{p}: refused by the deletion guard" for p in sweep.refused)]
        replaced: list[str] = []
        undeclared = list(plan.sweep.undeclared)
        if plan.replaced:
            guard = plan.sweep.guard
            allowed = [p for p in plan.replaced if guard.allows(p)]
            if guard.keeps_all_output:  # nothing is declared: the replaced files are kept, and said so
                undeclared += [p for p in plan.replaced if p not in allowed]
            else:
                refused_records += [f"{p}: replaced, but {guard.refusal(p)}" for p in plan.replaced if p not in allowed]
            replaced = self._deleter.delete_output_files(allowed, guard=guard)
        state = plan.state
        # Directories only: a segment's rows of stale checkpoints stay (never valid again) until cleanup.
        state.require_attempts()
        self._deleter.delete_checkpoint_dirs(sorted(set(plan.stale_ids) & set(state.listed_dirs)))
        return CommitResult(
            epoch=int(plan.record["epoch"]),
            committed_checkpoints=tuple(plan.record["checkpoint_ids"]),
            committed_files=committed_files if committed_files is not None else plan.committed_files,
            deleted_files=tuple(sorted(sweep.deleted)),
            deleted_checkpoints=plan.stale_ids,
            aborted_uploads=tuple(sorted(sweep.aborted)),
            unknown_files=plan.unknown,
            kept_unprovable=plan.sweep.kept,
            bytes_freed=sweep.bytes_freed,
            degraded=plan.degraded,
            already_committed=False,
            output_roots=plan.sweep.roots,
            refused_records=tuple(refused_records),
            undeclared_output_files=tuple(sorted(undeclared)),
            replaced_files=tuple(sorted(replaced)),
            committed_keys=state.catalog.sum("num_keys", state.valid_mask),
            kept_earlier_files=tuple(str(p) for p in plan.record.get(KEPT_FIELD) or ()),
        )


def refuse_skipped_input(context: StoreContext, reader: StateReader, state: StoreState) -> None:
    """:class:`RefusedError` (``input_skipped``) if a run since the last commit found pending input keys its shortcut
    skipped and they are not processed yet (store/input_audit.py). Reads nothing more when no run
    recorded such a finding."""
    findings = audit_findings(context, reader, state)
    if not findings:
        return
    described = tuple(f.describe(context.uri) for f in findings)
    raise RefusedError(
        "; ".join(described) + ". Committing would lose those keys' input, so nothing was committed or deleted. "
        "Ways out: run the job again (a run after such a finding checks the input it would skip and reads it "
        "exactly), then commit that run; if the run did not read its input exactly (said above), discard the "
        "uncommitted work first (`airflow-ckpt discard`, or store.housekeeping.discard_uncommitted()) so that its "
        "keys are read again whole. A shortcut that vouched for pending keys is a bug: please report it",
        reason="input_skipped",
        findings=described,
    )


def check_disjoint(reader: StateReader, state: StoreState) -> None:
    """:class:`RefusedError` (``overlapping_keys``) if two valid checkpoints (or one and the snapshot) hold the same
    key."""
    sources = key_sources(state)
    if len(sources) <= 1 and not any(s.format == "segment" for s in sources):
        return  # one checkpoint's keys (or the snapshot's): nothing to overlap with
    keys = reader.keys.read_keys(sources)
    duplicates = duplicate_keys(keys)
    if not duplicates:
        return
    raise RefusedError(
        f"the valid checkpoints of {reader.uri} overlap: {duplicates[0]} keys are held twice "
        f"(e.g. {duplicates[1]!r}); the output would hold their rows twice. This happens when the input's "
        "order is not deterministic or keys were split across tasks. Nothing was deleted; discard the "
        "uncommitted work (`airflow-ckpt discard`) and rerun",
        reason="overlapping_keys",
    ) from RefusedError(repr(duplicates[1]), reason="overlapping_keys")
