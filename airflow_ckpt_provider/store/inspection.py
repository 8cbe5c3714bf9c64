"""Inspection: where a store stands (``progress``) and whether it is consistent (``check``). Reads only."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import pyarrow.compute as pc

from airflow_ckpt_provider.store.blobs.base import BlobNotFoundError
from airflow_ckpt_provider.store.commit import check_disjoint
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.deletion import StoreDeleter
from airflow_ckpt_provider.store.deletion_guard import canonical_uri
from airflow_ckpt_provider.store.errors import (
    CheckpointError,
    CorruptCheckpointError,
    InvalidArgumentError,
    RefusedError,
)
from airflow_ckpt_provider.store.input_audit import audit_findings
from airflow_ckpt_provider.store.layout import attempt_prefix, epoch_key
from airflow_ckpt_provider.store.listing import checkpoint_records
from airflow_ckpt_provider.store.model import Checkpoint, ConsistencyReport, EpochStatus, Progress, StoreContents
from airflow_ckpt_provider.store.records import commit_result_from_json
from airflow_ckpt_provider.store.reprocess.maintenance import maintenance_problems, quarantine_notes
from airflow_ckpt_provider.store.segment_reader import segment_intents
from airflow_ckpt_provider.store.segments import keys_key as segment_keys_key
from airflow_ckpt_provider.store.segments import read_owners as read_segment_owners
from airflow_ckpt_provider.store.state import StateReader
from airflow_ckpt_provider.store.store_state import StoreState


class Inspector:
    """Reports progress and audits a store without changing it."""

    def __init__(self, context: StoreContext, reader: StateReader, deleter: StoreDeleter) -> None:
        self._context = context
        self._blobs = context.blobs
        self._reader = reader
        self._deleter = deleter

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
        guard = self._deleter.guard()
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
                problems.extend(f"missing output file: {p}" for p in sorted(self._missing_outputs(expected)))
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
        guard = self._deleter.guard()
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

    def _missing_outputs(self, paths: Iterable[str]) -> set[str]:
        """The paths that do not exist, listing each output directory once (not one request per file)."""
        by_dir: dict[str, set[str]] = defaultdict(set)
        for path in paths:
            by_dir[path.rsplit("/", 1)[0]].add(path)
        missing: set[str] = set()
        for directory, wanted in by_dir.items():
            try:
                blobs = self._context.output_store(directory)
                present = {blobs.child_uri(i.key) for i in blobs.list("") if "/" not in i.key}
            except CheckpointError:
                continue  # cannot tell (unreachable, or not a location we can open): not a finding
            missing |= wanted - present
        return missing


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
