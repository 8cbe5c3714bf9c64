"""Inspection: where a store stands (``progress``) and whether it is consistent (``check``). Reads only."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from airflow_ckpt_provider.store.commit import check_disjoint
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.deletion import StoreDeleter
from airflow_ckpt_provider.store.deletion_guard import canonical_uri
from airflow_ckpt_provider.store.errors import (
    CheckpointError,
    CommitRefusedError,
    CorruptCheckpointError,
    KeyTypeMismatchError,
)
from airflow_ckpt_provider.store.model import ConsistencyReport, EpochStatus, Progress, StoreContents
from airflow_ckpt_provider.store.records import commit_result_from_json
from airflow_ckpt_provider.store.reprocess.maintenance import maintenance_problems, quarantine_notes
from airflow_ckpt_provider.store.state import StateReader, StoreState


class Inspector:
    """Reports progress and audits a store without changing it."""

    def __init__(self, context: StoreContext, reader: StateReader, deleter: StoreDeleter) -> None:
        self._context = context
        self._blobs = context.blobs
        self._reader = reader
        self._deleter = deleter

    def progress(self) -> Progress:
        return self._progress(self._reader.read())

    def _progress(self, state: StoreState) -> Progress:
        epoch = state.latest
        sealed_now = len([c for c in state.valid if epoch is not None and c.epoch == epoch.number])
        snapshot_keys = int(state.snapshot["num_keys"]) if state.snapshot else 0
        last_commit: dict[str, Any] | None = None
        committed = False
        commits = sorted(i.key for i in self._blobs.list("commits/") if i.key.endswith(".done.json"))
        if commits:
            done = self._context.read_json(commits[-1])
            last_commit = commit_result_from_json(done, already=False).summary()
            committed = epoch is not None and commits[-1] == f"commits/{epoch.number:08d}.done.json"
        types = {c.key_type for c in state.valid if c.key_type}
        return Progress(
            store_uri=self._context.uri,
            epoch=epoch,
            sealed_partitions=sealed_now,
            expected_partitions=epoch.expected_partitions if epoch else None,
            valid_checkpoints=len(state.valid),
            keys_done=snapshot_keys + sum(c.num_keys for c in state.valid),
            files=sum(c.num_files for c in state.valid),
            bytes=sum(c.num_bytes for c in state.valid),
            rows=sum(c.num_rows for c in state.valid),
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
            checkpoints=tuple(state.manifests.values()),
            valid_ids=frozenset(c.checkpoint_id for c in state.valid),
            unsealed_ids=tuple(sorted(state.unsealed)),
            snapshots=tuple(sorted(int(n) for n in self._blobs.list_dirs("snapshots/") if n.isdigit())),
            keys_done=snapshot_keys + sum(c.num_keys for c in state.valid),
            output_roots=guard.root_uris,
            output_roots_declared=guard.declared,
            progress=self._progress(state),
        )

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
        existing = {i.key for i in self._blobs.list("checkpoints/")}
        for checkpoint in state.manifests.values():
            for part in (*checkpoint.key_parts, *checkpoint.file_parts):
                if f"checkpoints/{checkpoint.checkpoint_id}/{part}" not in existing:
                    problems.append(f"missing part: {checkpoint.checkpoint_id}/{part}")
        seen: dict[tuple[int, int], list[str]] = defaultdict(list)
        for checkpoint in state.manifests.values():
            if checkpoint.partition is not None:
                seen[(checkpoint.epoch, checkpoint.partition)].append(checkpoint.checkpoint_id)
        for (epoch, partition), ids in sorted(seen.items()):
            if len(ids) > 1:
                notes.append(f"duplicate attempts of partition {partition} in epoch {epoch}: {sorted(ids)}")
        records, record_notes = self._record_findings()
        problems.extend(records)
        notes.extend(record_notes)
        latest = state.latest
        problems.extend(maintenance_problems(self._context, latest))
        notes.extend(quarantine_notes(self._context, latest))
        if latest is not None and latest.status not in (EpochStatus.COMMITTED, EpochStatus.CLEARED):
            # After a commit, retention may delete the base on purpose; before it, the base must exist.
            folded = state.folded
            for checkpoint_id in latest.base:
                if checkpoint_id not in state.manifests and checkpoint_id not in folded:
                    problems.append(f"base checkpoint without manifest: {checkpoint_id}")
        if not problems:
            try:
                check_disjoint(self._reader, state)
            except (CommitRefusedError, KeyTypeMismatchError, CorruptCheckpointError) as exc:
                problems.append(f"keys: {exc}")
        if verify_output and not problems:
            try:
                valid_files = {canonical_uri(f.path) for f in self._reader.files_of(state.valid)}
                expected = valid_files | self._reader.committed_paths()
            except CorruptCheckpointError as exc:
                problems.append(f"corrupt store record: {exc}")
            else:
                problems.extend(f"missing output file: {p}" for p in sorted(self._missing_outputs(expected)))
        return ConsistencyReport(store_uri=self._context.uri, problems=tuple(problems), notes=tuple(notes))

    def refused_records(self) -> list[str]:
        return self._record_findings()[0]

    def _record_findings(self) -> tuple[list[str], list[str]]:
        """Intent records that name what no deletion may touch (problems: never acted on, and a sign
        that something wrote into the store what its writers would not), and a note for stores that
        declare no output root (docs/design.md, section 7)."""
        problems: list[str] = []
        notes: list[str] = []
        intents = self._deleter.intents()
        guard = self._deleter.guard()
        for checkpoint_id, why in intents.rejected:
            problems.append(f"unusable intent record of {checkpoint_id}: {why} (never acted on)")
        if not guard.declared:
            if intents.paths or intents.patterns:
                notes.append(
                    "no output root is declared in this store (written by an earlier version): clear and discard "
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
