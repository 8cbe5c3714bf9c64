"""What a store's own records may declare is bounded: by the store's scheme and bucket, and by the
roots the DAG declares when the store is opened with them (docs/security.md, "The trust model").

The attacker writes the store's S3 prefix (as every Spark executor of the job can): an epoch
record declaring ``file:///`` on the deleting host and a root in another bucket, a checkpoint
whose files are there, a forged retraction. Reprocess, undo, clear, discard, commit and
retention run against it on the real SeaweedFS server: nothing on the host or in the other
bucket changes, and ``check()`` names the refused records.
"""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.cli.main import EXIT_ERROR, EXIT_OK, main
from airflow_ckpt_provider.store import (
    CheckpointStore,
    Epoch,
    EpochStatus,
    FileMetadata,
    RetentionPolicy,
    Selection,
    new_checkpoint_id,
    open_blobs,
    open_store,
)
from airflow_ckpt_provider.store.errors import CheckpointError, InvalidArgumentError
from airflow_ckpt_provider.store.reprocess.planner import quarantine_key
from airflow_ckpt_provider.store.reprocess.records import record_key
from ckpt_testkit.seaweed import SeaweedServer
from tests.support.errors import raises_reason

pytestmark = pytest.mark.s3


@dataclass
class Forged:
    store_uri: str
    options: dict[str, Any]
    host_file: Path
    other_uri: str
    own_output: str

    def store(self, **extra: Any) -> CheckpointStore:
        return open_store(self.store_uri, **(self.options | extra))

    def untouched(self) -> None:
        assert self.host_file.read_text() == "db_password = s3cr3t", "the host file must not change"
        root, _, name = self.other_uri.rpartition("/")
        assert open_blobs(root, **self.options).get(name)[0] == b"the other team's data"


@pytest.fixture
def forged(s3_server: SeaweedServer, s3_options: dict[str, Any], s3_bucket: str, tmp_path: Path) -> Forged:
    """An S3 store whose records declare ``file:///<host dir>`` and a root in another bucket, with
    one committed-looking checkpoint whose files are the host file and the other bucket's object."""
    host_dir = tmp_path / "host_dir"
    host_dir.mkdir()
    host_file = host_dir / "airflow-secrets.cfg"
    host_file.write_text("db_password = s3cr3t")
    other_bucket = s3_server.create_bucket(f"o-{uuid.uuid4().hex[:20]}")
    other_uri = f"s3://{other_bucket}/loot/data.parquet"
    open_blobs(f"s3://{other_bucket}/loot", **s3_options).put("data.parquet", b"the other team's data")
    store_uri = f"s3://{s3_bucket}/stores/a_evil"
    store = open_store(store_uri, **s3_options)
    # As the bucket's writer: the epoch record is written raw (begin_epoch refuses these roots).
    epoch = Epoch(
        number=1,
        owner="dag_a/s3_evil/R",
        created_at="2026-01-01T00:00:00Z",
        base=(),
        base_snapshot=None,
        expected_partitions=1,
        metadata={},
        output_roots=(host_dir.as_uri(), f"s3://{other_bucket}/loot"),
    )
    store.blobs.put("epochs/00000001.json", json.dumps(epoch.to_json()).encode())
    checkpoint_id = new_checkpoint_id()
    paths = [host_file.as_uri(), other_uri]
    store.record_intent(checkpoint_id, paths, epoch=1)
    store.stage_keys(checkpoint_id, ["k1"])
    store.stage_files(
        checkpoint_id,
        [
            FileMetadata(path=host_file.as_uri(), size_bytes=20, num_rows=1),
            FileMetadata(path=other_uri, size_bytes=21, num_rows=1),
        ],
    )
    store.checkpoint(checkpoint_id, epoch=1, partition=0)
    store.epochs.end(1, status=EpochStatus.SUCCEEDED)
    return Forged(store_uri, dict(s3_options), host_file, other_uri, f"s3://{s3_bucket}/out")


def test_begin_epoch_and_the_driver_refuse_roots_of_another_scheme_or_bucket(
    s3_options: dict[str, Any], s3_bucket: str, tmp_path: Path
) -> None:
    store = open_store(f"s3://{s3_bucket}/stores/s", **s3_options)
    for root in (tmp_path.as_uri(), "s3://another-bucket/out"):
        with raises_reason(InvalidArgumentError, "output_root", match="store"):
            store.epochs.begin(owner="o", output_roots=[root])
    epoch = store.epochs.begin(owner="o", output_roots=[f"s3://{s3_bucket}/out"]).number
    with raises_reason(InvalidArgumentError, "output_root", match="not a s3:// location"):
        store.epochs.declare_output_root(epoch, (tmp_path / "x").as_uri())
    # The DAG vouches for a root elsewhere: the store is opened with it, and then it may be declared.
    trusted = open_store(f"s3://{s3_bucket}/stores/t", trusted_output_roots=[tmp_path.as_uri()], **s3_options)
    opened = trusted.epochs.begin(owner="o", output_roots=[(tmp_path / "out").as_uri()]).number
    assert trusted.epochs.declare_output_root(opened, (tmp_path / "out" / "part").as_uri())


