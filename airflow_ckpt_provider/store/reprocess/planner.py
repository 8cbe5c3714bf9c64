"""Plans: what reprocess, rewind, undo and purge will do, computed by reading only.

A plan is also the record: the maintenance epoch carries ``plan.to_json()`` so any process can
finish the action after a crash (docs/reprocess.md, "Steps and crash points").
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from urllib.parse import urlparse

from airflow_ckpt_provider.store.blobs.base import check_key
from airflow_ckpt_provider.store.deletion_guard import canonical_uri
from airflow_ckpt_provider.store.errors import CheckpointError, InvalidArgumentError, NotFoundError, RefusedError
from airflow_ckpt_provider.store.model import EpochStatus
from airflow_ckpt_provider.store.reprocess.model import DELETE, PURGE, QUARANTINE, UNDO, Selection
from airflow_ckpt_provider.store.reprocess.plan import PlannedFile, PreviousState, ReprocessPlan
from airflow_ckpt_provider.store.reprocess.records import quarantine_prefix
from airflow_ckpt_provider.store.reprocess.view import FOLDED, StoreView, Unit


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def quarantine_key(epoch: int, path: str) -> str:
    """Where reprocess ``epoch`` keeps ``path``: its full location under ``quarantine/{epoch}/``
    (``s3://b/t/f`` -> ``…/s3/b/t/f``, ``file:///d/f`` -> ``…/file/d/f``). Raises
    :class:`InvalidArgumentError` (``path_outside_root``) for a path that is not a plain absolute URI."""
    parsed = urlparse(path)
    if not parsed.scheme or "://" not in path:
        raise InvalidArgumentError(f"{path!r} is not an absolute URI", reason="path_outside_root")
    # One file, one key, whatever spelling a record uses (``file://localhost/d/f``, ``s3a://``).
    path = canonical_uri(path)
    parsed = urlparse(path)
    rest = path.split("://", 1)[1].lstrip("/")
    return check_key(f"{quarantine_prefix(epoch)}{parsed.scheme.lower()}/{rest}")


def previous_state(view: StoreView) -> PreviousState:
    latest = view.state.latest
    return PreviousState(
        epoch=None if latest is None else latest.number,
        status=None if latest is None else latest.status.value,
        valid=tuple(sorted(c.checkpoint_id for c in view.state.valid)),
        snapshot=view.snapshot_number,
    )


def retraction_plan(
    view: StoreView,
    units: Sequence[Unit],
    *,
    action: str,
    selection: Selection | None,
    to_commit: int | None,
    delete: bool,
    allowed: Callable[[str], bool],
    requested_by: str | None,
) -> ReprocessPlan:
    """The plan of a reprocess (``selection``) or a rewind (``to_commit``) of ``units``. ``allowed``:
    the store's deletion guard (a file it refuses is never touched; the plan lists it as refused)."""
    number = view.latest_number + 1
    previous = previous_state(view)
    chosen = {u.checkpoint_id for u in units}
    folded = tuple(sorted(u.checkpoint_id for u in units if u.source == FOLDED))
    files: dict[str, PlannedFile] = {}
    refused: list[str] = []
    for unit in units:
        for meta in unit.files:
            if meta.path in files or meta.path in refused:
                continue
            if not allowed(meta.path):
                refused.append(meta.path)
                continue
            try:
                key = quarantine_key(number, meta.path)
            except InvalidArgumentError as exc:
                if exc.reason != "path_outside_root":
                    raise
                refused.append(meta.path)
                continue
            files[meta.path] = PlannedFile(meta.path, meta.size_bytes, meta.num_rows, unit.checkpoint_id, key)
    present = _present(view, files)
    planned = tuple(
        PlannedFile(f.path, f.size_bytes, f.num_rows, f.checkpoint_id, f.quarantine, f.path in present)
        for f in sorted(files.values(), key=lambda f: f.path)
    )
    snapshot_keys = None
    if folded and view.state.snapshot is not None:
        dropped = sum(u.num_keys for u in units if u.source == FOLDED)
        snapshot_keys = int(view.state.snapshot.get("num_keys", 0)) - dropped
    warnings: list[str] = []
    latest = view.state.latest
    if latest is not None and latest.status is EpochStatus.OPEN:
        warnings.append(
            f"epoch {latest.number} is open (owner {latest.owner!r}): a submit may be running; the action is "
            "refused until it ends"
        )
    return ReprocessPlan(
        action=action,
        store_uri=view.parts.uri,
        epoch=previous.epoch,
        new_epoch=number if units else None,
        selection=selection,
        to_commit=to_commit,
        mode=DELETE if delete else QUARANTINE,
        checkpoints=tuple(sorted(chosen)),
        committed_checkpoints=sum(1 for u in units if u.committed),
        keys=sum(u.num_keys for u in units),
        files=planned,
        previous=previous,
        new_base=tuple(sorted(set(previous.valid) - chosen)),
        snapshot_drop=folded,
        snapshot_from=view.snapshot_number,
        snapshot_keys=snapshot_keys,
        output_roots=_roots_touched(planned),
        refused_paths=tuple(sorted(refused)),
        warnings=tuple(warnings),
        requested_by=requested_by,
        created_at=_now(),
    )


def undo_plan(view: StoreView, target: int | None, *, requested_by: str | None) -> ReprocessPlan:
    """The plan of undoing reprocess ``target`` (default: the newest reprocess or rewind)."""
    latest = view.state.latest
    newest = max(view.retractions.records, default=latest.number if latest else 0)
    number = target if target is not None else newest
    record = view.retractions.records.get(number)
    if record is None:
        raise NotFoundError(_no_reprocess(view, number), reason="reprocess")
    if number in view.retractions.undone:
        raise RefusedError(
            f"reprocess {number} of {view.parts.uri} is undone already. Nothing was changed", reason="undo_unavailable"
        )
    if record.get("mode") == DELETE:
        raise RefusedError(
            f"reprocess {number} of {view.parts.uri} deleted its files (delete=True): there is nothing to "
            "restore. Nothing was changed",
            reason="undo_unavailable",
        )
    if latest is None or latest.number != number:
        raise RefusedError(
            f"reprocess {number} of {view.parts.uri} cannot be undone: epoch {latest.number if latest else '?'} "
            f"began after it (a run may have reprocessed its keys already, or its quarantine was purged), so "
            "undoing would duplicate output. Nothing was changed",
            reason="undo_unavailable",
        )
    moved = [PlannedFile.from_json(f) for f in record.get("files", []) if f.get("outcome") == "moved"]
    present = {i.key: i.size for i in view.parts.blobs.list(quarantine_prefix(number))}
    lost = [f for f in moved if present.get(f.quarantine) != f.size_bytes]
    if lost:
        names = ", ".join(f.quarantine.rsplit("/", 1)[-1] for f in lost[:5])
        raise RefusedError(
            f"the quarantine of reprocess {number} of {view.parts.uri} is missing {len(lost)} of {len(moved)} "
            f"file(s) ({names}): they were deleted or purged, so an undo would not restore the output. Nothing "
            "was changed; the keys stay pending and the next run rewrites them",
            reason="quarantine_missing",
        )
    previous = PreviousState.from_json(record.get("previous") or {})
    gone = sorted(set(previous.valid) - set(view.state.manifests))
    snapshot_gone = previous.snapshot is not None and not view.parts.blobs.exists(
        f"snapshots/{previous.snapshot:08d}/manifest.json"
    )
    if gone or snapshot_gone:
        what = f"{len(gone)} checkpoint(s) it would make done again" if gone else f"snapshot {previous.snapshot}"
        raise RefusedError(
            f"reprocess {number} of {view.parts.uri} cannot be undone: {what} were deleted since (cleanup), so "
            "an undo would restore files whose keys stay pending. Nothing was changed; the next run reprocesses them",
            reason="undo_unavailable",
        )
    chosen = tuple(str(i) for i in record.get("checkpoints", []))
    return ReprocessPlan(
        action=UNDO,
        store_uri=view.parts.uri,
        epoch=latest.number,
        new_epoch=latest.number + 1,
        selection=None,
        to_commit=None,
        mode=QUARANTINE,
        checkpoints=chosen,
        committed_checkpoints=int(record.get("committed_checkpoints", 0)),
        keys=int(record.get("keys", 0)),
        files=tuple(moved),
        previous=previous,
        new_base=previous.valid,
        snapshot_drop=(),
        snapshot_from=previous.snapshot,
        snapshot_keys=None,
        output_roots=_roots_touched(moved),
        target=number,
        requested_by=requested_by,
        created_at=_now(),
    )


def purge_plan(view: StoreView, target: int, *, requested_by: str | None) -> ReprocessPlan:
    """The plan of purging reprocess ``target``'s quarantine (fenced only while undo is possible)."""
    record = view.retractions.records.get(target)
    if record is None:
        raise NotFoundError(_no_reprocess(view, target), reason="reprocess")
    latest = view.state.latest
    fence = latest is not None and latest.number == target and target not in view.retractions.undone
    listed = {i.key: i.size for i in view.parts.blobs.list(quarantine_prefix(target))}
    by_key = {str(f["quarantine"]): f for f in record.get("files", []) if f.get("quarantine")}
    files = tuple(
        PlannedFile(
            path=str(by_key[k]["path"]) if k in by_key else k,
            size_bytes=size,
            num_rows=int(by_key[k].get("num_rows", 0)) if k in by_key else 0,
            checkpoint_id=str(by_key[k].get("checkpoint_id", "")) if k in by_key else "",
            quarantine=k,
        )
        for k, size in sorted(listed.items())
    )
    previous = previous_state(view)
    return ReprocessPlan(
        action=PURGE,
        store_uri=view.parts.uri,
        epoch=previous.epoch,
        new_epoch=previous.epoch + 1 if fence and previous.epoch is not None and files else None,
        selection=None,
        to_commit=None,
        mode=DELETE,
        checkpoints=(),
        committed_checkpoints=0,
        keys=0,
        files=files,
        previous=previous,
        new_base=tuple(c.checkpoint_id for c in view.state.valid),
        snapshot_drop=(),
        snapshot_from=previous.snapshot,
        snapshot_keys=None,
        output_roots=(),
        target=target,
        requested_by=requested_by,
        created_at=_now(),
    )


# ---------------------------------------------------------------------- helpers


def _present(view: StoreView, files: dict[str, PlannedFile]) -> set[str]:
    """Which planned files exist now: one listing per output directory, not one request per file."""
    by_dir: dict[str, set[str]] = defaultdict(set)
    for path in files:
        canonical = canonical_uri(path)
        by_dir[canonical.rsplit("/", 1)[0]].add(canonical)

    def listed(directory: str) -> set[str]:
        try:
            blobs = view.parts.context.output_store(directory)
            return {canonical_uri(blobs.child_uri(i.key)) for i in blobs.list("") if "/" not in i.key}
        except CheckpointError:
            return set()

    found: set[str] = set()
    for names in view.parts.context.map(listed, sorted(by_dir)):
        found |= names
    return {p for p in files if canonical_uri(p) in found}


def _roots_touched(files: Iterable[PlannedFile]) -> tuple[str, ...]:
    return tuple(sorted({f.path.rsplit("/", 1)[0] for f in files}))


def _no_reprocess(view: StoreView, number: int) -> str:
    known = ", ".join(str(n) for n in sorted(view.retractions.records)) or "none"
    return (
        f"no reprocess or rewind of {view.parts.uri} finished with epoch {number} (its reprocesses: {known}; "
        "`airflow-ckpt reprocesses` lists them). Nothing was changed"
    )
