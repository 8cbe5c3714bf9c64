"""Deletion is confined to the store's own root and the output roots declared when an epoch opened.

Records read back from a store are input too: anyone who can write the store's prefix (every
Spark executor that uses it) can write an intent record. These tests write poisoned records the
way such a writer could (raw objects under ``attempts/{id}/intents/`` and, as stores of earlier
versions hold them, ``checkpoints/{id}/intents/``), then run every
operation that deletes (clear, discard, commit with and without explicit roots, retention) on
both backends: every victim file must survive, and ``check()`` must report the records.
The victims live on the local disk of the process running the operation (the API server's or
the CLI's host) and, for the S3 backend, in the same bucket outside the declared output.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_ckpt_provider.cli.main import EXIT_OK, main
from airflow_ckpt_provider.store import (
    CheckpointStore,
    FileMetadata,
    RetentionPolicy,
    Selection,
    new_checkpoint_id,
    open_blobs,
    open_store,
)
from airflow_ckpt_provider.store.errors import InvalidArgumentError, RefusedError
from tests.store.conftest import Backend
from tests.store.helpers import write_task
from tests.support.errors import raises_reason

#: A name intent's marker must be at least this long (docs/store-api.md, "Name intents").
MIN_MARKER = 12


@dataclass
class Victims:
    """Files no operation on the store may delete, and the records that name them."""

    local: list[Path]
    remote: list[str]  # s3:// objects (S3 backend only)
    poisoned_ids: list[str]

    def missing(self, backend: Backend) -> list[str]:
        gone = [str(p) for p in self.local if not p.exists()]
        for uri in self.remote:
            root, _, name = uri.rpartition("/")
            if not open_blobs(root, **backend.options).exists(name):
                gone.append(uri)
        return gone


def _raw_intent(store: CheckpointStore, record: dict[str, Any]) -> str:
    """Write an intent record as any writer of the store's prefix can (no API validation): where this
    version's attempts write them, and where stores of earlier versions hold them (both are read)."""
    checkpoint_id = new_checkpoint_id()
    data = json.dumps({"checkpoint_id": checkpoint_id, **record}).encode()
    store.blobs.put(f"attempts/{checkpoint_id}/intents/0000.json", data)
    store.blobs.put(f"checkpoints/{checkpoint_id}/intents/0001.json", data)
    return checkpoint_id


def poison(store: CheckpointStore, backend: Backend, tmp_path: Path, epoch: int) -> Victims:
    """Plant files outside the store and its output, and records that name them."""
    victim = tmp_path / "victim"
    victim.mkdir()
    important = victim / "important.txt"
    important.write_text("do not delete")
    victim2 = tmp_path / "victim2"
    (victim2 / "sub").mkdir(parents=True)
    dotted = [victim2 / "a.b.txt", victim2 / "sub" / "c.d"]
    for path in dotted:
        path.write_text("precious")
    traversal = tmp_path / "victim3.txt"
    traversal.write_text("precious")
    output_local = backend.output_uri if backend.name == "local" else f"file://{tmp_path}/out"
    ids = [
        # (a) an exact path outside any output (for an S3 store: a path on the deleting host)
        _raw_intent(store, {"epoch": epoch, "paths": [important.as_uri()]}),
        # (b) a name intent with a 1-character marker: every file with a '.' under the root
        _raw_intent(store, {"epoch": epoch, "paths": [], "root": victim2.as_uri(), "name_marker": "."}),
        # (c) paths that only look as if they were under the output
        _raw_intent(
            store,
            {
                "epoch": epoch,
                "paths": [
                    f"{output_local}/../victim3.txt",
                    f"{output_local}/%2E%2E/victim3.txt",
                    f"{output_local}-evil/x.parquet",
                ],
            },
        ),
    ]
    remote: list[str] = []
    if backend.name == "s3":
        bucket = backend.store_uri[len("s3://") :].split("/", 1)[0]
        precious = f"s3://{bucket}/elsewhere/precious.parquet"
        root, _, name = precious.rpartition("/")
        open_blobs(root, **backend.options).put(name, b"precious")
        remote.append(precious)
        ids.append(_raw_intent(store, {"epoch": epoch, "paths": [precious]}))
        ids.append(
            _raw_intent(
                store,
                {"epoch": epoch, "paths": [], "root": f"s3://{bucket}/elsewhere", "name_marker": "."},
            )
        )
    return Victims(local=[important, *dotted, traversal], remote=remote, poisoned_ids=ids)


