"""``store.inspection``: where a store stands and whether it is consistent. Reads only.

:class:`Inspection` is the public role (progress, contents, check, the checkpoints and epochs it
holds, what the next submit of a job does); :class:`Inspector` does the reads and the audit.
"""

from __future__ import annotations

from typing import Any

import pyarrow.compute as pc

from airflow_ckpt_provider.store.blobs.base import BlobNotFoundError
from airflow_ckpt_provider.store.commit import check_disjoint
from airflow_ckpt_provider.store.deletion_guard import canonical_uri
from airflow_ckpt_provider.store.errors import (
    CheckpointError,
    CorruptCheckpointError,
    InvalidArgumentError,
    RefusedError,
)
from airflow_ckpt_provider.store.input_audit import audit_findings
from airflow_ckpt_provider.store.layout import attempt_prefix, epoch_key, validate_checkpoint_id
from airflow_ckpt_provider.store.listing import checkpoint_records
from airflow_ckpt_provider.store.model import (
    Checkpoint,
    ConsistencyReport,
    EpochStatus,
    Progress,
    StoreContents,
)
from airflow_ckpt_provider.store.parts import PartsUser, StoreParts
from airflow_ckpt_provider.store.records import commit_result_from_json
from airflow_ckpt_provider.store.reprocess.maintenance import maintenance_problems, quarantine_notes
from airflow_ckpt_provider.store.rerun import OnRerun, RerunPlan, on_rerun_of, plan_rerun
from airflow_ckpt_provider.store.segment_reader import segment_intents
from airflow_ckpt_provider.store.segments import keys_key as segment_keys_key
from airflow_ckpt_provider.store.segments import read_owners as read_segment_owners
from airflow_ckpt_provider.store.store_state import StoreState