@pytest.mark.parametrize("trusted", [None, "own"], ids=["no-dag-roots", "dag-roots"])
def test_clear_discard_commit_retention_keep_what_forged_roots_name(forged: Forged, trusted: str | None) -> None:
    store = forged.store(**({} if trusted is None else {"trusted_output_roots": [forged.own_output]}))
    assert store.deletion_guard().roots == ()
    report = store.inspection.check(verify_output=False)
    assert sum("refused output root record" in p for p in report.problems) == 2, report.problems
    for action in (
        store.housekeeping.discard_uncommitted,
        lambda: store.commit(),
        lambda: store.housekeeping.cleanup(RetentionPolicy.DELETE_AFTER_SUCCESS),
        store.housekeeping.clear,
    ):
        with contextlib.suppress(CheckpointError):
            action()
        forged.untouched()


def test_reprocess_never_moves_a_file_the_store_does_not_own(forged: Forged) -> None:
    store = forged.store(trusted_output_roots=[forged.own_output])
    with pytest.raises(CheckpointError):
        plan = store.reprocessing.preview(Selection(epochs=[1]))
        store.reprocessing.run(Selection(epochs=[1]), expected=plan)
    forged.untouched()
    assert not list(store.blobs.list("quarantine/")), "nothing of the host may reach the bucket"


def _legit_reprocess(forged: Forged) -> tuple[CheckpointStore, int, str]:
    """A store of the DAG's own output on S3, one committed file, reprocessed (the file in quarantine)."""
    store = open_store(forged.store_uri + "-own", **forged.options)
    epoch = store.epochs.begin(owner="dag_a/t/R", output_roots=[forged.own_output]).number
    checkpoint_id = new_checkpoint_id()
    path = f"{forged.own_output}/part-0.parquet"
    store.record_intent(checkpoint_id, [path], epoch=epoch)
    open_blobs(forged.own_output, **forged.options).put("part-0.parquet", b"original rows")
    store.stage_keys(checkpoint_id, ["k"])
    store.stage_files(checkpoint_id, [FileMetadata(path=path, size_bytes=13, num_rows=1)])
    store.checkpoint(checkpoint_id, epoch=epoch, partition=0)
    store.epochs.end(epoch, status=EpochStatus.SUCCEEDED)
    store.commit()
    result = store.reprocessing.run(
        Selection(epochs=[epoch]), expected=store.reprocessing.preview(Selection(epochs=[epoch]))
    )
    assert result.epoch is not None
    return store, result.epoch, path


def test_undo_never_overwrites_and_never_creates_outside_the_retraction(forged: Forged) -> None:
    store, number, path = _legit_reprocess(forged)
    # Create: a forged retraction entry for a host path, its bytes planted in the quarantine.
    planted = forged.host_file.parent / "dags" / "evil_dag.py"
    record = store.context.read_json(record_key(number))
    key = quarantine_key(number, planted.as_uri())
    store.blobs.put(key, b"import os  # attacker")
    record["files"].append(
        {"path": planted.as_uri(), "size_bytes": 21, "num_rows": 0, "checkpoint_id": "x", "quarantine": key}
        | {"outcome": "moved"}
    )
    store.blobs.put(record_key(number), json.dumps(record).encode())
    with pytest.raises(CheckpointError):
        store.reprocessing.undo(number)
    assert not planted.exists() and not planted.parent.exists(), "undo must not create files on the host"
    # Overwrite: the record is honest again, but the DAG wrote a new file where the old one was.
    record["files"].pop()
    store.blobs.put(record_key(number), json.dumps(record).encode())
    open_blobs(forged.own_output, **forged.options).put("part-0.parquet", b"newer rows written since")
    result = store.reprocessing.undo(number)
    assert open_blobs(forged.own_output, **forged.options).get("part-0.parquet")[0] == b"newer rows written since"
    assert path in result.missing and path not in result.restored


