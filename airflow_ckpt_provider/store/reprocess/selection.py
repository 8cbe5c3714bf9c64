"""Resolving a ``Selection`` (or a rewind) into the units it picks, or a typed error that says
what is wrong with it. Reads only (docs/reprocess.md, "What can be selected")."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa

from airflow_ckpt_provider.store.errors import InvalidArgumentError, NotFoundError, UnsupportedError
from airflow_ckpt_provider.store.reprocess.model import Selection, parse_time
from airflow_ckpt_provider.store.reprocess.view import StoreView, Unit

KEY = "key"
_S3_SCHEMES = ("s3", "s3a", "s3n")
#: Candidate checkpoint id -> its sealing epoch.
Picked = dict[str, int]


def input_file_key(path: str) -> str:
    """The key ``read_parquet`` gives an input file: its normalized URI (``/d/a.parquet``,
    ``file:/d/./a.parquet`` -> ``file:///d/a.parquet``; ``s3a://b/k`` -> ``s3://b/k``)."""
    path = path.strip()
    parsed = urlparse(path)
    scheme = parsed.scheme.lower()
    if scheme in _S3_SCHEMES:
        return f"s3://{parsed.netloc}{posixpath.normpath('/' + parsed.path.lstrip('/'))}"
    if scheme == "file":
        return "file://" + os.path.normpath(unquote(parsed.path) or "/")
    if scheme and len(scheme) > 1:
        return f"{scheme}://{parsed.netloc}{posixpath.normpath('/' + parsed.path.lstrip('/'))}"
    return "file://" + os.path.normpath(os.path.abspath(path))


def resolve(view: StoreView, selection: Selection) -> list[Unit]:
    """The units ``selection`` picks: every criterion given must hold."""
    if selection.empty:
        raise InvalidArgumentError(
            "the selection is empty: give keys, input files, epochs, commits or a sealed-before/after time. "
            "To reprocess everything, clear the store instead",
            reason="empty_selection",
        )
    candidates: list[Picked] = []
    if selection.keys:
        candidates.append(_by_keys(view, list(selection.keys), files=False))
    if selection.files:
        candidates.append(_by_keys(view, [input_file_key(f) for f in selection.files], files=True))
    if selection.epochs:
        candidates.append(_by_epochs(view, selection.epochs))
    if selection.commits:
        candidates.append(_by_commits(view, selection.commits))
    if selection.sealed_after or selection.sealed_before:
        candidates.append(_by_time(view, selection.sealed_after, selection.sealed_before))
    picked = candidates[0]
    for other in candidates[1:]:
        picked = {i: e for i, e in picked.items() if i in other}
    return view.materialize(picked, picked)


def resolve_rewind(view: StoreView, to_commit: int) -> list[Unit]:
    """Every unit sealed after epoch ``to_commit``: committed by a later commit, or not committed."""
    if to_commit != 0 and to_commit not in view.done_commits:
        raise NotFoundError(_no_commit(view, to_commit), reason="commit")
    picked: Picked = {c.checkpoint_id: c.epoch for c in view.state.valid if c.epoch > to_commit}
    later = [c for c in view.commits if c > to_commit]
    for entry in view.lineages(later).values():
        if entry.epoch > to_commit and view.unit_of_entry(entry) is not None:
            picked[entry.checkpoint_id] = entry.epoch
    return view.materialize(picked, picked)


# ---------------------------------------------------------------------- criteria


def _by_keys(view: StoreView, requested: Sequence[Any], *, files: bool) -> Picked:
    reason = "input_files" if files else "keys"
    what = "input file(s)" if files else "key(s)"
    key_type = view.key_type()
    if key_type is None:
        hint = (
            " It keeps no keys of committed runs (retention delete_after_success deleted them after the commit): "
            "select by commit or epoch to retract that output"
            if view.commits
            else ""
        )
        raise NotFoundError(
            f"{view.parts.uri} holds no done keys, so no {what} can be selected.{hint}. Nothing was changed",
            reason=reason,
        )
    table = view.attributed_keys()
    key_field = table.schema.field(KEY)
    wanted = pa.table({KEY: _as_key_type(list(requested), key_field.type, reason, what)})
    flat_wanted = wanted.flatten()
    flat_keys = table.flatten()
    columns = flat_wanted.column_names
    unknown = flat_wanted.join(flat_keys.select(columns), keys=columns, join_type="left anti")
    if unknown.num_rows:
        examples = [row.get(KEY, row) for row in unknown.slice(0, 5).to_pylist()]
        raise NotFoundError(
            f"{unknown.num_rows} of {flat_wanted.num_rows} {what} are not done in {view.parts.uri} "
            f"(e.g. {examples!r}): they are pending already (the next run processes them) or misspelt; "
            "`airflow-ckpt keys` lists the done ones. Nothing was changed",
            reason=reason,
        )
    matched = flat_keys.join(flat_wanted, keys=columns, join_type="inner")
    picked: Picked = {}
    for checkpoint_id, epoch in zip(
        matched.column("checkpoint_id").to_pylist(), matched.column("epoch").to_pylist(), strict=True
    ):
        if checkpoint_id is None:
            raise UnsupportedError(
                f"some of the {what} are held by a snapshot compacted by an earlier version of "
                "airflow-ckpt-provider, which did not record which checkpoint each key came from: rewind to "
                "a commit made since the upgrade, or clear. Nothing was changed",
                reason="selection_unavailable",
            )
        picked[str(checkpoint_id)] = int(epoch)
    return picked


def _by_epochs(view: StoreView, epochs: Sequence[int]) -> Picked:
    for epoch in epochs:
        if not 1 <= epoch <= view.latest_number:
            raise NotFoundError(
                f"{view.parts.uri} has no epoch {epoch}: its epochs are 1 to {view.latest_number} "
                "(`airflow-ckpt epochs` lists them). Nothing was changed",
                reason="epoch",
            )
    wanted = set(epochs)
    picked: Picked = {c.checkpoint_id: c.epoch for c in view.state.valid if c.epoch in wanted}
    commits = {view.committed_in(e) for e in wanted}
    for entry in view.lineages(c for c in commits if c is not None).values():
        if entry.epoch in wanted and view.unit_of_entry(entry) is not None:
            picked[entry.checkpoint_id] = entry.epoch
    return picked


def _by_commits(view: StoreView, commits: Sequence[int]) -> Picked:
    for commit in commits:
        if commit not in view.done_commits:
            raise NotFoundError(_no_commit(view, commit), reason="commit")
    picked: Picked = {}
    for commit in commits:
        since = view.commit_before(commit)
        for entry in view.lineage(commit).values():
            if entry.epoch > since and view.unit_of_entry(entry) is not None:
                picked[entry.checkpoint_id] = entry.epoch
        for checkpoint in view.state.valid:
            if since < checkpoint.epoch <= commit and view.committed_in(checkpoint.epoch) == commit:
                picked[checkpoint.checkpoint_id] = checkpoint.epoch
    return picked


def _by_time(view: StoreView, after: str | None, before: str | None) -> Picked:
    def inside(sealed_at: str) -> bool:
        moment = parse_time(sealed_at)
        return (after is None or moment > parse_time(after)) and (before is None or moment < parse_time(before))

    picked: Picked = {c.checkpoint_id: c.epoch for c in view.state.valid if inside(c.sealed_at)}
    for entry in view.lineages(view.commits).values():
        if inside(entry.sealed_at) and view.unit_of_entry(entry) is not None:
            picked[entry.checkpoint_id] = entry.epoch
    return picked


# ---------------------------------------------------------------------- helpers


def _as_key_type(values: list[Any], target: pa.DataType, reason: str, what: str) -> pa.Array:
    """``values`` as the store's key type. Text (a command line's keys) is parsed; otherwise the
    kind must match (an integer is never silently taken for a string key)."""
    try:
        array = pa.array(values)
        same_kind = (
            array.type == target
            or pa.types.is_string(array.type)
            or pa.types.is_large_string(array.type)
            or (pa.types.is_integer(array.type) and pa.types.is_integer(target))
            or (pa.types.is_floating(array.type) and pa.types.is_floating(target))
            or (pa.types.is_struct(array.type) and pa.types.is_struct(target))
            or (pa.types.is_temporal(array.type) and pa.types.is_temporal(target))
        )
        if not same_kind:
            raise pa.ArrowTypeError(f"{array.type} is not {target}")
        return array.cast(target)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise NotFoundError(
            f"the {what} {values[:5]!r} are not of the store's key type {target} ({exc}); give them as that "
            "type (a file key is the input file's URI). Nothing was changed",
            reason=reason,
        ) from exc


def _no_commit(view: StoreView, commit: int) -> str:
    listed = ", ".join(str(c) for c in sorted(view.done_commits)) or "none"
    return (
        f"{view.parts.uri} has no finished commit {commit} (its commits: {listed}; `airflow-ckpt epochs` shows "
        "them). Nothing was changed"
    )


SelectionResolver = Callable[[StoreView], list[Unit]]