class Inspector(PartsUser):
    """Reports progress and audits a store without changing it."""

    def progress(self) -> Progress:
        # No counter depends on which checkpoints are committed: the commit record (megabytes for a big
        # job) is not read; whether the epoch is committed is one listing of commits/.
        return self._progress_of(self._reader.read(with_commits=False, with_attempts=False, keep_files=False))

    def _progress_of(self, state: StoreState) -> Progress:
        epoch = state.latest
        catalog, valid = state.catalog, state.valid_mask
        in_epoch = valid & (catalog.table.column("epoch").to_numpy() == (epoch.number if epoch else -1))
        snapshot_keys = int(state.snapshot["num_keys"]) if state.snapshot else 0
        last_commit: dict[str, Any] | None = None
        committed = False
        # An empty done record is a commit whose last upload was cut short: not finished (its retry rewrites it).
        commits = sorted(i.key for i in self._blobs.list("commits/") if i.key.endswith(".done.json") and i.size)
        if commits:
            last_commit = self._commit_summary(commits[-1])
            committed = epoch is not None and commits[-1] == f"commits/{epoch.number:08d}.done.json"
        types = catalog.key_types(valid)
        return Progress(
            store_uri=self._context.uri,
            epoch=epoch,
            sealed_partitions=int(in_epoch.sum()),
            expected_partitions=epoch.expected_partitions if epoch else None,
            valid_checkpoints=int(valid.sum()),
            keys_done=snapshot_keys + catalog.sum("num_keys", valid),
            files=catalog.sum("num_files", valid),
            bytes=catalog.sum("num_bytes", valid),
            rows=catalog.sum("num_rows", valid),
            committed=committed,
            last_commit=last_commit,
            degraded_epochs=tuple(sorted(state.degraded_epochs)),
            key_type=types.pop() if len(types) == 1 else (state.snapshot or {}).get("key_type"),
        )

    def contents(self) -> StoreContents:
        state = self._reader.read()
        guard = self._roots.guard()
        snapshot_keys = int(state.snapshot["num_keys"]) if state.snapshot else 0
        return StoreContents(
            store_uri=self._context.uri,
            epoch=None if state.latest is None else state.latest.number,
            epoch_open=state.latest is not None and state.latest.status is EpochStatus.OPEN,
            checkpoints=tuple(state.catalog.checkpoints()),
            valid_ids=frozenset(state.valid_ids),
            unsealed_ids=tuple(sorted(state.unsealed)),
            snapshots=tuple(sorted(int(n) for n in self._blobs.list_dirs("snapshots/") if n.isdigit())),
            keys_done=snapshot_keys + state.catalog.sum("num_keys", state.valid_mask),
            output_roots=guard.root_uris,
            output_roots_declared=guard.declared,
            output_roots_undeclared_by=guard.trusted_by if guard.anchor_declares_nothing else None,
            progress=self._progress_of(state),
        )

    def _commit_summary(self, done_key: str) -> dict[str, Any]:
        """The summary of a finished commit: from its epoch's end record (small), else its done record (which
        lists every committed file, megabytes for a big job)."""
        epoch = int(done_key[len("commits/") : len("commits/") + 8])
        end = self._blobs.get_if_exists(epoch_key(epoch, ".end.json"))
        if end is not None:
            record = self._context.parse_json(epoch_key(epoch, ".end.json"), end[0])
            summary = record.get("summary")
            if record.get("status") == EpochStatus.COMMITTED.value and isinstance(summary, dict) and summary:
                return summary
        return commit_result_from_json(self._context.read_json(done_key), already=False).summary()

    def check(self, *, verify_output: bool) -> ConsistencyReport:
        problems: list[str] = []
        notes: list[str] = []
        try:
            state = self._reader.read(tolerate_corrupt=True, keep_inline=True)
        except CorruptCheckpointError as exc:
            return ConsistencyReport(store_uri=self._context.uri, problems=(f"corrupt store record: {exc}",), notes=())
        for checkpoint_id, error in sorted(state.corrupt.items()):
            problems.append(f"corrupt manifest: {checkpoint_id}: {error}")
        for checkpoint_id in sorted(state.unsealed):
            notes.append(f"dangling (unsealed) checkpoint directory: {checkpoint_id}")
        for name, error in sorted(state.corrupt_segments.items()):
            problems.append(f"corrupt segment: {name}: {error}")
        existing = {key for keys in checkpoint_records(self._blobs).values() for key in keys}
        for checkpoint in state.catalog.loose.values():
            prefix = attempt_prefix(checkpoint.checkpoint_id)
            for part in (*checkpoint.key_parts, *checkpoint.file_parts):
                if prefix + part not in existing:
                    problems.append(f"missing part: {prefix}{part}")
        for (epoch, partition), ids in _duplicate_attempts(state):
            notes.append(f"duplicate attempts of partition {partition} in epoch {epoch}: {sorted(ids)}")
        records, record_notes = self._record_findings(state)
        problems.extend(records)
        notes.extend(record_notes)
        problems.extend(self._symlink_findings(with_output=verify_output))
        latest = state.latest
        problems.extend(maintenance_problems(self._context, latest))
        notes.extend(quarantine_notes(self._context, latest))
        if latest is not None and latest.status not in (EpochStatus.COMMITTED, EpochStatus.CLEARED):
            # After a commit, retention may delete the base on purpose; before it, the base must exist.
            folded = state.folded
            sealed = state.sealed_ids()
            for checkpoint_id in latest.base:
                if checkpoint_id not in sealed and checkpoint_id not in folded:
                    problems.append(f"base checkpoint without manifest: {checkpoint_id}")
        segment_problems, segment_notes = self._check_segments(state)
        problems.extend(segment_problems)
        notes.extend(segment_notes)
        if not problems:
            try:
                check_disjoint(self._reader, state)
                problems.extend(
                    f"pending input keys skipped: {finding.describe(self._context.uri)}. The commit refuses until a "
                    "run processes them: run the job again (discard its uncommitted work first if it did not read "
                    "its input exactly)"
                    for finding in audit_findings(self._context, self._reader, state)
                )
            except (RefusedError, InvalidArgumentError, CorruptCheckpointError) as exc:
                if isinstance(exc, InvalidArgumentError) and exc.reason != "key_type_mismatch":
                    raise
                problems.append(f"keys: {exc}")
        if verify_output and not problems:
            try:
                valid_files = {canonical_uri(f.path) for f in self._reader.files.files_of(state.valid)}
                expected = valid_files | self._reader.commits.committed_paths()
            except CorruptCheckpointError as exc:
                problems.append(f"corrupt store record: {exc}")
            else:
                missing = self._reader.files.missing_outputs(expected)
                problems.extend(f"missing output file: {p}" for p in sorted(missing))
        return ConsistencyReport(store_uri=self._context.uri, problems=tuple(problems), notes=tuple(notes))

    def refused_records(self) -> list[str]:
        return self._record_findings(self._reader.read())[0]

    def _record_findings(self, state: StoreState) -> tuple[list[str], list[str]]:
        """Intent records that name what no deletion may touch (problems: never acted on, and a sign
        that something wrote into the store what its writers would not), and a note for stores that
        declare no output root (docs/design.md, section 7)."""
        problems: list[str] = []
        notes: list[str] = []
        intents = self._deleter.intents(extra=segment_intents(state, skip=set()))
        guard = self._roots.guard()
        for checkpoint_id, why in intents.rejected:
            problems.append(f"unusable intent record of {checkpoint_id}: {why} (never acted on)")
        for why in guard.refused_roots:
            problems.append(f"refused output root record: {why} (never acted on)")
        if guard.anchor_declares_nothing:
            if intents.paths or intents.patterns:
                notes.append(
                    f"no output root is declared ({guard.trusted_by}: none): clear, discard, commit and "
                    "reprocess keep output files"
                )
            return problems, notes
        if not guard.declared:
            if intents.paths or intents.patterns:
                notes.append(
                    "no output root is declared in this store (no epoch declares one): clear and discard "
                    "keep output files, commit deletes orphans only under the output roots it is given"
                )
            return problems, notes
        for path, (checkpoint_id, _) in sorted(intents.paths.items()):
            reason = guard.refusal(path)
            if reason is not None:
                problems.append(f"intent record of {checkpoint_id} names what no deletion may touch: {reason}")
        for pattern in intents.patterns:
            if guard.root_of(f"{pattern.root}/{pattern.marker}") is None:
                problems.append(
                    f"name intent of {pattern.checkpoint_id} covers {pattern.root}, outside the declared output roots "
                    f"({', '.join(guard.root_uris)}): never acted on"
                )
        return problems, notes

    def _symlink_findings(self, *, with_output: bool) -> list[str]:
        """Symbolic links under the store root and (``with_output``) under the declared local output roots:
        no operation follows them (store/blobs/local.py), and a writer of the store has no reason to make
        one, so each is a problem to remove (docs/security.md, "Symbolic links")."""
        found = [
            f"symbolic link under the store root: {key} -> {target} (never followed; remove it)"
            for key, target in self._blobs.links("")
        ]
        if not with_output:
            return found
        guard = self._roots.guard()
        for root in guard.root_uris:
            if not root.startswith("file:"):
                continue
            try:
                links = self._context.output_store(root, anchor=guard.anchor_of(root)).links("")
            except CheckpointError:
                continue  # cannot tell: not a finding
            found.extend(
                f"symbolic link under the output root {root}: {key} -> {target} (never followed; remove it)"
                for key, target in links
            )
        return found

    def _check_segments(self, state: StoreState) -> tuple[list[str], list[str]]:
        """Each segment against itself (its keys against its manifests' counts) and against the loose
        manifests it replaces that are still there; segments no state names are notes."""
        problems: list[str] = []
        notes: list[str] = []
        for segment in state.catalog.segments:
            key = segment_keys_key(segment.name)
            try:
                owners = read_segment_owners(self._blobs.get(key)[0], self._blobs.child_uri(key))
            except BlobNotFoundError:
                problems.append(f"corrupt segment: {segment.name}: its keys object is missing")
                continue
            except CorruptCheckpointError as exc:
                problems.append(f"corrupt segment: {segment.name}: {exc}")
                continue
            counts = dict(zip(owners["checkpoint_id"], owners["count"], strict=True))
            manifests = segment.summary.select(["checkpoint_id", "num_keys"]).to_pylist()
            for row in manifests:
                held = counts.pop(row["checkpoint_id"], 0)
                if held != row["num_keys"]:
                    problems.append(
                        f"segment {segment.name}: checkpoint {row['checkpoint_id']} has {held} keys, "
                        f"its manifest says {row['num_keys']}"
                    )
            for owner in sorted(counts):
                problems.append(f"segment {segment.name}: keys of checkpoint {owner}, which it holds no manifest of")
        loose_again = [i for i in state.covered_dirs if i in state.catalog.loose]
        if loose_again:
            in_segments = {c.checkpoint_id: c for c in state.catalog.checkpoints(state.catalog.mask_of(loose_again))}
            for checkpoint_id in loose_again:
                loose, compacted = state.catalog.loose[checkpoint_id], in_segments.get(checkpoint_id)
                if compacted is None or _sealed_fields(loose) != _sealed_fields(compacted):
                    problems.append(f"segment row of checkpoint {checkpoint_id} differs from its manifest")
        for checkpoint_id in state.covered_dirs:
            notes.append(f"checkpoint directory a segment holds (compaction not finished): {checkpoint_id}")
        named = set(state.segment_state.names)
        for name in sorted(set(self._blobs.list_dirs("segments/")) - named):
            retired = name in state.segment_state.retired
            notes.append(f"segment no state names ({'replaced' if retired else 'unfinished compaction'}): {name}")
        return problems, notes


