"""``store.inspection.check()`` finds dangling parts, duplicate partitions, missing files and bad manifests.

Each test damages a store written through the store API (no Spark) in one way
and asserts that ``check()`` names it. The last three were gaps the campaign found
in ``check()`` (committed files after retention, a corrupt epoch record, a base
removed by retention on purpose); fixed in the store.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_ckpt_provider.store import CheckpointStore, EpochStatus, RetentionPolicy, new_checkpoint_id, open_store
from ckpt_testkit.faults.store_api_job import run_job, write_task

pytestmark = pytest.mark.faults


def _store(tmp_path: Path, inputs: list[str]) -> tuple[CheckpointStore, Path]:
    store = open_store(f"file://{tmp_path / 'store'}")
    out = tmp_path / "out"
    out.mkdir()
    run_job(store, f"file://{out}", inputs[:3])
    assert store.inspection.check().ok
    return store, out


def _checkpoint_dir(tmp_path: Path, store: CheckpointStore) -> Path:
    return tmp_path / "store" / "checkpoints" / store.inspection.valid_checkpoints()[0].checkpoint_id


def test_a_manifest_that_does_not_parse(tmp_path: Path, fault_inputs: list[str]) -> None:
    store, _ = _store(tmp_path, fault_inputs)
    (_checkpoint_dir(tmp_path, store) / "manifest.json").write_text('{"checkpoint_id": "trunc')
    report = store.inspection.check()
    assert any(p.startswith("corrupt manifest") for p in report.problems), report


def test_a_part_named_by_its_manifest_is_missing(tmp_path: Path, fault_inputs: list[str]) -> None:
    store, _ = _store(tmp_path, fault_inputs)
    (
        tmp_path / "store" / "attempts" / store.inspection.valid_checkpoints()[0].checkpoint_id / "keys" / "0000.arrow"
    ).unlink()
    report = store.inspection.check()
    assert any(p.startswith("missing part") for p in report.problems), report


def test_dangling_parts_of_an_unsealed_checkpoint(tmp_path: Path, fault_inputs: list[str]) -> None:
    store, out = _store(tmp_path, fault_inputs)
    epoch = store.epochs.current()
    assert epoch is not None
    write_task(store, f"file://{out}", fault_inputs[3], epoch=epoch.number, partition=3, seal=False)
    report = store.inspection.check()
    assert report.ok  # expected after a crash; the next commit removes it
    assert any(n.startswith("dangling (unsealed) checkpoint directory") for n in report.notes), report


def test_duplicate_attempts_of_one_partition(tmp_path: Path, fault_inputs: list[str]) -> None:
    store, _ = _store(tmp_path, fault_inputs)
    epoch = store.epochs.current()
    assert epoch is not None
    duplicate = new_checkpoint_id()
    store.stage_keys(duplicate, ["another key"])
    store.checkpoint(duplicate, epoch=epoch.number, partition=0)
    report = store.inspection.check()
    assert any(n.startswith("duplicate attempts of partition 0") for n in report.notes), report


def test_an_output_file_missing_from_disk(tmp_path: Path, fault_inputs: list[str]) -> None:
    store, out = _store(tmp_path, fault_inputs)
    sorted(out.iterdir())[0].unlink()
    report = store.inspection.check()
    assert any(p.startswith("missing output file") for p in report.problems), report


def test_a_committed_file_missing_after_retention_cleanup(tmp_path: Path, fault_inputs: list[str]) -> None:
    store, out = _store(tmp_path, fault_inputs)
    store.commit([f"file://{out}"])
    store.housekeeping.cleanup(RetentionPolicy.DELETE_AFTER_SUCCESS)
    sorted(out.iterdir())[0].unlink()
    assert not store.inspection.check().ok


def test_a_corrupt_epoch_record_is_reported_not_raised(tmp_path: Path, fault_inputs: list[str]) -> None:
    store, _ = _store(tmp_path, fault_inputs)
    (tmp_path / "store" / "epochs" / "00000001.json").write_text("{")
    assert not store.inspection.check().ok


def test_a_store_cleaned_after_a_resumed_run_is_consistent(tmp_path: Path, fault_inputs: list[str]) -> None:
    store, out = _store(tmp_path, fault_inputs)  # epoch 1 sealed 3 checkpoints ...
    run_job(store, f"file://{out}", fault_inputs)  # ... epoch 2 resumed from them (its base)
    store.commit([f"file://{out}"])
    store.housekeeping.cleanup(RetentionPolicy.DELETE_AFTER_SUCCESS)
    assert store.epochs.current() is not None and store.epochs.current().status is EpochStatus.COMMITTED  # type: ignore[union-attr]
    assert store.inspection.check().ok, store.inspection.check().problems