@pytest.mark.parametrize(
    "argv",
    [
        ["discard", "--yes"],
        ["commit"],
        ["reprocess", "--epoch", "1", "--yes"],
        ["clear", "--yes"],
        ["clear", "--yes", "--output-root", "s3://{bucket}/out"],
    ],
    ids=["discard", "commit", "reprocess", "clear", "clear-with-output-root"],
)
def test_the_cli_touches_nothing_forged_roots_name(
    forged: Forged, argv: list[str], s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", forged.options["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", forged.options["aws_secret_access_key"])
    flags = ["--endpoint-url", forged.options["endpoint_url"], "--region", forged.options["region_name"]]
    out, err = io.StringIO(), io.StringIO()
    command = [a.format(bucket=s3_bucket) for a in argv]
    code = main([command[0], forged.store_uri, *command[1:], *flags], out=out, err=err, stdin=io.StringIO(""))
    assert code in (EXIT_OK, EXIT_ERROR), err.getvalue()
    assert "Traceback" not in err.getvalue()
    forged.untouched()


@pytest.mark.parametrize("key", ["[" * 100_000 + "]" * 100_000, "1" * 5000, str(10**30)], ids=["deep", "digits", "big"])
def test_the_cli_refuses_unusable_json_keys_in_one_line(key: str, tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    store = (tmp_path / "store").as_uri()
    code = main(["reprocess", store, "--json-keys", "--key", key, "--yes"], out=out, err=err, stdin=io.StringIO(""))
    assert code == EXIT_ERROR, err.getvalue()
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("airflow-ckpt: error:") and len(lines[0]) < 400, lines


def _forged_maintenance(forged: Forged, *, outside: bool) -> tuple[CheckpointStore, str]:
    """A committed file under the DAG's root and a forged, unfinished delete-mode reprocess of it (as the
    bucket's writer could write it: the epoch record alone), naming the host file too if ``outside``."""
    store = open_store(forged.store_uri + f"-m{uuid.uuid4().hex[:6]}", **forged.options)
    epoch = store.epochs.begin(owner="dag_a/t/R", output_roots=[forged.own_output]).number
    checkpoint_id = new_checkpoint_id()
    name = f"part-{uuid.uuid4().hex[:8]}.parquet"
    path = f"{forged.own_output}/{name}"
    store.record_intent(checkpoint_id, [path], epoch=epoch)
    open_blobs(forged.own_output, **forged.options).put(name, b"committed rows")
    store.stage_keys(checkpoint_id, ["k"])
    store.stage_files(checkpoint_id, [FileMetadata(path=path, size_bytes=14, num_rows=1)])
    store.checkpoint(checkpoint_id, epoch=epoch, partition=0)
    store.epochs.end(epoch, status=EpochStatus.SUCCEEDED)
    store.commit()
    plan = store.reprocessing.preview(Selection(epochs=[epoch]), delete=True)
    data = plan.to_json()
    if outside:
        data["files"].append(dict(data["files"][0], path=forged.host_file.as_uri()))
    epoch_record = Epoch(
        number=plan.new_epoch or 0,
        owner="reprocess:attacker",
        created_at="2026-01-01T00:00:00Z",
        base=plan.new_base,
        base_snapshot=plan.snapshot_from,
        expected_partitions=None,
        metadata={"action": "reprocess", "maintenance": True},
    ).to_json() | {"maintenance": data}
    store.blobs.put(f"epochs/{plan.new_epoch:08d}.json", json.dumps(epoch_record).encode())
    return store, name


@pytest.mark.parametrize("outside", [False, True], ids=["in-roots", "outside-roots"])
def test_a_forged_maintenance_epoch_is_not_run_without_its_preview_and_can_be_abandoned(
    forged: Forged, outside: bool
) -> None:
    store, name = _forged_maintenance(forged, outside=outside)
    output = open_blobs(forged.own_output, **forged.options)
    plan = store.reprocessing.preview_resume()
    assert plan is not None and plan.action == "reprocess" and len(plan.files) == (2 if outside else 1)
    assert bool(plan.refused_paths) == outside
    with pytest.raises(CheckpointError):
        store.reprocessing.resume(expected="0" * 64)  # not what a person saw
    if outside:
        with pytest.raises(CheckpointError, match="outside the output roots"):
            store.reprocessing.resume(expected=plan)
    assert output.get(name)[0] == b"committed rows"
    forged.untouched()
    with pytest.raises(CheckpointError):
        store.epochs.begin(owner="dag_a/t/R2")  # the unfinished intent blocks the DAG...
    abandoned = store.reprocessing.abandon(expected=plan, requested_by="editor")
    assert abandoned.new_epoch == plan.new_epoch
    assert store.reprocessing.preview_resume() is None
    store.epochs.begin(owner="dag_a/t/R2", output_roots=[forged.own_output])  # ...until it is abandoned
    assert output.get(name)[0] == b"committed rows"
    forged.untouched()