class Inspection:
    """What a store holds and whether it is sound, without changing it: ``store.inspection`` of a
    :class:`~airflow_ckpt_provider.store.store.CheckpointStore`. Every call reads only."""

    def __init__(self, parts: StoreParts) -> None:
        self._reader = parts.reader
        self._inspector = Inspector(parts)

    def progress(self) -> Progress:
        """Where the store stands: epoch, sealed/expected partitions, keys, files, commit.

        Raises :class:`CorruptCheckpointError` if a record does not parse (``check`` reports which).
        """
        return self._inspector.progress()

    def contents(self) -> StoreContents:
        """Everything the store holds, from one read of its records: sealed checkpoints and which
        are valid, directories of attempts that never sealed, key snapshots, keys done (what a
        clear or discard preview counts). Idempotent.

        Raises :class:`CorruptCheckpointError` if a record does not parse (``check`` reports which),
        :class:`StoreUnavailableError` if the store cannot be reached.
        """
        return self._inspector.contents()

    def check(self, *, verify_output: bool = True) -> ConsistencyReport:
        """Audit the store without changing it (the consistency checker).

        Problems (guarantees at risk): manifests, epoch, commit or snapshot records
        that do not parse; parts a manifest names that are missing; base checkpoints
        of an uncommitted epoch with no manifest; overlapping keys among valid
        checkpoints; and (``verify_output``) output files missing from their location,
        both of valid checkpoints and of every commit record. Notes (expected after
        crashes, removed by the next commit): dangling unsealed checkpoint
        directories, duplicate sealed attempts of one partition. Also problems: intent records
        naming what no deletion may touch (outside the declared output roots, not a plain
        location, a name marker shorter than the minimum); they are never acted on. And symbolic
        links under the store root or (``verify_output``) a declared local output root, which no
        operation follows.
        """
        return self._inspector.check(verify_output=verify_output)

    def refused_records(self) -> list[str]:
        """The intent records no deletion will act on, each with why (outside the declared output
        roots, not a plain ``file://``/``s3://`` location, a name marker shorter than the minimum):
        what clear, discard and commit would skip, for a confirmation to show beforehand. Reads
        every intent record. Raises :class:`StoreUnavailableError`."""
        return self._inspector.refused_records()

    def rerun_plan(
        self, job: str | None = None, on_rerun: OnRerun | str = OnRerun.REPLACE, *, progress: Progress | None = None
    ) -> RerunPlan:
        """What the next run of ``job`` (as its caller names it to ``epochs.begin``; None: the store's one
        output, ``DEFAULT_JOB``) does on this store — first, resume, replace, skip or incremental — and which
        commit's output is live (store/rerun.py). The same for every caller: it follows from the store's
        history alone. ``progress``: a :meth:`progress` the caller already read (then only the newest commit
        record is read, and the snapshot's manifest after a run that did not commit; not the state again).
        Raises :class:`InvalidArgumentError` (``job``) for an empty job name."""
        if progress is not None:
            latest = progress.epoch
            kept = committed_kept = progress.valid_checkpoints > 0 or progress.keys_done > 0  # valid or a snapshot
            record = self._reader.commits.newest_commit_record()
            if record is not None and latest is not None and latest.status is not EpochStatus.COMMITTED:
                # A failed run after the commit may have sealed checkpoints of its own. Without reading which
                # checkpoints are valid (the page has read the state once): the commit's keys count when retain
                # folded them into a snapshot; a delete_after_success commit whose cleanup never ran is worded as
                # replaced (its next commit keeps that output).
                committed_kept = self._reader.snapshot(latest) is not None
        else:
            state = self._reader.read(with_attempts=False)
            latest = state.latest
            kept = state.snapshot is not None or bool(state.valid_ids)
            record = state.commit_record
            # After a commit, a failed run may have sealed checkpoints of its own: the committed output stays
            # beside the next commit's only if the newest commit's checkpoints still count (retain's snapshot).
            committed_ids = set(record.get("checkpoint_ids") or []) if record else set()
            committed_kept = state.snapshot is not None or not committed_ids.isdisjoint(state.valid_ids)
        return plan_rerun(
            None if latest is None else latest.status,
            kept,
            record,
            job,
            on_rerun_of(on_rerun),
            committed_kept=committed_kept,
        )

    def get_checkpoint(self, checkpoint_id: str) -> Checkpoint | None:
        """The manifest of a sealed checkpoint (valid or not), or None. Raises :class:`CorruptCheckpointError`."""
        return self._reader.checkpoint(validate_checkpoint_id(checkpoint_id))

    def list_checkpoints(self) -> list[Checkpoint]:
        """Every sealed checkpoint in the store (valid or not), by seal time."""
        manifests = self._reader.read(with_status=False, with_attempts=False).manifests.values()
        return sorted(manifests, key=lambda c: (c.sealed_at, c.checkpoint_id))

    def valid_checkpoints(self) -> list[Checkpoint]:
        """The checkpoints whose keys count as done: base of the latest epoch + sealed in it, one per partition."""
        return self._reader.read(with_status=False, with_attempts=False).valid


