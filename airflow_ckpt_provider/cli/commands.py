"""The subcommands of ``airflow-ckpt``: each takes an open store and prints one result.

A command returns its exit code (``exit_codes.py``); typed store errors propagate to ``main``, which
turns them into one line on stderr and exit code 2 (bad input) or 3 (unreachable).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from airflow_ckpt_provider.cli import render
from airflow_ckpt_provider.cli.exit_codes import EXIT_FINDINGS, EXIT_OK
from airflow_ckpt_provider.display.deletion_preview import DeletionPreview, preview
from airflow_ckpt_provider.store import CheckpointStore
from airflow_ckpt_provider.store.errors import InvalidArgumentError, NotFoundError, RefusedError, UnsupportedError


@dataclass(frozen=True)
class Io:
    out: TextIO
    err: TextIO
    stdin: TextIO


def _json(io: Io, data: Any) -> None:
    io.out.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def list_checkpoints(store: CheckpointStore, args: argparse.Namespace, io: Io) -> int:
    checkpoints = store.inspection.list_checkpoints()
    valid = {c.checkpoint_id for c in store.inspection.valid_checkpoints()}
    if args.json:
        _json(io, [c.to_json() | {"valid": c.checkpoint_id in valid} for c in checkpoints])
        return EXIT_OK
    io.out.write(f"store: {store.uri}\n")
    render.table(
        ["ID", "STATUS", "VALID", "EPOCH", "PARTITION", "KEYS", "FILES", "ROWS", "SIZE", "SEALED AT"],
        [
            [
                c.checkpoint_id,
                c.status.value,
                c.checkpoint_id in valid,
                c.epoch,
                c.partition,
                c.num_keys,
                c.num_files,
                c.num_rows,
                render.human_bytes(c.num_bytes),
                c.sealed_at,
            ]
            for c in sorted(checkpoints, key=lambda c: (c.epoch, c.partition or -1, c.sealed_at))
        ],
        io.out,
    )
    return EXIT_OK


def show_checkpoint(store: CheckpointStore, args: argparse.Namespace, io: Io) -> int:
    checkpoint = store.inspection.get_checkpoint(args.checkpoint_id)
    if checkpoint is None:
        raise NotFoundError(
            f"no sealed checkpoint {args.checkpoint_id!r} in {store.uri}; `airflow-ckpt list` shows the ids it holds",
            reason="checkpoint",
        )
    valid = any(c.checkpoint_id == checkpoint.checkpoint_id for c in store.inspection.valid_checkpoints())
    if args.json:
        _json(io, checkpoint.to_json() | {"valid": valid})
        return EXIT_OK
    render.fields(
        {
            "checkpoint": checkpoint.checkpoint_id,
            "status": checkpoint.status.value,
            "valid": valid,
            "epoch": checkpoint.epoch,
            "partition": checkpoint.partition,
            "created at": checkpoint.created_at,
            "sealed at": checkpoint.sealed_at,
            "committed at": checkpoint.committed_at,
            "keys": checkpoint.num_keys,
            "key type": checkpoint.key_type,
            "key parts": len(checkpoint.key_parts),
            "files": checkpoint.num_files,
            "rows": checkpoint.num_rows,
            "size": render.human_bytes(checkpoint.num_bytes),
        },
        io.out,
    )
    if checkpoint.metadata:
        render.section("metadata", checkpoint.metadata, io.out, lambda value: json.dumps(value, default=str))
    return EXIT_OK


def progress(store: CheckpointStore, args: argparse.Namespace, io: Io) -> int:
    state = store.inspection.progress()
    # The job of the latest run (an epoch of a reprocess or a clear names none: the store's default job).
    rerun = store.inspection.rerun_plan(None if state.epoch is None else state.epoch.job, progress=state)
    if args.json:
        _json(io, state.to_json() | {"rerun": rerun.to_json() | {"description": rerun.describe()}})
        return EXIT_OK
    epoch = state.epoch
    expected = state.expected_partitions
    partitions = f"{state.sealed_partitions}/{expected}" if expected else f"{state.sealed_partitions}/?"
    render.fields(
        {
            "store": state.store_uri,
            "epoch": None if epoch is None else f"{epoch.number} ({epoch.status.value})",
            "epoch owner": None if epoch is None else epoch.owner,
            "partitions sealed": partitions,
            "valid checkpoints": state.valid_checkpoints,
            "keys done": state.keys_done,
            "key type": state.key_type,
            "files": state.files,
            "rows": state.rows,
            "size": render.human_bytes(state.bytes),
            "committed": state.committed,
            "degraded epochs": ", ".join(str(n) for n in state.degraded_epochs) or "none",
            "job": rerun.job,
            "next run": f"{rerun.action.value}: {rerun.describe()}",
        },
        io.out,
    )
    if state.last_commit:
        render.section("last commit", state.last_commit, io.out)
    return EXIT_OK


def epochs(store: CheckpointStore, args: argparse.Namespace, io: Io) -> int:
    all_epochs = store.epochs.all()
    if args.json:
        _json(
            io,
            [
                e.to_json() | {"status": e.status.value, "degraded": e.degraded, "ended_at": e.ended_at}
                for e in all_epochs
            ],
        )
        return EXIT_OK
    io.out.write(f"store: {store.uri}\n")
    render.table(
        ["EPOCH", "STATUS", "DEGRADED", "BASE", "EXPECTED", "OWNER", "CREATED AT", "ENDED AT"],
        [
            [
                e.number,
                e.status.value,
                e.degraded,
                len(e.base),
                e.expected_partitions,
                e.owner,
                e.created_at,
                e.ended_at,
            ]
            for e in all_epochs
        ],
        io.out,
    )
    return EXIT_OK


def keys(store: CheckpointStore, args: argparse.Namespace, io: Io) -> int:
    if args.limit < 0:
        raise InvalidArgumentError(f"--limit must be 0 (all) or positive, not {args.limit}", reason="cli_argument")
    limit = args.limit or None
    # Read part by part and stop at the limit: a store can hold far more keys than fit a screen.
    shown: list[Any] = []
    for source in store.key_sources():
        column = store.read_key_source(source).column("key").to_pylist()
        shown.extend(column if limit is None else column[: limit - len(shown)])
        if limit is not None and len(shown) >= limit:
            break
    total = store.inspection.progress().keys_done
    if args.json:
        _json(io, {"keys": shown, "shown": len(shown), "total": total})
        return EXIT_OK
    for key in shown:
        io.out.write(f"{key}\n")
    if len(shown) < total:
        io.err.write(f"({len(shown)} of {total} keys shown; --limit 0 shows all)\n")
    return EXIT_OK


def commit(store: CheckpointStore, args: argparse.Namespace, io: Io) -> int:
    result = store.commit(
        output_roots=args.output_root or None,
        degraded=args.degraded,
        unknown_files="keep" if args.keep_unknown_files else "fail",
    )
    if args.json:
        _json(io, result.to_json())
        return EXIT_OK
    render.fields(result.summary(), io.out)
    if result.unknown_files:
        io.out.write("files under the output roots that no writer of this store recorded (kept):\n")
        for path in result.unknown_files:
            io.out.write(f"  {path}\n")
    if result.kept_unprovable:
        io.out.write("files kept because the run was degraded and they cannot be proven orphaned:\n")
        for path in result.kept_unprovable:
            io.out.write(f"  {path}\n")
    _kept_by_the_guard(result.undeclared_output_files, result.refused_records, io)
    return EXIT_OK


def _kept_by_the_guard(undeclared: Sequence[str], refused: Sequence[str], io: Io) -> None:
    """What the deletion guard kept (docs/design.md, section 7): said, never silently skipped."""
    if undeclared:
        io.out.write(
            "output files kept: no output root is declared (pass --output-root DIR, or --dag-id/--task-id/--run-id "
            "of a task whose DAG declares output_roots; or no epoch of the store declares one):\n"
        )
        for path in undeclared:
            io.out.write(f"  {path}\n")
    if refused:
        io.out.write("records naming what no deletion may touch (never acted on; `airflow-ckpt check` lists them):\n")
        for line in refused:
            io.out.write(f"  {line}\n")


def _confirm(what: DeletionPreview, args: argparse.Namespace, io: Io, refused: Sequence[str] = ()) -> bool:
    """Show what will be deleted (and the records no deletion will act on); ask on a terminal unless ``--yes``."""
    if not args.json:
        io.out.write(what.describe() + "\n")
        if refused:
            io.out.write("Records naming what no deletion may touch (kept, never acted on):\n")
            for line in refused:
                io.out.write(f"  {line}\n")
    if args.yes or what.nothing_to_do:
        return True
    if not io.stdin.isatty():
        raise RefusedError(
            f"refusing to {what.action} without confirmation: no terminal to ask on; pass --yes to confirm",
            reason="confirmation_required",
        )
    io.err.write(f"Type 'yes' to {what.action}: ")
    io.err.flush()
    answer = io.stdin.readline().strip().lower()
    if answer != "yes":
        io.err.write("nothing deleted\n")
        return False
    return True


def _destroy(store: CheckpointStore, args: argparse.Namespace, io: Io, *, discard: bool) -> int:
    what = preview(store, "discard" if discard else "clear")
    if what.nothing_to_do:
        # No call at all: clear() would still open a fencing epoch on an untouched store.
        if args.json:
            _json(io, {"preview": what.to_json(), "result": None})
        else:
            io.out.write(what.describe() + "\n")
        return EXIT_OK
    refused: Sequence[str] = () if args.json else store.inspection.refused_records()
    if not _confirm(what, args, io, refused):
        return EXIT_FINDINGS
    result = store.housekeeping.discard_uncommitted() if discard else store.housekeeping.clear()
    if args.json:
        _json(io, {"preview": what.to_json(), "result": result.to_json()})
        return EXIT_OK
    render.fields(
        {
            "checkpoints deleted": len(result.deleted_checkpoints),
            "files deleted": len(result.deleted_files),
            "snapshots deleted": len(result.deleted_snapshots),
            "freed": render.human_bytes(result.bytes_freed),
        },
        io.out,
    )
    _kept_by_the_guard(result.undeclared_output_files, result.refused_records, io)
    return EXIT_OK


def clear(store: CheckpointStore, args: argparse.Namespace, io: Io) -> int:
    return _destroy(store, args, io, discard=False)


def discard(store: CheckpointStore, args: argparse.Namespace, io: Io) -> int:
    return _destroy(store, args, io, discard=True)


def check(store: CheckpointStore, args: argparse.Namespace, io: Io) -> int:
    """Exit 1 when the report holds problems (notes alone are expected leftovers)."""
    run_check = getattr(getattr(store, "inspection", None), "check", None)
    if run_check is None:
        raise UnsupportedError(
            "this version of the store has no consistency check; upgrade airflow-ckpt-provider", reason="no_check"
        )
    report = run_check()
    if args.json:
        _json(io, report.to_json())
        return EXIT_OK if report.ok else EXIT_FINDINGS
    io.out.write(f"store: {report.store_uri}\n")
    for title, items in (("problems", report.problems), ("notes", report.notes)):
        io.out.write(f"{title}: {len(items)}\n")
        for item in items:
            io.out.write(f"  - {item}\n")
    io.out.write("consistent\n" if report.ok else "PROBLEMS FOUND: the next commit may refuse; see above\n")
    return EXIT_OK if report.ok else EXIT_FINDINGS
