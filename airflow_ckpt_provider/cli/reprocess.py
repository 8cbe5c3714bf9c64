"""``airflow-ckpt reprocess | rewind | undo | purge | resume | reprocesses``.

Each action prints its dry run first (counts, then the exact files), then asks on a terminal
(or takes ``--yes``), then runs exactly what was shown: the plan's fingerprint goes with the
action and the store refuses if anything changed in between. ``--dry-run`` stops after the
preview. See docs/reprocess.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import json
from collections.abc import Callable
from typing import Any

from airflow_ckpt_provider.cli import render
from airflow_ckpt_provider.cli.commands import Io
from airflow_ckpt_provider.store import CheckpointStore, ReprocessPlan, ReprocessResult, Selection
from airflow_ckpt_provider.store.errors import InvalidArgumentError, RefusedError
from airflow_ckpt_provider.store.reprocess.checks import resume_refusal
from airflow_ckpt_provider.store.reprocess.model import aware_time

#: How many files the human-readable preview lists before "… and N more" (``--show-files``).
DEFAULT_SHOWN_FILES = 50

Add = Callable[[str, str, Callable[..., int]], argparse.ArgumentParser]


def register(add: Add) -> None:
    """Add the subcommands to the ``airflow-ckpt`` parser (``add`` makes one subcommand)."""
    cmd = add(
        "reprocess",
        "make checkpoints pending again and move their output to the quarantine (by key, file, epoch, commit, time)",
        reprocess,
    )
    _uri(cmd)
    pick = cmd.add_argument_group("what to reprocess (every criterion given must hold)")
    pick.add_argument("--key", action="append", default=[], metavar="KEY", help="a done key (repeat)")
    pick.add_argument("--keys-file", metavar="PATH", help="a file with one key per line")
    pick.add_argument(
        "--json-keys", action="store_true", help="keys are JSON values (numbers, objects for composite keys)"
    )
    pick.add_argument("--file", action="append", default=[], metavar="PATH", help="an input file (file keys; repeat)")
    pick.add_argument("--epoch", action="append", default=[], type=int, metavar="N", help="sealed in epoch N")
    pick.add_argument("--commit", action="append", default=[], type=int, metavar="N", help="committed by commit N")
    pick.add_argument("--sealed-after", metavar="TIME", help="sealed after TIME (ISO 8601, with a time zone)")
    pick.add_argument("--sealed-before", metavar="TIME", help="sealed before TIME (ISO 8601, with a time zone)")
    _action_flags(cmd, retract=True)

    cmd = add("rewind", "return the store to its state after commit N (later output to the quarantine)", rewind)
    _uri(cmd)
    cmd.add_argument("--to-commit", type=int, required=True, metavar="N", help="the commit to return to (0: none)")
    _action_flags(cmd, retract=True)

    cmd = add("undo", "undo a reprocess or rewind (before the next run): files back, checkpoints done", undo)
    _uri(cmd)
    cmd.add_argument("--epoch", type=int, metavar="N", help="the reprocess to undo (default: the newest)")
    _action_flags(cmd, retract=False)

    cmd = add("purge", "delete quarantined files for good (no undo afterwards)", purge)
    _uri(cmd)
    cmd.add_argument("--epoch", type=int, metavar="N", help="the reprocess whose quarantine to purge (default: all)")
    _action_flags(cmd, retract=False)

    cmd = add("resume", "finish an interrupted reprocess, rewind, undo or purge (shows its plan first)", resume)
    _uri(cmd)
    _action_flags(cmd, retract=False)
    cmd = add("abandon", "end an interrupted reprocess, rewind, undo or purge without running its plan", abandon)
    _uri(cmd)
    _action_flags(cmd, retract=False)
    _uri(add("reprocesses", "list the reprocesses and rewinds of the store", list_reprocesses))


def _uri(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("uri", nargs="?", metavar="URI", help="store URI")


def _action_flags(cmd: argparse.ArgumentParser, *, retract: bool) -> None:
    if retract:
        cmd.add_argument("--delete", action="store_true", help="delete the files instead of the quarantine (no undo)")
        cmd.add_argument("--takeover", action="store_true", help="supersede an open epoch whose submit is dead")
    cmd.add_argument("--dry-run", action="store_true", help="show what would be done, change nothing")
    cmd.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    cmd.add_argument(
        "--show-files", type=int, default=DEFAULT_SHOWN_FILES, metavar="N", help="files listed in the preview"
    )


# ---------------------------------------------------------------------- commands


def reprocess(store: CheckpointStore, args: argparse.Namespace, io: Io) -> int:
    selection = selection_from(args)
    plan = store.reprocessing.preview(selection, delete=args.delete)
    return _run(
        plan,
        args,
        io,
        lambda: store.reprocessing.run(
            selection, delete=args.delete, expected=plan, takeover=args.takeover, requested_by=_who()
        ),
    )


def rewind(store: CheckpointStore, args: argparse.Namespace, io: Io) -> int:
    plan = store.reprocessing.preview_rewind(args.to_commit, delete=args.delete)
    return _run(
        plan,
        args,
        io,
        lambda: store.reprocessing.rewind(
            args.to_commit, delete=args.delete, expected=plan, takeover=args.takeover, requested_by=_who()
        ),
    )


def undo(store: CheckpointStore, args: argparse.Namespace, io: Io) -> int:
    plan = store.reprocessing.preview_undo(args.epoch)
    return _run(plan, args, io, lambda: store.reprocessing.undo(args.epoch, expected=plan, requested_by=_who()))


def purge(store: CheckpointStore, args: argparse.Namespace, io: Io) -> int:
    if args.epoch is None:
        plans = [
            store.reprocessing.preview_purge(r.epoch)
            for r in store.reprocessing.records()
            if r.finished and not r.purged
        ]
        files = tuple(f for p in plans for f in p.files)
        if not plans:
            _say(io, args, {"preview": None, "result": None}, "Nothing to purge.")
            return 0
        plan = plans[-1] if len(plans) == 1 else _merged(plans[-1], files)
    else:
        plan = store.reprocessing.preview_purge(args.epoch)
    return _run(plan, args, io, lambda: store.reprocessing.purge(args.epoch, requested_by=_who()))


def resume(store: CheckpointStore, args: argparse.Namespace, io: Io) -> int:
    """Like the original action: the plan its maintenance epoch records (every file), confirmed, then run."""
    plan = store.reprocessing.preview_resume()
    if plan is None:
        _say(io, args, {"result": None}, "Nothing to resume: no reprocess, rewind, undo or purge is unfinished.")
        return 0
    # Refused before the confirmation, with the store's own reason (no root given here, or files outside the DAG's).
    refusal = resume_refusal(store.uri, plan, store.deletion_guard())
    if refusal is not None:
        raise refusal
    return _run(plan, args, io, lambda: _resumed(store.reprocessing.resume(expected=plan), plan), confirm="resume")


def abandon(store: CheckpointStore, args: argparse.Namespace, io: Io) -> int:
    plan = store.reprocessing.preview_resume()
    if plan is None:
        _say(io, args, {"result": None}, "Nothing to abandon: no reprocess, rewind, undo or purge is unfinished.")
        return 0

    def act() -> ReprocessResult:
        abandoned = store.reprocessing.abandon(expected=plan, requested_by=_who())
        return ReprocessResult(action="abandon", epoch=abandoned.new_epoch, plan=abandoned)

    return _run(plan, args, io, act, confirm="abandon (its plan is not run)")


def _resumed(result: ReprocessResult | None, plan: ReprocessPlan) -> ReprocessResult:
    return result if result is not None else ReprocessResult(action=plan.action, epoch=None, plan=plan)


def list_reprocesses(store: CheckpointStore, args: argparse.Namespace, io: Io) -> int:
    records = store.reprocessing.records()
    if args.json:
        io.out.write(json.dumps([r.to_json() for r in records], indent=2, sort_keys=True, default=str) + "\n")
        return 0
    io.out.write(f"store: {store.uri}\n")
    render.table(
        ["EPOCH", "ACTION", "WHAT", "MODE", "CHECKPOINTS", "KEYS", "FILES", "SIZE", "STATE", "BY", "FINISHED AT"],
        [
            [
                r.epoch,
                r.action,
                f"to commit {r.to_commit}"
                if r.to_commit is not None
                else (r.selection.describe() if r.selection else ""),
                r.mode,
                r.checkpoints,
                r.keys,
                r.files,
                render.human_bytes(r.bytes),
                "unfinished"
                if not r.finished
                else (
                    "undone"
                    if r.undone
                    else "purged"
                    if r.purged
                    else "in quarantine"
                    if r.mode == "quarantine"
                    else "deleted"
                ),
                r.requested_by,
                r.finished_at,
            ]
            for r in records
        ],
        io.out,
    )
    return 0


# ---------------------------------------------------------------------- helpers


def selection_from(args: argparse.Namespace) -> Selection:
    keys: list[Any] = list(args.key)
    if args.keys_file:
        try:
            with open(args.keys_file, encoding="utf-8") as handle:
                keys.extend(line.rstrip("\n") for line in handle if line.strip())
        except OSError as exc:
            raise InvalidArgumentError(
                f"cannot read --keys-file {args.keys_file}: {exc.strerror}", reason="cli_argument"
            ) from exc
    if args.json_keys:
        try:
            keys = [_json_key(k) for k in keys]
        except json.JSONDecodeError as exc:
            raise InvalidArgumentError(
                f"--json-keys: {_shown(exc.doc)} is not JSON ({exc.msg})", reason="cli_argument"
            ) from exc
    try:
        return Selection(
            keys=keys,
            files=args.file,
            epochs=args.epoch,
            commits=args.commit,
            sealed_after=_time(args.sealed_after, "--sealed-after"),
            sealed_before=_time(args.sealed_before, "--sealed-before"),
        )
    except ValueError as exc:
        raise InvalidArgumentError(str(exc), reason="selection") from exc


def _time(value: str | None, flag: str) -> dt.datetime | None:
    return None if value is None else aware_time(value, name=flag, reason="cli_argument")


def _who() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def _merged(last: ReprocessPlan, files: tuple[Any, ...]) -> ReprocessPlan:
    import dataclasses

    return dataclasses.replace(last, files=files, target=None)


def _say(io: Io, args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    if args.json:
        io.out.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    else:
        io.out.write(text + "\n")


def _run(
    plan: ReprocessPlan,
    args: argparse.Namespace,
    io: Io,
    action: Callable[[], ReprocessResult],
    *,
    confirm: str | None = None,
) -> int:
    """Show the plan; stop on --dry-run or when there is nothing to do; confirm; run; report."""
    verb = confirm or plan.action
    if not args.json:
        io.out.write(plan.describe(max_files=args.show_files) + "\n")
    if args.dry_run or (confirm is None and plan.nothing_to_do and not plan.refused_paths):
        if args.json:
            io.out.write(json.dumps({"preview": plan.to_json(), "result": None}, indent=2, default=str) + "\n")
        return 0
    if not args.yes:
        if not io.stdin.isatty():
            raise RefusedError(
                f"refusing to {verb} without confirmation: no terminal to ask on; pass --yes to confirm "
                "(or --dry-run to only look)",
                reason="confirmation_required",
            )
        io.err.write(f"Type 'yes' to {verb}: ")
        io.err.flush()
        if io.stdin.readline().strip().lower() != "yes":
            io.err.write("nothing changed\n")
            return 1
    result = action()
    _report(result, args, io, plan)
    return 0


def _report(result: ReprocessResult, args: argparse.Namespace, io: Io, plan: ReprocessPlan | None = None) -> None:
    if args.json:
        data = {"preview": None if plan is None else plan.to_json(), "result": result.to_json()}
        io.out.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
        return
    summary = result.summary()
    render.fields(
        {
            "action": summary["action"] + (" (resumed)" if result.resumed else ""),
            "epoch": summary["epoch"],
            "checkpoints pending": summary["checkpoints"] if result.action in ("reprocess", "rewind") else None,
            "keys pending": summary["keys"] if result.action in ("reprocess", "rewind") else None,
            "files moved to quarantine": summary["moved"],
            "files deleted": summary["deleted"] + summary["purged"],
            "files restored": summary["restored"],
            "files already missing": summary["missing"],
            "size": render.human_bytes(summary["bytes"]),
        },
        io.out,
    )
    if result.action in ("reprocess", "rewind") and result.epoch is not None:
        io.out.write(
            "The next run processes the pending keys. Until then `airflow-ckpt undo` restores everything; "
            "`airflow-ckpt purge` deletes the quarantined files.\n"
        )


def _json_key(text: str) -> object:
    """One ``--json-keys`` value; :class:`CheckpointError` (exit 2, one line) for what JSON cannot hold
    as a key: nesting Python cannot parse, or an integer of thousands of digits."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else " ".join(str(exc).split())[:120]
        raise InvalidArgumentError(
            f"--json-keys: {_shown(text)} is not a usable key ({reason})", reason="cli_argument"
        ) from None


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 60 else repr(text[:60]) + f"... ({len(text)} characters)"