def _duplicate_attempts(state: StoreState) -> list[tuple[tuple[int, int], list[str]]]:
    """(epoch, partition) sealed more than once, with the attempts' ids."""
    table = state.catalog.table.select(["epoch", "partition", "checkpoint_id"])
    table = table.filter(pc.is_valid(table.column("partition")))
    counts = table.group_by(["epoch", "partition"]).aggregate([([], "count_all")])
    counts = counts.filter(pc.greater(counts.column("count_all"), 1))
    out: list[tuple[tuple[int, int], list[str]]] = []
    for row in sorted(counts.select(["epoch", "partition"]).to_pylist(), key=lambda r: (r["epoch"], r["partition"])):
        mask = pc.and_(
            pc.equal(table.column("epoch"), row["epoch"]), pc.equal(table.column("partition"), row["partition"])
        )
        out.append(((row["epoch"], row["partition"]), table.filter(mask).column("checkpoint_id").to_pylist()))
    return out


def _sealed_fields(checkpoint: Checkpoint) -> tuple[object, ...]:
    return (
        checkpoint.epoch,
        checkpoint.partition,
        checkpoint.sealed_at,
        checkpoint.num_keys,
        checkpoint.num_files,
        checkpoint.num_rows,
        checkpoint.key_parts,
        checkpoint.file_parts,
    )
