"""``airflow-ckpt`` subcommands on real local stores, through ``main()`` in this process."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from airflow_ckpt_provider.cli.main import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, main
from airflow_ckpt_provider.store import open_store
from tests.cli.sample_store import FILE_BYTES, fill_store


class Terminal(io.StringIO):
    """A stdin that says it is a terminal, with the answer a person would type."""

    def isatty(self) -> bool:
        return True


def run(*argv: str, stdin: io.StringIO | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err, stdin=stdin or io.StringIO(""))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def store_uri(tmp_path: Path) -> str:
    uri = (tmp_path / "store").as_uri()
    fill_store(uri, (tmp_path / "out").as_uri())
    return uri


def test_list_shows_every_checkpoint(store_uri: str) -> None:
    code, out, err = run("list", store_uri)
    assert (code, err) == (EXIT_OK, "")
    ids = {c.checkpoint_id for c in open_store(store_uri).inspection.list_checkpoints()}
    assert len(ids) == 3
    for checkpoint_id in ids:
        assert checkpoint_id in out
    assert "checkpointed" in out and "ID" in out.splitlines()[1]


def test_list_json(store_uri: str) -> None:
    code, out, _ = run("list", store_uri, "--json")
    rows = json.loads(out)
    assert code == EXIT_OK
    assert sorted(r["partition"] for r in rows) == [0, 1, 2]
    assert all(r["valid"] and r["num_keys"] == 50 and r["num_bytes"] == FILE_BYTES for r in rows)


def test_show_one_checkpoint(store_uri: str) -> None:
    checkpoint = open_store(store_uri).inspection.list_checkpoints()[0]
    code, out, _ = run("show", store_uri, checkpoint.checkpoint_id)
    assert code == EXIT_OK
    assert f"checkpoint:   {checkpoint.checkpoint_id}" in out
    assert "keys:         50" in out
    code, out, _ = run("show", store_uri, checkpoint.checkpoint_id, "--json")
    assert json.loads(out)["checkpoint_id"] == checkpoint.checkpoint_id


def test_show_unknown_and_malformed_ids_exit_2(store_uri: str) -> None:
    code, out, err = run("show", store_uri, "no-such-checkpoint")
    assert code == EXIT_ERROR and out == ""
    assert err.startswith("airflow-ckpt: error: no sealed checkpoint 'no-such-checkpoint'")
    assert err.count("\n") == 1
    code, _, err = run("show", store_uri, "../escape")
    assert code == EXIT_ERROR and "is not a checkpoint id" in err
    code, _, err = run("show", store_uri)
    assert code == EXIT_ERROR and "show takes URI ID" in err


def test_progress_table_and_json(store_uri: str) -> None:
    code, out, _ = run("progress", store_uri)
    assert code == EXIT_OK
    assert "partitions sealed: 3/4" in out
    assert "keys done:         150" in out
    assert "committed:         no" in out
    code, out, _ = run("progress", store_uri, "--json")
    data = json.loads(out)
    assert (data["keys_done"], data["files"], data["bytes"]) == (150, 3, 3 * FILE_BYTES)
    assert data["epoch"]["epoch"] == 1


def test_epochs(store_uri: str) -> None:
    code, out, _ = run("epochs", store_uri, "--json")
    epochs = json.loads(out)
    assert code == EXIT_OK
    assert [(e["epoch"], e["status"], e["expected_partitions"]) for e in epochs] == [(1, "open", 4)]


def test_keys_limit_and_all(store_uri: str) -> None:
    code, out, err = run("keys", store_uri, "--limit", "7")
    assert code == EXIT_OK
    assert len(out.splitlines()) == 7
    assert "(7 of 150 keys shown" in err
    code, out, _ = run("keys", store_uri, "--limit", "0", "--json")
    data = json.loads(out)
    expected = {f"key-{p}-{i}" for p in range(3) for i in range(50)}
    assert set(data["keys"]) == expected and data["total"] == 150
    code, _, err = run("keys", store_uri, "--limit", "-1")
    assert code == EXIT_ERROR and "--limit" in err


def test_commit_deletes_orphans_and_reports(tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    out_dir = tmp_path / "out"
    store = fill_store(uri, out_dir.as_uri(), partitions=2)
    orphan = out_dir / "part-orphan.parquet"
    store.record_intent("orphan-attempt", [orphan.as_uri()], epoch=1)
    orphan.write_bytes(b"half")
    stray = out_dir / "stray.parquet"  # written by nobody this store knows: refuses the commit unless kept
    stray.write_bytes(b"?")
    store.epochs.end(1, status="succeeded")
    code, out, err = run("commit", uri, "--output-root", out_dir.as_uri())
    assert code != EXIT_OK and str(stray.as_uri()) in err and "--keep-unknown-files" in err, (code, out, err)
    assert orphan.exists() and not open_store(uri).inspection.progress().committed  # nothing changed
    code, out, err = run("commit", uri, "--output-root", out_dir.as_uri(), "--keep-unknown-files")
    assert (code, err) == (EXIT_OK, "")
    assert re.search(r"^checkpoints_committed: +2$", out, re.M), out
    assert re.search(r"^orphans_deleted: +1$", out, re.M), out
    assert re.search(r"^refused_records: +0$", out, re.M), out  # nothing outside the declared root
    assert str(stray.as_uri()) in out
    assert not orphan.exists() and stray.exists()
    assert open_store(uri).inspection.progress().committed


def test_clear_requires_confirmation_without_terminal(store_uri: str) -> None:
    code, out, err = run("clear", store_uri)
    assert code == EXIT_ERROR
    assert "Clear file://" in out and "delete all 3 checkpoint(s)" in out
    assert "pass --yes" in err
    assert len(open_store(store_uri).inspection.list_checkpoints()) == 3  # nothing deleted


def test_clear_declined_on_terminal_keeps_everything(store_uri: str) -> None:
    code, _, err = run("clear", store_uri, stdin=Terminal("no\n"))
    assert code == EXIT_FINDINGS and "nothing deleted" in err
    assert len(open_store(store_uri).inspection.list_checkpoints()) == 3


def test_clear_confirmed_on_terminal(store_uri: str, tmp_path: Path) -> None:
    output = (tmp_path / "out").as_uri()
    code, out, _ = run("clear", store_uri, "--output-root", output, stdin=Terminal("yes\n"))
    assert code == EXIT_OK
    assert "checkpoints deleted: 3" in out and "files deleted:       3" in out
    store = open_store(store_uri)
    assert store.inspection.list_checkpoints() == [] and store.inspection.progress().keys_done == 0
    assert list((tmp_path / "out").iterdir()) == []  # the uncommitted output went with them


def test_without_an_output_root_clear_keeps_output_files_and_lists_them(store_uri: str, tmp_path: Path) -> None:
    # The store's records declare its output root, but nobody vouches for it: a URI alone is not the DAG
    # (docs/security.md, "The trust model"), so the records are reset and every output file stays.
    files = sorted(p.as_uri() for p in (tmp_path / "out").iterdir())
    assert len(files) == 3
    code, out, _ = run("clear", store_uri, "--yes")
    assert code == EXIT_OK, out
    assert "checkpoints deleted: 3" in out and "files deleted:       0" in out
    assert "No output root is declared (--output-root: none): no output file is deleted" in out
    assert "output files kept: no output root is declared (pass --output-root DIR" in out
    assert all(f"  {f}\n" in out for f in files), out
    assert sorted(p.as_uri() for p in (tmp_path / "out").iterdir()) == files
    assert open_store(store_uri).inspection.progress().keys_done == 0


def test_clear_yes_json(store_uri: str) -> None:
    code, out, _ = run("clear", store_uri, "--yes", "--json")
    data = json.loads(out)
    assert code == EXIT_OK
    assert data["preview"]["checkpoints"] == 3 and data["preview"]["keys"] == 150
    assert len(data["result"]["deleted_checkpoints"]) == 3


def test_discard_keeps_committed(tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    store = fill_store(uri, (tmp_path / "out").as_uri(), partitions=2)
    store.epochs.end(1, status="succeeded")
    store.commit()
    later = open_store(uri)
    epoch = later.epochs.begin(owner="second")
    fill = later.inspection.list_checkpoints()
    assert all(c.status.value == "committed" for c in fill)
    # A second submit seals one more checkpoint that is never committed.
    from airflow_ckpt_provider.store import FileMetadata, new_checkpoint_id

    cid = new_checkpoint_id()
    later.stage_keys(cid, ["late-1", "late-2"])
    later.stage_files(cid, [FileMetadata((tmp_path / "out" / "late.parquet").as_uri(), 10, 2)])
    later.checkpoint(cid, epoch=epoch.number, partition=5)
    code, out, _ = run("discard", uri, "--yes")
    assert code == EXIT_OK
    assert "delete 1 uncommitted checkpoint(s)" in out and "2 committed checkpoint(s) are kept" in out
    assert "checkpoints deleted: 1" in out
    remaining = open_store(uri).inspection.list_checkpoints()
    assert len(remaining) == 2 and all(c.status.value == "committed" for c in remaining)


def test_check_reports_problems_with_exit_1(store_uri: str, tmp_path: Path) -> None:
    code, out, _ = run("check", store_uri)
    assert code == EXIT_OK and out.rstrip().endswith("consistent")
    (tmp_path / "out" / "part-00001.parquet").unlink()  # a valid checkpoint's output vanished
    code, out, _ = run("check", store_uri)
    assert code == EXIT_FINDINGS
    assert "missing output file" in out and "part-00001.parquet" in out
    code, out, _ = run("check", store_uri, "--json")
    assert code == EXIT_FINDINGS and json.loads(out)["ok"] is False


def test_corrupt_manifest_is_one_line_exit_2_and_nothing_deleted(store_uri: str, tmp_path: Path) -> None:
    victim = sorted((tmp_path / "store" / "checkpoints").iterdir())[0]
    (victim / "manifest.json").write_text("{not json")
    for command in ("list", "progress"):
        code, _, err = run(command, store_uri)
        assert code == EXIT_ERROR, command
        assert err.startswith("airflow-ckpt: error: ") and err.count("\n") == 1
        assert "Traceback" not in err
    assert len(list((tmp_path / "store" / "checkpoints").iterdir())) == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["list", "relative/dir"], "relative paths are ambiguous"),
        (["list", "gs://bucket/prefix"], "scheme 'gs' is not supported"),
        (["list", "file://otherhost/dir"], "file URIs must be local"),
        (["list", "s3:///no-bucket"], "names no bucket"),
        (["progress"], "no store given"),
        (["progress", "/tmp/x", "--dag-id", "d", "--task-id", "t", "--run-id", "r"], "not both"),
        (["progress", "--dag-id", "d", "--task-id", "t"], "missing --run-id"),
    ],
)
def test_bad_store_arguments_exit_2(argv: list[str], message: str) -> None:
    code, out, err = run(*argv)
    assert code == EXIT_ERROR and out == ""
    assert message in err and err.count("\n") == 1


def test_usage_errors_exit_2_and_help_exits_0() -> None:
    code, _, _ = run("frobnicate")
    assert code == 2
    code, _, _ = run("--help")
    assert code == 0


def test_empty_store_is_not_an_error(tmp_path: Path) -> None:
    uri = (tmp_path / "never-used").as_uri()
    code, out, _ = run("progress", uri)
    assert code == EXIT_OK and "epoch:             -" in out
    code, out, _ = run("clear", uri)
    assert code == EXIT_OK and "Nothing to clear" in out
    assert not (tmp_path / "never-used").exists() or not any((tmp_path / "never-used").iterdir())
