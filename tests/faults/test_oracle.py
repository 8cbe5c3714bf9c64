"""The campaign's oracle has teeth: it passes a correct run and names each kind of broken output.

Runs through the store API alone (no Spark), so it is fast and pins down what a
"violation" is before the campaign relies on it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from airflow_ckpt_provider.store import CheckpointStore, RetentionPolicy, open_store
from ckpt_testkit.faults.oracle import audit_after_commit, reprocessed_violations, sealed_keys
from ckpt_testkit.faults.store_api_job import run_job, write_task
from ckpt_testkit.faults.workload import OutputLocation, key_of_row

pytestmark = pytest.mark.faults


@pytest.fixture
def committed(tmp_path: Path, fault_inputs: list[str]) -> tuple[CheckpointStore, OutputLocation, Path]:
    """A run whose first attempt left an orphan (unsealed task), resumed, committed with retain."""
    store = open_store(f"file://{tmp_path / 'store'}")
    out = tmp_path / "out"
    out.mkdir()
    first = store.epochs.begin(owner="job", output_roots=[f"file://{out}"]).number
    write_task(store, f"file://{out}", fault_inputs[0], epoch=first, partition=0, seal=False)  # a crashed task
    run_job(store, f"file://{out}", fault_inputs, owner="job")
    store.commit([f"file://{out}"])
    store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    return store, OutputLocation(f"file://{out}", {}), out


def _audit(store: CheckpointStore, output: OutputLocation, inputs: list[str]) -> list[str]:
    return audit_after_commit(
        store, output, inputs, mode="files", policy=RetentionPolicy.RETAIN, store_faults=False
    ).violations


def test_a_correct_run_has_no_violation(
    committed: tuple[CheckpointStore, OutputLocation, Path], fault_inputs: list[str]
) -> None:
    store, output, _ = committed
    assert len(output.files()) == len(fault_inputs)  # the crashed task's file was deleted by the commit
    assert _audit(store, output, fault_inputs) == []


def test_a_duplicated_file_is_caught(
    committed: tuple[CheckpointStore, OutputLocation, Path], fault_inputs: list[str]
) -> None:
    store, output, out = committed
    first = sorted(out.iterdir())[0]
    shutil.copy(first, out / "copy.parquet")
    found = " | ".join(_audit(store, output, fault_inputs))
    assert "more than once" in found and "orphans left" in found


def test_a_deleted_committed_file_is_caught(
    committed: tuple[CheckpointStore, OutputLocation, Path], fault_inputs: list[str]
) -> None:
    store, output, out = committed
    sorted(out.iterdir())[0].unlink()
    found = " | ".join(_audit(store, output, fault_inputs))
    assert "committed files were deleted" in found and "missing from the output" in found


def test_a_corrupt_snapshot_is_caught(
    committed: tuple[CheckpointStore, OutputLocation, Path], fault_inputs: list[str], tmp_path: Path
) -> None:
    store, output, _ = committed
    snapshot = next((tmp_path / "store" / "snapshots").iterdir())
    (snapshot / "manifest.json").write_text("{not json")
    found = " | ".join(_audit(store, output, fault_inputs))
    assert "store.inspection.check(): corrupt store record" in found
    assert "done keys cannot be read" in found


def test_the_rerun_oracle_names_a_sealed_key_processed_again(
    committed: tuple[CheckpointStore, OutputLocation, Path], fault_inputs: list[str], tmp_path: Path
) -> None:
    """A run that sends a row of a key sealed before it started through the user's code is a violation; rows
    of keys that were not sealed, and a last line cut short by a killed worker, are not."""
    store, _, _ = committed
    sealed = sealed_keys(store)
    assert sealed is not None and len(sealed) == len(fault_inputs)  # retain: every file key is done
    rows_by_file = {key: sorted(r for r, k in key_of_row(fault_inputs, "files").items() if k == key) for key in sealed}
    first, second = sorted(sealed)[:2]
    log = tmp_path / "keys"
    log.mkdir()
    # Task 1 held rows of the first file only; task 2 was killed while writing its first row id.
    (log / "t1.rows").write_text("".join(f"{r}\n" for r in rows_by_file[first]))
    (log / "t2.rows").write_text(str(rows_by_file[second][0])[:-1])
    processed, clean = reprocessed_violations(log, sealed - {first}, fault_inputs, "files")
    assert (processed, clean) == (1, [])
    processed, found = reprocessed_violations(log, sealed, fault_inputs, "files")
    assert processed == 1
    assert len(found) == 1 and "1 keys sealed before the run started were processed again" in found[0]
    assert first in found[0]
