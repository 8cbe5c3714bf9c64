"""The structured epoch owner (store/owner.py) on real local stores: keys, parsing, siblings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow_ckpt_provider.store import open_store
from airflow_ckpt_provider.store.errors import EpochConflictError
from airflow_ckpt_provider.store.owner import OWNER_METADATA_KEY, EpochOwner
from tests.support.errors import raises_reason


def _begin(uri: str, owner: EpochOwner, **kwargs: Any) -> int:
    metadata = {"dag_id": owner.dag_id, "task_id": owner.task_id, "run_id": owner.run_id}
    return (
        open_store(uri)
        .epochs.begin(owner=owner.key(), metadata={**metadata, OWNER_METADATA_KEY: owner.to_json()}, **kwargs)
        .number
    )


def test_keys_keep_the_0_1_owner_for_unmapped_tasks_and_tell_map_indexes_apart() -> None:
    assert EpochOwner("d", "t", "r").key() == "d/t/r"  # what 0.1 recorded: its retries still match
    keys = {EpochOwner("d", "t", "r", i).key() for i in (-1, 0, 1, 2)}
    assert len(keys) == 4


def test_from_epoch_reads_the_record_only_and_never_raises(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "s"))
    owner = EpochOwner("dag", "task", "run", 3)
    _begin(store.uri, owner)
    latest = store.epochs.current()
    assert latest is not None and EpochOwner.from_epoch(latest) == owner

    # the dag/task/run fields alone, without the structured record (no release wrote such an epoch): no owner
    bare = store.epochs.begin(
        owner="dag/task/run", metadata={"dag_id": "dag", "task_id": "task", "run_id": "run"}, takeover=True
    )
    assert EpochOwner.from_epoch(bare) is None
    for metadata in (
        {OWNER_METADATA_KEY: {"dag_id": "d", "task_id": 5, "run_id": "r"}},
        {OWNER_METADATA_KEY: {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": "1"}},
        {OWNER_METADATA_KEY: {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": True}},
        {OWNER_METADATA_KEY: "d/t/r"},
        {OWNER_METADATA_KEY: None},
        {"action": "clear"},
    ):
        epoch = store.epochs.begin(owner="clear", metadata=metadata, takeover=True)
        assert EpochOwner.from_epoch(epoch) is None, metadata


def test_another_instance_is_fenced_the_same_instance_takes_over(tmp_path: Path) -> None:
    uri = str(tmp_path / "shared")
    first, sibling = EpochOwner("d", "t", "r", 0), EpochOwner("d", "t", "r", 1)
    assert _begin(uri, first) == 1
    with raises_reason(EpochConflictError, "epoch_open", match="still open"):
        _begin(uri, sibling)
    assert _begin(uri, first) == 2  # its retry takes over its own open epoch
    assert first.sibling_of(sibling) and not first.sibling_of(first) and not first.sibling_of(None)
    assert not first.sibling_of(EpochOwner("d", "t", "other_run", 1))


def test_takeover_epoch_takes_over_only_the_epoch_judged_dead(tmp_path: Path) -> None:
    """``takeover_epoch=N`` (a submit found N's task instance ended, operators/takeover.py) supersedes N
    only while N is the latest epoch: an owner that came back and opened another one meanwhile wins."""
    uri = str(tmp_path / "s")
    killed, next_run, late = (EpochOwner("d", "t", run) for run in ("r1", "r2", "r3"))
    assert _begin(uri, killed) == 1
    with raises_reason(EpochConflictError, "epoch_open", match="still open"):
        _begin(uri, next_run, takeover_epoch=2)  # not the open epoch
    assert _begin(uri, next_run, takeover_epoch=1) == 2
    epochs = open_store(uri).epochs.all()
    assert [(e.number, e.status.value) for e in epochs] == [(1, "failed"), (2, "open")]
    with raises_reason(EpochConflictError, "epoch_open", match="still open"):
        _begin(uri, late, takeover_epoch=1)  # judged epoch 1, but epoch 2 is open now: never superseded
    assert [e.number for e in open_store(uri).epochs.all()] == [1, 2]
