"""``airflow-ckpt reprocess | rewind | undo | purge | resume | reprocesses`` on real local stores,
through ``main()`` in this process: the preview comes first, confirmation, exit codes, JSON."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from airflow_ckpt_provider import failpoints
from airflow_ckpt_provider.cli.main import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, main
from airflow_ckpt_provider.store import EpochStatus, RetentionPolicy, open_blobs, open_store
from tests.cli.sample_store import FILE_BYTES, fill_store


class Terminal(io.StringIO):
    """A stdin that says it is a terminal, with the answer a person would type."""

    def isatty(self) -> bool:
        return True


def run(*argv: str, stdin: io.StringIO | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err, stdin=stdin or io.StringIO(""))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def _no_failpoints() -> None:
    failpoints.disable_all()


@pytest.fixture
def committed(tmp_path: Path) -> tuple[str, str]:
    """A store with one committed run (3 checkpoints of 50 keys, one file each), retain policy."""
    uri, out = (tmp_path / "store").as_uri(), (tmp_path / "out").as_uri()
    store = fill_store(uri, out)
    epoch = store.epochs.current()
    assert epoch is not None
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    store.commit([out])
    store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    return uri, out


def _outputs(out: str) -> set[str]:
    return {i.key for i in open_blobs(out).list("")}


def test_dry_run_shows_the_exact_files_and_changes_nothing(committed: tuple[str, str]) -> None:
    uri, out = committed
    before = _outputs(out)
    code, text, err = run("reprocess", uri, "--output-root", out, "--key", "key-1-7", "--key", "key-2-0", "--dry-run")
    assert (code, err) == (EXIT_OK, "")
    assert "2 checkpoint(s) (2 committed) become pending, 100 key(s)" in text
    assert f"{out}/part-00001.parquet" in text and f"{out}/part-00002.parquet" in text
    assert f"{out}/part-00000.parquet" not in text
    assert _outputs(out) == before
    code, text, _ = run("reprocess", uri, "--output-root", out, "--key", "key-1-7", "--dry-run", "--json")
    preview = json.loads(text)["preview"]
    assert preview["keys"] == 50 and preview["bytes"] == FILE_BYTES and preview["file_count"] == 1


def test_confirmation_on_a_terminal_then_undo_then_purge(committed: tuple[str, str]) -> None:
    uri, out = committed
    code, _, err = run("reprocess", uri, "--output-root", out, "--key", "key-0-3", stdin=Terminal("no\n"))
    assert code == EXIT_FINDINGS and "nothing changed" in err
    assert _outputs(out) == {"part-00000.parquet", "part-00001.parquet", "part-00002.parquet"}

    code, text, _ = run("reprocess", uri, "--output-root", out, "--key", "key-0-3", stdin=Terminal("yes\n"))
    assert code == EXIT_OK and "files moved to quarantine: 1" in text
    assert _outputs(out) == {"part-00001.parquet", "part-00002.parquet"}
    assert open_store(uri).inspection.progress().keys_done == 100

    code, text, _ = run("reprocesses", uri, "--output-root", out)
    assert code == EXIT_OK and "reprocess" in text and "in quarantine" in text and "key-0-3" in text

    code, text, _ = run("undo", uri, "--output-root", out, "--yes")
    assert code == EXIT_OK and "files restored:" in text
    assert _outputs(out) == {"part-00000.parquet", "part-00001.parquet", "part-00002.parquet"}
    assert open_store(uri).inspection.progress().keys_done == 150

    code, text, _ = run("purge", uri, "--output-root", out, "--yes", "--json")
    assert code == EXIT_OK and json.loads(text)["result"]["purged"] == 1
    assert open_store(uri).inspection.check().ok


def test_without_a_terminal_yes_is_required(committed: tuple[str, str]) -> None:
    uri, out = committed
    code, text, err = run("rewind", uri, "--output-root", out, "--to-commit", "0")
    assert code == EXIT_ERROR and "--yes" in err
    assert "Rewind" in text and "3 checkpoint(s)" in text  # the preview was shown before refusing
    assert len(_outputs(out)) == 3
    code, _, _ = run("rewind", uri, "--output-root", out, "--to-commit", "0", "--yes")
    assert code == EXIT_OK and _outputs(out) == set()
    assert open_store(uri).inspection.progress().keys_done == 0


def test_bad_input_exits_2_with_one_line(committed: tuple[str, str]) -> None:
    uri, out = committed
    for argv, message in (
        (("reprocess", uri), "selection is empty"),
        (("reprocess", uri, "--key", "nope"), "not done"),
        (("reprocess", uri, "--epoch", "9"), "no epoch 9"),
        (("rewind", uri, "--to-commit", "5"), "no finished commit 5"),
        (("undo", uri), "no reprocess"),
        (("reprocess", uri, "--sealed-after", "2024-01-01"), "time zone"),
        (("reprocess", uri, "--keys-file", "/nonexistent/keys.txt"), "cannot read --keys-file"),
    ):
        code, text, err = run(*argv, "--yes")
        assert code == EXIT_ERROR, (argv, text, err)
        assert message in err and err.count("\n") == 1, (argv, err)
    assert len(_outputs(out)) == 3


def test_keys_file_and_json_keys(committed: tuple[str, str], tmp_path: Path) -> None:
    uri, _ = committed
    keys = tmp_path / "keys.txt"
    keys.write_text('"key-2-1"\n"key-2-9"\n')
    code, text, _ = run("reprocess", uri, "--keys-file", str(keys), "--json-keys", "--dry-run", "--json")
    assert code == EXIT_OK and json.loads(text)["preview"]["keys"] == 50


def test_resume_without_an_output_root_names_the_missing_root_and_never_suggests_abandoning(
    committed: tuple[str, str],
) -> None:
    """A legitimate reprocess interrupted, then `airflow-ckpt resume URI` without ``--output-root``.
    The files cannot be checked against any root because none was given in this call: the one-line error
    (exit 2) says so and names ``--output-root`` and ``--dag-id``, never that the action is forged or that
    abandoning it is the way out. Nothing was changed: given the root, the resume finishes it."""
    uri, out = committed
    failpoints.enable("store.reprocess.after_epoch", kind="raise")
    with pytest.raises(failpoints.InjectedFault):
        run("reprocess", uri, "--output-root", out, "--commit", "1", "--yes")
    failpoints.disable_all()
    before = _outputs(out)
    for extra in ((), ("--yes",), ("--dry-run",)):
        code, text, err = run("resume", uri, *extra)
        assert code == EXIT_ERROR and text == "" and err.count("\n") == 1, (code, text, err)
        assert "no output root was given" in err and "--output-root" in err and "--dag-id" in err, err
        assert "abandon" not in err and "not made by this store's DAG" not in err, err
    assert _outputs(out) == before
    code, text, _ = run("resume", uri, "--output-root", out, "--yes")
    assert code == EXIT_OK and "(resumed)" in text


def test_resume_finishes_an_interrupted_reprocess(committed: tuple[str, str]) -> None:
    uri, out = committed
    failpoints.enable("store.reprocess.after_epoch", kind="raise")
    with pytest.raises(failpoints.InjectedFault):
        run("reprocess", uri, "--output-root", out, "--commit", "1", "--yes")
    failpoints.disable_all()
    code, text, _ = run("check", uri, "--output-root", out)
    assert code == EXIT_FINDINGS and "airflow-ckpt resume" in text
    code, text, err = run("reprocess", uri, "--output-root", out, "--key", "key-0-0", "--yes")
    assert code == EXIT_ERROR and "unfinished" in err
    code, text, err = run("resume", uri, "--output-root", out)
    assert code == EXIT_ERROR and "--yes" in err, "a resume is confirmed like the action it finishes"
    code, text, _ = run("resume", uri, "--output-root", out, "--yes")
    assert code == EXIT_OK and "(resumed)" in text and "files moved to quarantine: 3" in text
    assert _outputs(out) == set() and run("check", uri, "--output-root", out)[0] == EXIT_OK
    code, text, _ = run("resume", uri, "--output-root", out)
    assert code == EXIT_OK and "Nothing to resume" in text
