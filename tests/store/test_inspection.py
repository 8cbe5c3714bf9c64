"""``store/inspection.py`` through the facade: what a store holds, read once, on both backends.

The CLI's and the UI's clear/discard previews count from ``contents()``; the layout stays the
store's own (docs/design.md, section 4.1).
"""

from __future__ import annotations

from airflow_ckpt_provider.store import FileMetadata, RetentionPolicy, new_checkpoint_id, open_blobs
from tests.store.conftest import Backend


def _seal(backend: Backend, store, epoch: int, partition: int, keys: list[str]) -> str:  # type: ignore[no-untyped-def]
    checkpoint_id = new_checkpoint_id()
    path = backend.write_output(f"part-{checkpoint_id}.parquet")
    store.record_intent(checkpoint_id, [path], epoch=epoch)
    store.stage_keys(checkpoint_id, keys)
    store.stage_files(checkpoint_id, [FileMetadata(path, 4, len(keys))])
    store.checkpoint(checkpoint_id, epoch=epoch, partition=partition)
    return checkpoint_id


def test_contents_of_an_empty_store(backend: Backend) -> None:
    contents = backend.store().inspection.contents()
    assert (contents.epoch, contents.checkpoints, contents.unsealed_ids, contents.snapshots) == (None, (), (), ())
    assert contents.keys_done == 0


def test_contents_counts_sealed_valid_unsealed_and_snapshots(backend: Backend) -> None:
    store = backend.store()
    epoch = store.epochs.begin(owner="t").number
    first = _seal(backend, store, epoch, 0, ["a", "b"])
    _seal(backend, store, epoch, 0, ["a", "b"])  # a duplicate attempt of partition 0: sealed, not valid
    second = _seal(backend, store, epoch, 1, ["c"])
    leftover = new_checkpoint_id()
    store.record_intent(leftover, [backend.output_uri + "/never-written.parquet"], epoch=epoch)

    contents = store.inspection.contents()
    assert contents.epoch == epoch
    assert len(contents.checkpoints) == 3
    assert contents.valid_ids == {first, second}
    assert contents.unsealed_ids == (leftover,)
    assert contents.keys_done == 3
    assert len(contents.uncommitted) == 3

    store.commit([backend.output_uri])
    store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    after = store.inspection.contents()
    assert len(after.snapshots) == 1 and after.keys_done == 3
    assert after.unsealed_ids == ()


def test_epoch_record_uri_names_the_record_that_fences_older_writers(backend: Backend) -> None:
    store = backend.store()
    store.epochs.begin(owner="first")
    uri = store.epochs.record_uri(2)
    parent, name = uri.rsplit("/", 1)
    records = open_blobs(parent, **backend.options)
    assert not records.exists(name) and store.epochs.is_current(1)
    store.epochs.begin(owner="second", takeover=True)
    assert records.exists(name) and not store.epochs.is_current(1)
