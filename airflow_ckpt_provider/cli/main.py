"""``airflow-ckpt``: look at and manage checkpoint stores without the Airflow UI.

Every subcommand works on one store, named either by its URI
(``file:///path``, ``/path``, ``s3://bucket/prefix``) or by the task instance that
owns it (``--dag-id/--task-id/--run-id``, resolved like the operator does). Output
is a human-readable table, or JSON with ``--json``.

Exit codes: 0 done; 1 ``check`` found problems or a confirmation was declined;
2 bad input (usage, a bad URI or id, corrupt data — one line on stderr, nothing
deleted); 3 the store cannot be reached (network, bucket, credentials).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from airflow_ckpt_provider import __version__
from airflow_ckpt_provider.cli import commands, reprocess
from airflow_ckpt_provider.cli.exit_codes import EXIT_ERROR, EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNAVAILABLE
from airflow_ckpt_provider.cli.store_selection import StoreTarget, open_target
from airflow_ckpt_provider.display.redaction import without_uri_userinfo
from airflow_ckpt_provider.store.errors import CheckpointError, InvalidArgumentError, StoreUnavailableError

__all__ = ["EXIT_ERROR", "EXIT_FINDINGS", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_UNAVAILABLE", "build_parser", "main"]


def _store_arguments() -> argparse.ArgumentParser:
    """Options every subcommand takes (a parent parser, so they may follow the subcommand)."""
    parent = argparse.ArgumentParser(add_help=False)
    where = parent.add_argument_group("store (a URI, or the task instance that owns it)")
    where.add_argument("--dag-id", help="DAG id of the task instance whose store to use")
    where.add_argument("--task-id", help="task id of the task instance whose store to use")
    where.add_argument("--run-id", help="run id of the task instance whose store to use")
    where.add_argument(
        "--map-index",
        type=int,
        default=-1,
        help="map index of a mapped task instance (each has its own store; default -1: not mapped)",
    )
    where.add_argument(
        "--output-root",
        action="append",
        default=[],
        metavar="URI",
        help="an output directory of the store's job (repeat for several): deletions, moves and restores stay "
        "under these, whatever the store's records declare. Default: the DAG's output_roots with --dag-id, "
        "else the roots the store records in its own scheme and bucket",
    )
    s3 = parent.add_argument_group(
        "S3 options (credentials come from the environment or --aws-conn-id, never from flags)"
    )
    s3.add_argument("--endpoint-url", help="S3-compatible endpoint, e.g. http://127.0.0.1:8333")
    s3.add_argument("--region", help="S3 region name")
    s3.add_argument("--aws-conn-id", help="Airflow connection holding the S3 credentials")
    s3.add_argument("--timeout", type=float, dest="timeout_seconds", help="per-request timeout in seconds (default 10)")
    parent.add_argument("--json", action="store_true", help="print JSON instead of tables")
    return parent


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airflow-ckpt",
        description="Inspect and manage checkpoint stores of checkpointed Spark jobs.",
        epilog="Exit codes: 0 ok, 1 problems found / declined, 2 bad input, 3 store unreachable.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parent = _store_arguments()

    def add(name: str, help_text: str, handler: Callable[..., int]) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_text, description=help_text, parents=[parent])
        cmd.set_defaults(handler=handler)
        return cmd

    add("list", "list the sealed checkpoints", commands.list_checkpoints).add_argument(
        "uri", nargs="?", metavar="URI", help="store URI"
    )
    show = add("show", "show one checkpoint's manifest", commands.show_checkpoint)
    show.add_argument(
        "positionals",
        nargs="+",
        metavar="[URI] ID",
        help="store URI (unless --dag-id/--task-id/--run-id) and checkpoint id",
    )
    add("progress", "what is done: partitions, keys, files, commit", commands.progress).add_argument(
        "uri", nargs="?", metavar="URI", help="store URI"
    )
    add("epochs", "list the epochs (one per submit)", commands.epochs).add_argument(
        "uri", nargs="?", metavar="URI", help="store URI"
    )
    keys = add("keys", "print checkpointed keys (those the next run skips)", commands.keys)
    keys.add_argument("uri", nargs="?", metavar="URI", help="store URI")
    keys.add_argument("--limit", type=int, default=100, help="print at most N keys (default 100, 0: all)")
    commit = add("commit", "commit the valid checkpoints and delete orphaned output files", commands.commit)
    commit.add_argument("uri", nargs="?", metavar="URI", help="store URI")
    commit.add_argument(
        "--degraded",
        action="store_true",
        help="the run was degraded: delete nothing that cannot be proven orphaned",
    )
    commit.add_argument(
        "--keep-unknown-files",
        action="store_true",
        help="commit although files no run of this store wrote, or live earlier output the commit cannot attribute, "
        "lie under the output roots (kept, listed)",
    )
    for name, help_text, handler in (
        ("clear", "delete every checkpoint: the next run reprocesses everything", commands.clear),
        (
            "discard",
            "delete sealed but uncommitted checkpoints and their output files",
            commands.discard,
        ),
    ):
        cmd = add(name, help_text, handler)
        cmd.add_argument("uri", nargs="?", metavar="URI", help="store URI")
        cmd.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    add("check", "consistency report (exit 1 if problems are found)", commands.check).add_argument(
        "uri", nargs="?", metavar="URI", help="store URI"
    )
    reprocess.register(add)
    return parser


def _target(args: argparse.Namespace) -> StoreTarget:
    uri = getattr(args, "uri", None)
    if args.command == "show":
        positionals: list[str] = args.positionals
        names_ti = any(getattr(args, f) for f in ("dag_id", "task_id", "run_id"))
        wanted = 1 if names_ti else 2
        if len(positionals) != wanted:
            usage = "ID (with --dag-id/--task-id/--run-id)" if names_ti else "URI ID"
            raise InvalidArgumentError(f"show takes {usage}; got {len(positionals)} argument(s)", reason="target")
        args.checkpoint_id = positionals[-1]
        uri = positionals[0] if wanted == 2 else None
    return StoreTarget(
        uri=uri,
        dag_id=args.dag_id,
        task_id=args.task_id,
        run_id=args.run_id,
        map_index=args.map_index,
        aws_conn_id=args.aws_conn_id,
        endpoint_url=args.endpoint_url,
        region=args.region,
        timeout_seconds=args.timeout_seconds,
        output_roots=tuple(args.output_root),
    )


def _error(err: TextIO, exc: BaseException) -> None:
    # One line: the typed errors already say what happened and what to do.
    message = without_uri_userinfo(" ".join(str(exc).split())) or type(exc).__name__
    err.write(f"airflow-ckpt: error: {message}\n")


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stdin: TextIO | None = None,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    stdin = stdin or sys.stdin
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    store = None
    try:
        store = open_target(_target(args))
        handler: Callable[..., int] = args.handler
        return handler(store, args, commands.Io(out=out, err=err, stdin=stdin))
    except StoreUnavailableError as exc:
        _error(err, exc)
        return EXIT_UNAVAILABLE
    except CheckpointError as exc:
        _error(err, exc)
        return EXIT_ERROR
    except KeyboardInterrupt:
        err.write("airflow-ckpt: interrupted\n")
        return EXIT_INTERRUPTED
    finally:
        if store is not None:
            _close(store)


def _close(store: Any) -> None:
    close = getattr(store, "close", None)
    if callable(close):
        close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