def _store_with_one_task(backend: Backend) -> tuple[CheckpointStore, int]:
    store = backend.store()
    epoch = store.epochs.begin(owner="confinement-test")
    write_task(store, backend, epoch=epoch.number, partition=0, keys=["a", "b"])
    return store, epoch.number


def _commit(store: CheckpointStore, backend: Backend) -> None:
    store.commit()


def _commit_with_roots(store: CheckpointStore, backend: Backend) -> None:
    store.commit(output_roots=[backend.output_uri])


def _commit_and_delete_after_success(store: CheckpointStore, backend: Backend) -> None:
    store.commit()
    store.housekeeping.cleanup(RetentionPolicy.DELETE_AFTER_SUCCESS)


def _commit_and_retain(store: CheckpointStore, backend: Backend) -> None:
    store.commit()
    store.housekeeping.cleanup(RetentionPolicy.RETAIN)


def _cleanup_older_than(store: CheckpointStore, backend: Backend) -> None:
    store.housekeeping.cleanup_older_than(dt.timedelta(seconds=0))


OPERATIONS: dict[str, Callable[[CheckpointStore, Backend], Any]] = {
    "clear": lambda store, backend: store.housekeeping.clear(),
    "discard": lambda store, backend: store.housekeeping.discard_uncommitted(),
    "commit": _commit,
    "commit_with_output_roots": _commit_with_roots,
    "commit_then_delete_after_success": _commit_and_delete_after_success,
    "commit_then_retain": _commit_and_retain,
    "cleanup_older_than": _cleanup_older_than,
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_poisoned_records_never_delete_outside_the_store(backend: Backend, tmp_path: Path, operation: str) -> None:
    store, epoch = _store_with_one_task(backend)
    victims = poison(store, backend, tmp_path, epoch)
    OPERATIONS[operation](store, backend)
    assert victims.missing(backend) == []


def _cli_flags(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    if backend.name != "s3":
        return []
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", backend.options["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", backend.options["aws_secret_access_key"])
    return ["--endpoint-url", backend.options["endpoint_url"], "--region", "us-east-1"]


@pytest.mark.parametrize("command", ["clear", "discard"])
def test_cli_clear_and_discard_spare_every_victim(
    backend: Backend, tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, epoch = _store_with_one_task(backend)
    victims = poison(store, backend, tmp_path, epoch)
    flags = _cli_flags(backend, monkeypatch)
    out, err = io.StringIO(), io.StringIO()
    code = main([command, backend.store_uri, "--yes", *flags], out=out, err=err, stdin=io.StringIO(""))
    assert code == EXIT_OK, err.getvalue()
    assert victims.missing(backend) == []


@pytest.mark.parametrize("command", ["clear", "discard"])
def test_the_cli_confirmation_lists_the_output_roots_and_the_refused_records(
    backend: Backend, tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, epoch = _declared_store(backend)
    write_task(store, backend, epoch=epoch, partition=0, keys=["a", "b"], seal=False)
    victims = poison(store, backend, tmp_path, epoch)
    out, err = io.StringIO(), io.StringIO()
    # The person vouches for the store's output root (a URI alone declares none: docs/security.md).
    argv = [command, backend.store_uri, "--output-root", backend.output_uri, *_cli_flags(backend, monkeypatch)]
    code = main(argv, out=out, err=err, stdin=io.StringIO(""))
    assert code != EXIT_OK  # no terminal, no --yes: refused, after showing what it would do
    text = out.getvalue()
    assert f"Output files are deleted only under: {backend.output_uri}." in text, text
    for checkpoint_id in victims.poisoned_ids:
        assert checkpoint_id in text, text
    assert victims.missing(backend) == []


def test_check_reports_every_poisoned_record(backend: Backend, tmp_path: Path) -> None:
    store, epoch = _declared_store(backend)
    write_task(store, backend, epoch=epoch, partition=0, keys=["a", "b"])
    victims = poison(store, backend, tmp_path, epoch)
    report = store.inspection.check()
    assert not report.ok
    text = "\n".join(report.problems)
    for checkpoint_id in victims.poisoned_ids:
        assert checkpoint_id in text, (checkpoint_id, report.problems)
    assert "marker" in text  # the 1-character name marker is named as the reason
    assert victims.missing(backend) == []  # check() only reads


def test_short_name_marker_is_refused_on_write_and_ignored_on_read(backend: Backend, tmp_path: Path) -> None:
    store, epoch = _store_with_one_task(backend)
    with raises_reason(InvalidArgumentError, "out_of_range", match="at least 12"):
        store.record_name_intent(new_checkpoint_id(), backend.output_uri, "x" * (MIN_MARKER - 1), epoch=epoch)
    # A short marker written behind the API's back, under the output the commit sweeps: it
    # would match every file there; it must match none (the file is reported, not deleted).
    backend.write_output("part-keep.parquet", b"written by somebody else")
    _raw_intent(store, {"epoch": epoch, "paths": [], "root": backend.output_uri, "name_marker": "."})
    result = store.commit(output_roots=[backend.output_uri], unknown_files="keep")
    assert "part-keep.parquet" in backend.output_names()
    assert f"{backend.output_uri}/part-keep.parquet" in result.unknown_files


# ---------------------------------------------------------------------- declared output roots


def _declared_store(backend: Backend, **begin: Any) -> tuple[CheckpointStore, int]:
    store = backend.store()
    epoch = store.epochs.begin(owner="confinement-test", output_roots=[backend.output_uri], **begin)
    return store, epoch.number


@pytest.mark.parametrize("operation", ["clear", "discard", "commit"])
def test_declared_roots_still_lose_their_orphans_but_nothing_else(
    backend: Backend, tmp_path: Path, operation: str
) -> None:
    store, epoch = _declared_store(backend)
    write_task(store, backend, epoch=epoch, partition=0, keys=["a", "b"])
    _, orphan_paths, _ = write_task(store, backend, epoch=epoch, partition=1, keys=["c"], seal=False)
    victims = poison(store, backend, tmp_path, epoch)
    OPERATIONS[operation](store, backend)
    assert victims.missing(backend) == []
    names = backend.output_names()
    for path in orphan_paths:
        assert path.rsplit("/", 1)[-1] not in names  # the unsealed attempt's file is gone
    if operation == "commit":
        assert len(names) == 1  # the valid checkpoint's file stays


def test_the_driver_declares_its_write_root_before_writing(backend: Backend, tmp_path: Path) -> None:
    store = backend.store()
    epoch = store.epochs.begin(owner="confinement-test").number
    store.epochs.declare_output_root(epoch, backend.output_uri)
    _, orphan_paths, _ = write_task(store, backend, epoch=epoch, partition=1, keys=["c"], seal=False)
    victims = poison(store, backend, tmp_path, epoch)
    result = store.housekeeping.discard_uncommitted()
    assert sorted(result.deleted_files) == sorted(orphan_paths)
    assert victims.missing(backend) == []


def test_a_driver_cannot_widen_the_roots_the_operator_declared(backend: Backend, tmp_path: Path) -> None:
    from airflow_ckpt_provider.store.errors import InvalidArgumentError, RefusedError

    store, epoch = _declared_store(backend)
    store.epochs.declare_output_root(epoch, f"{backend.output_uri}/part=1")  # under a declared root: fine
    # On S3 a host path is not even bound to the store (docs/security.md, "The trust model").
    with pytest.raises((RefusedError, InvalidArgumentError), match=r"output_roots|s3://") as raised:
        store.epochs.declare_output_root(epoch, (tmp_path / "victim").as_uri())
    assert raised.value.reason in ("output_root_not_declared", "output_root")


def test_store_without_declared_roots_deletes_nothing_outside_its_root(backend: Backend, tmp_path: Path) -> None:
    """Stores written before roots were declared: clear still resets the store, keeps output, says so."""
    store, _ = _store_with_one_task(backend)
    [output_file] = sorted(backend.output_names())
    result = store.housekeeping.clear()
    assert store.inspection.list_checkpoints() == [] and result.deleted_checkpoints
    assert result.deleted_files == ()
    assert backend.output_names() == {output_file}
    assert result.undeclared_output_files == (f"{backend.output_uri}/{output_file}",)


# ---------------------------------------------------------------------- reprocess and rewind


def _forge_lineage(backend: Backend, commit: int, paths: list[str]) -> None:
    """Add rows naming ``paths`` to commit ``commit``'s lineage, as any writer of the prefix could."""
    blobs = backend.store_blobs()
    key = f"lineage/{commit:08d}.parquet"
    lineage = pq.read_table(pa.BufferReader(blobs.get(key)[0]))
    template = lineage.slice(0, 1).to_pylist()[0]
    forged = [template | {"path": path, "size_bytes": 8} for path in paths]
    sink = io.BytesIO()
    pq.write_table(pa.concat_tables([lineage, pa.Table.from_pylist(forged, schema=lineage.schema)]), sink)
    blobs.put(key, sink.getvalue())


ACTIONS: dict[str, Callable[[CheckpointStore, int], Any]] = {
    "reprocess_quarantine": lambda store, commit: store.reprocessing.run(Selection(commits=[commit])),
    "reprocess_delete": lambda store, commit: store.reprocessing.run(Selection(commits=[commit]), delete=True),
    "rewind": lambda store, commit: store.reprocessing.rewind(0),
}


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_reprocess_and_rewind_never_move_or_delete_a_victim(backend: Backend, tmp_path: Path, action: str) -> None:
    """Poisoned intents plus lineage rows naming the victims (a local path from an S3 store, a '..'
    path, another prefix of the bucket): the plan lists them as refused and the action changes nothing."""
    store, epoch = _declared_store(backend)
    write_task(store, backend, epoch=epoch, partition=0, keys=["a", "b"])
    victims = poison(store, backend, tmp_path, epoch)
    store.commit()
    store.housekeeping.cleanup(
        RetentionPolicy.DELETE_AFTER_SUCCESS
    )  # the plan then reads which file is whose from lineage
    output_local = backend.output_uri if backend.name == "local" else f"file://{tmp_path}/out"
    named = [victims.local[0].as_uri(), f"{output_local}/../victim3.txt", *victims.remote]
    _forge_lineage(backend, epoch, named)
    plan = store.reprocessing.preview(Selection(commits=[epoch]))
    assert set(plan.refused_paths) == set(named), plan.refused_paths
    names_before = backend.output_names()
    with raises_reason(RefusedError, "unsafe_path", match="never touched"):
        ACTIONS[action](store, epoch)
    assert victims.missing(backend) == []
    assert backend.output_names() == names_before  # refused as a whole: not even the real file moved


# ---------------------------------------------------------------------- output paths that need escaping


@pytest.mark.parametrize("name", ["out#1", "out?q", "out 1"])
def test_output_files_in_odd_directories_are_deleted_exactly(tmp_path: Path, name: str) -> None:
    out = tmp_path / name
    sibling = tmp_path / "out"
    sibling.mkdir()
    (sibling / "part-0.parquet").write_bytes(b"keep me")
    store = open_store(str(tmp_path / "store"))
    blobs = open_blobs(str(out))
    epoch = store.epochs.begin(owner="x", output_roots=[blobs.uri]).number
    checkpoint_id = new_checkpoint_id()
    path = blobs.child_uri("part-0.parquet")
    store.record_intent(checkpoint_id, [path], epoch=epoch)
    blobs.put("part-0.parquet", b"uncommitted")
    store.stage_keys(checkpoint_id, ["k"])
    store.stage_files(checkpoint_id, [FileMetadata(path, 11, 1)])
    store.checkpoint(checkpoint_id, epoch=epoch, partition=0)
    result = store.housekeeping.discard_uncommitted()
    assert result.deleted_files == (path,)
    assert not (out / "part-0.parquet").exists()
    assert (sibling / "part-0.parquet").read_bytes() == b"keep me"


def test_who_declares_nothing_is_named_and_configured_roots_never_declare_by_themselves(tmp_path: Path) -> None:
    """An anchor that declares nothing keeps every output file and the refusal names it; configured roots
    (``[ckpt] trusted_output_roots``) only bound what the records declare (docs/security.md)."""
    uri, out = (tmp_path / "store").as_uri(), tmp_path / "lake" / "out"
    out.mkdir(parents=True)
    undeclared = open_store(uri)
    undeclared.epochs.begin(owner="job")  # declares no root: the store API used directly, no output_roots
    who = "output_roots of DAG task 'etl.commit' and of its Spark task 'process'"
    guard = open_store(uri, trusted_output_roots=(), output_roots_declared_by=who).deletion_guard()
    assert guard.keeps_all_output and guard.root_uris == ()
    assert guard.refusal((out / "part-0.parquet").as_uri()) == (
        f"{(out / 'part-0.parquet').as_uri()}: no output root is declared ({who}: none), so no output file is deleted"
    )
    configured = [(tmp_path / "lake").as_uri()]
    assert open_store(uri, configured_output_roots=configured).deletion_guard().root_uris == ()
    open_store(uri).epochs.begin(owner="job", output_roots=[out.as_uri(), (tmp_path / "host").as_uri()])
    bounded = open_store(uri, configured_output_roots=configured).deletion_guard()
    assert bounded.root_uris == (out.as_uri(),) and not bounded.keeps_all_output
    assert [r.split(" is outside")[0] for r in bounded.refused_roots] == [f"output root {(tmp_path / 'host').as_uri()}"]
