"""What a rerun may skip by the input records of row-key checkpoints, and when the done keys must decide.

No Spark here: ``resolve_done_input`` reads checkpoint records and the current input
listing (docs/row-keys.md). A skip must never reach a key the records cannot vouch
for: a changed file, a new file, a file only partly done, a bucket of another input.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow as pa

from airflow_ckpt_provider.spark.backend.base import FilePiece, InputFile
from airflow_ckpt_provider.spark.row_source import (
    BUCKET_HASH,
    INPUT_RECORD,
    LISTING_RECORD_MAX,
    InputRecords,
    RowSource,
    input_records,
    listing_digest,
    piece_files,
    resolve_done_input,
)
from airflow_ckpt_provider.spark.writers.arrow_task import pieces_met
from airflow_ckpt_provider.store import Checkpoint, CheckpointStatus

A = InputFile("file:/in/a.parquet", 100, 1_000)
B = InputFile("file:/in/b.parquet", 100, 2_000)
C = InputFile("file:/in/c.parquet", 300, 3_000)


def _checkpoint(partition: int, record: dict[str, Any] | None, keys: int = 10) -> Checkpoint:
    return Checkpoint(
        checkpoint_id=f"00000000-0000-4000-8000-{partition:012d}",
        status=CheckpointStatus.CHECKPOINTED,
        epoch=1,
        partition=partition,
        created_at="",
        sealed_at="",
        committed_at=None,
        key_parts=(),
        file_parts=(),
        num_keys=keys,
        key_type="int64",
        num_files=1,
        num_bytes=1,
        num_rows=keys,
        metadata={} if record is None else {INPUT_RECORD: record},
    )


def _unique(*listing: InputFile) -> RowSource:
    return RowSource(("id",), True, None, listing=tuple(listing))


def _files_record(listing: tuple[InputFile, ...], *pieces: FilePiece) -> dict[str, Any]:
    record = InputRecords(listing_digest(listing), task_files=(tuple(pieces),)).for_partition(0)
    assert record is not None
    return record


def test_unchanged_input_skips_done_files_without_reading_keys() -> None:
    listing = (A, B, C)
    done = [_checkpoint(0, _files_record(listing, FilePiece(A, 0, 100), FilePiece(B, 0, 100)))]
    resolved = resolve_done_input(done, snapshot_keys=0, source=_unique(*listing))
    assert resolved.prune == {A.identity, B.identity}
    assert not resolved.needs_keys and resolved.vouched == 1


def test_a_changed_file_is_read_again_and_its_keys_decide() -> None:
    listing = (A, B)
    done = [_checkpoint(0, _files_record(listing, FilePiece(A, 0, 100), FilePiece(B, 0, 100)))]
    rewritten = InputFile(B.path, B.size, B.mtime_us + 1)  # same size, new modification time
    resolved = resolve_done_input(done, snapshot_keys=0, source=_unique(A, rewritten))
    assert resolved.prune == {A.identity}, "only the unchanged file is skipped"
    assert resolved.needs_keys and resolved.unvouched == 1


def test_a_new_file_keeps_the_keys_deciding_for_it() -> None:
    done = [_checkpoint(0, _files_record((A,), FilePiece(A, 0, 100)))]
    resolved = resolve_done_input(done, snapshot_keys=0, source=_unique(A, B))
    assert resolved.prune == {A.identity}
    assert resolved.needs_keys, "a new file may repeat done keys: they must be anti-joined"


def test_a_split_file_is_skipped_only_when_every_piece_is_done() -> None:
    listing = (C,)
    first = _checkpoint(0, _files_record(listing, FilePiece(C, 0, 150)))
    second = _checkpoint(1, _files_record(listing, FilePiece(C, 150, 150)))
    both = resolve_done_input([first, second], snapshot_keys=0, source=_unique(*listing))
    assert both.prune == {C.identity} and not both.needs_keys
    one = resolve_done_input([first], snapshot_keys=0, source=_unique(*listing))
    assert one.prune == frozenset() and one.needs_keys


def test_buckets_are_skipped_only_on_an_identical_input_and_bucket_count() -> None:
    listing = (A, B)
    record = InputRecords(listing_digest(listing), buckets=8).for_partition(3)
    assert record == {
        "digest": listing_digest(listing),
        "bucket": 3,
        "buckets": 8,
        "hash": BUCKET_HASH,
        "complete": True,
    }
    done = [_checkpoint(3, record)]
    same = resolve_done_input(done, snapshot_keys=0, source=RowSource(("k",), False, 8, listing=listing))
    assert same.buckets == {3} and not same.needs_keys
    grown = resolve_done_input(done, snapshot_keys=0, source=RowSource(("k",), False, 8, listing=(A, B, C)))
    assert grown.buckets == frozenset() and grown.needs_keys, "a new file's keys may fall into a done bucket"
    other_count = resolve_done_input(done, snapshot_keys=0, source=RowSource(("k",), False, 4, listing=listing))
    assert other_count.buckets == frozenset() and other_count.needs_keys


def test_keys_decide_without_records_or_with_compacted_keys() -> None:
    listing = (A,)
    no_record = resolve_done_input([_checkpoint(0, None)], snapshot_keys=0, source=_unique(*listing))
    assert no_record.needs_keys and no_record.prune == frozenset()
    vouched = [_checkpoint(0, _files_record(listing, FilePiece(A, 0, 100)))]
    snapshot = resolve_done_input(vouched, snapshot_keys=5, source=_unique(*listing))
    assert snapshot.needs_keys, "keys compacted into the snapshot have no input record"
    not_a_file_read = resolve_done_input(vouched, snapshot_keys=0, source=RowSource(("id",), True, None))
    assert not_a_file_read.needs_keys and not_a_file_read.prune == frozenset()


def test_an_empty_checkpoint_without_a_record_needs_no_keys() -> None:
    resolved = resolve_done_input([_checkpoint(0, None, keys=0)], snapshot_keys=0, source=_unique(A))
    assert not resolved.needs_keys


def test_a_task_whose_input_was_filtered_vouches_for_nothing() -> None:
    """Reprocess data loss: a task that read its bucket or files after an anti-join (or with its bucket skipped, or
    handed a pruned file) holds only the keys pending then; its record must not vouch for the whole
    bucket or file once a reprocess removed the checkpoints holding the rest."""
    listing = (A, B)
    digest = listing_digest(listing)
    source = RowSource(("k",), False, 8, listing=listing)
    assert input_records(source, buckets=8) is not None
    anti_joined = RowSource(("k",), False, 8, listing=listing, anti_joined=True)
    assert input_records(anti_joined, buckets=8) is None
    assert input_records(RowSource(("id",), True, None, listing=listing, anti_joined=True), task_files=((),)) is None
    skipped = InputRecords(digest, buckets=8, skipped_buckets=frozenset({3}))
    assert skipped.for_partition(3) is None and skipped.for_partition(2) is not None
    assert InputRecords(digest, buckets=8, pruned=frozenset({A.identity})).for_partition(2) is None
    handed_pruned = InputRecords(
        digest, task_files=((FilePiece(A, 0, 100),), (FilePiece(B, 0, 100),)), pruned=frozenset({A.identity})
    )
    assert handed_pruned.for_partition(0) is None and handed_pruned.for_partition(1) is not None


def test_a_record_not_marked_complete_does_not_vouch() -> None:
    listing = (A,)
    record = _files_record(listing, FilePiece(A, 0, 100))
    del record["complete"]
    resolved = resolve_done_input([_checkpoint(0, record)], snapshot_keys=0, source=_unique(*listing))
    assert resolved.prune == frozenset() and resolved.needs_keys and resolved.vouched == 0
    bucket = {"digest": listing_digest(listing), "bucket": 3, "buckets": 8, "hash": BUCKET_HASH}
    as_bucket = resolve_done_input(
        [_checkpoint(3, bucket)], snapshot_keys=0, source=RowSource(("k",), False, 8, listing=listing)
    )
    assert as_bucket.buckets == frozenset() and as_bucket.needs_keys


def _bucket_run(listing: tuple[InputFile, ...], buckets: int, *, skip: int | None = None) -> list[Checkpoint]:
    """The valid checkpoints of one exchange run over ``listing`` (bucket ``skip`` retracted, if given)."""
    records = InputRecords(listing_digest(listing), buckets=buckets, listing=listing)
    done = [_checkpoint(b, records.for_partition(b)) for b in range(buckets) if b != skip]
    return done


def test_files_every_bucket_of_an_earlier_run_read_are_skipped_unread() -> None:
    """An exchange run over (A, B) sealed all four buckets, unfiltered: every row of A and B is in one of
    them. A run over (A, B, C) skips A and B unread; the done keys still decide for C (a done key may have
    rows in a new file), so those checkpoints vouch for no key."""
    first = _bucket_run((A, B), 4)
    assert "listing" in (first[0].metadata[INPUT_RECORD]) and "listing" not in first[1].metadata[INPUT_RECORD]
    grown = resolve_done_input(first, snapshot_keys=0, source=RowSource(("k",), False, 4, listing=(A, B, C)))
    assert grown.prune == {A.identity, B.identity} and grown.needs_keys and grown.buckets == frozenset()
    other_count = resolve_done_input(first, snapshot_keys=0, source=RowSource(("k",), False, 8, listing=(A, B, C)))
    assert other_count.prune == {A.identity, B.identity}, "the files are done whatever the new bucket count"
    a_changed = InputFile(A.path, A.size, A.mtime_us + 1)
    changed = resolve_done_input(first, snapshot_keys=0, source=RowSource(("k",), False, 4, listing=(a_changed, B)))
    assert changed.prune == {B.identity} and changed.needs_keys


def test_a_bucket_run_missing_a_bucket_or_with_a_forged_listing_skips_no_file() -> None:
    source = RowSource(("k",), False, 4, listing=(A, B, C))
    for skip in (0, 3):  # bucket 0 (it holds the listing) or another one retracted by a reprocess
        resolved = resolve_done_input(_bucket_run((A, B), 4, skip=skip), snapshot_keys=0, source=source)
        assert resolved.prune == frozenset() and resolved.needs_keys
    forged = _bucket_run((A, B), 4)
    record = dict(forged[0].metadata[INPUT_RECORD])
    record["listing"] = [f.to_json() for f in (A, B, C)]  # a file its buckets never saw
    forged[0] = _checkpoint(0, record)
    assert resolve_done_input(forged, snapshot_keys=0, source=source).prune == frozenset()
    garbage = _bucket_run((A, B), 4)
    garbage[0] = _checkpoint(0, {**garbage[0].metadata[INPUT_RECORD], "listing": [["x"], 5]})
    assert resolve_done_input(garbage, snapshot_keys=0, source=source).prune == frozenset()
    unfinished = _bucket_run((A, B), 4)
    for index, checkpoint in enumerate(unfinished):
        record = dict(checkpoint.metadata[INPUT_RECORD])
        del record["complete"]
        unfinished[index] = _checkpoint(index, record)
    assert resolve_done_input(unfinished, snapshot_keys=0, source=source).prune == frozenset()


def test_a_task_records_the_pieces_its_rows_came_from_and_nothing_it_cannot_name() -> None:
    """Spark Connect: each writer task records the pieces it met rows of (path hash, first byte, length),
    the same record a classic task makes from the scan's plan; a piece of a file the run did not list (the
    input changed under the run), or of a file the rerun pruned, records nothing."""
    listing = (A, B, C)
    source = RowSource(("id",), True, None, listing=listing, piece_files={11: A, 22: B, 33: C})
    records = input_records(source, pieces_met=True)
    assert records is not None and records.for_partition(0) is None, "no plan's task files over Connect"
    met = records.for_pieces_met({(11, 0, 100), (33, 0, 150), (33, 150, 150)})
    assert met == _files_record(listing, FilePiece(A, 0, 100), FilePiece(C, 0, 150), FilePiece(C, 150, 150))
    # Two tasks that met each half of C, and one that met A: C and A are done, B is not.
    halves = [records.for_pieces_met({(33, 0, 150)}), records.for_pieces_met({(33, 150, 150), (11, 0, 100)})]
    resolved = resolve_done_input([_checkpoint(i, r) for i, r in enumerate(halves)], snapshot_keys=0, source=source)
    assert resolved.prune == {A.identity, C.identity} and not resolved.needs_keys
    assert records.for_pieces_met({(11, 0, 100), (44, 0, 10)}) is None, "an unlisted file: nothing recorded"
    assert records.for_pieces_met(set()) is None
    pruned = input_records(dataclasses.replace(source, pruned=frozenset({B.identity})), pieces_met=True)
    assert pruned is not None and pruned.for_pieces_met({(22, 0, 100)}) is None
    anti_joined = dataclasses.replace(source, anti_joined=True)
    assert input_records(anti_joined, pieces_met=True) is None, "rows filtered by the done keys vouch for nothing"


def test_the_pieces_of_a_batch_are_read_where_the_piece_changes() -> None:
    column = pa.StructArray.from_arrays(
        [pa.array([7, 7, 7, 9, 9, 7, 7]), pa.array([0, 0, 0, 0, 0, 50, 50]), pa.array([50, 50, 50, 8, 8, 50, 50])],
        names=["file", "start", "length"],
    )
    assert pieces_met(column) == {(7, 0, 50), (9, 0, 8), (7, 50, 50)}
    assert pieces_met(pa.chunked_array([column.slice(0, 1)])) == {(7, 0, 50)}


def test_a_listing_too_large_to_send_records_no_pieces() -> None:
    """Over the size bucket 0 may record, the listing's paths are not sent to the server to be hashed (the
    query would carry them all): the run records no pieces, and no Spark call is made (none is given here)."""
    listing = [InputFile(f"file:/in/{i}.parquet", 1, 1) for i in range(LISTING_RECORD_MAX + 1)]
    assert piece_files(None, listing) is None  # type: ignore[arg-type]
    assert piece_files(None, []) is None  # type: ignore[arg-type]
