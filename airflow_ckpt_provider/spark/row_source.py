"""Row-key sources: what a checkpoint records about the input it covered, and what a rerun may skip.

Key lists stay the record (see docs/row-keys.md); besides its keys, each row-key
checkpoint records in its manifest metadata (``metadata["input"]``) what input its
task covered, so that a rerun on an unchanged input skips work without reading keys:

* no exchange before the writer (unique keys) over a Spark file scan: the files the
  task read **whole** (path, size, modification time as Spark's ``_metadata`` shows
  them), and the byte ranges it read of files Spark split across tasks;
* the exchange at the source: the task's **bucket** ``p`` of ``N``
  (``pmod(murmur3(key), N)``, the hash Spark's ``HashPartitioning`` uses); bucket 0 also
  records the run's listing;
* both: a **digest of the whole input listing** of the run.

A rerun drops unchanged files that valid checkpoints read completely (whole, or every
byte range of a split file, or every bucket of an exchange run over them), filters
buckets whose checkpoint saw an identical listing (no new key can fall into them),
and anti-joins the done keys only when some valid checkpoint or the compacted
snapshot is vouched for by neither.

A record vouches only for input its task read **unfiltered** (``"complete": true``): a
task whose rows passed the anti-join, whose bucket was filtered, or that was handed a
file the rerun had pruned holds only the keys that were pending then, not every key of
its bucket or files, so it seals no input record. Without that rule, once a reprocess
(or rewind) removed the older checkpoints that held the rest, the later one still
vouched for the whole bucket or file, and the rerun skipped the keys it was meant to
rewrite. A shortcut must be as exact as what it replaces.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark.backend.base import FilePiece, InputFile
from airflow_ckpt_provider.spark.keys import SOURCE_KEY_COLUMN
from airflow_ckpt_provider.store import Checkpoint

log = logging.getLogger(__name__)

#: Key of the checkpoint metadata entry that records the input a row-key checkpoint covered.
INPUT_RECORD = "input"
#: Column metadata of the hidden source-key column: the id of the ``RowSource`` it came from.
SOURCE_ID_METADATA = "ckpt.row_source"
#: How buckets are computed; a bucket record of another hash never counts.
BUCKET_HASH = "spark-murmur3-42"
#: Bucket 0's record carries the run's whole listing up to this many files (a few hundred KB in one manifest).
LISTING_RECORD_MAX = 10_000


def listing_digest(listing: Sequence[InputFile]) -> str:
    """A digest of an input listing: equal iff the same files with the same sizes and modification times."""
    digest = hashlib.sha256()
    for identity in sorted(f.identity for f in listing):
        digest.update(identity.encode())
        digest.update(b"\n")
    return digest.hexdigest()


def bucket_of(column: str, buckets: int) -> Column:
    """The bucket Spark's ``repartition(buckets, column)`` sends a row to."""
    return F.pmod(F.hash(F.col(column)), F.lit(buckets))


@dataclass(frozen=True)
class RowSource:
    """One ``skip_completed`` call: its key, how rows are grouped, and its input listing (if a file scan)."""

    columns: tuple[str, ...]
    unique: bool
    #: Rows hash-partitioned by the source key into this many buckets at the source (None: no exchange).
    buckets: int | None
    #: The plan proved the rows already grouped by key (no exchange needed, not unique).
    grouped: bool = False
    listing: tuple[InputFile, ...] | None = field(default=None, repr=False)
    #: Unique keys: read a file source in at least this many tasks (each task is a checkpoint).
    min_tasks: int | None = None
    source_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    #: What this run filtered out of the source before the writer's tasks (see :class:`InputRecords`):
    #: the done keys were anti-joined, these file identities pruned, these buckets filtered.
    anti_joined: bool = False
    pruned: frozenset[str] = field(default=frozenset(), repr=False)
    skipped_buckets: frozenset[int] = frozenset()
    #: The rows carry the piece they came from (:data:`SOURCE_PIECE_COLUMN`): the listed files by the
    #: ``xxhash64`` of their path, so each writer task records the pieces it met (Spark Connect).
    piece_files: Mapping[int, InputFile] | None = field(default=None, repr=False)

    @property
    def digest(self) -> str | None:
        return None if self.listing is None else listing_digest(self.listing)


@dataclass(frozen=True)
class InputRecords:
    """What each writer task covered, for the checkpoint it seals (picklable: shipped to Arrow tasks).

    Built only for a source whose done keys were not anti-joined (:func:`input_records`); a
    task gets no record when what it read was filtered anyway: its bucket was skipped, or
    the bucket's rows came from files pruned (``pruned``), or Spark handed it a file the
    rerun pruned by a row filter rather than at planning.
    """

    digest: str
    buckets: int | None = None
    task_files: tuple[tuple[FilePiece, ...], ...] | None = field(default=None, repr=False)
    skipped_buckets: frozenset[int] = frozenset()
    pruned: frozenset[str] = field(default=frozenset(), repr=False)
    #: Buckets: the run's input listing, recorded by bucket 0 (see :func:`resolve_done_input`).
    listing: tuple[InputFile, ...] | None = field(default=None, repr=False)
    #: Pieces met by each task (Spark Connect): the listed files by the ``xxhash64`` of their path.
    piece_files: Mapping[int, InputFile] | None = field(default=None, repr=False)

    def for_partition(self, partition: int) -> dict[str, Any] | None:
        if self.buckets is not None:
            if self.pruned or partition in self.skipped_buckets:
                return None
            record: dict[str, Any] = {
                "digest": self.digest,
                "bucket": partition,
                "buckets": self.buckets,
                "hash": BUCKET_HASH,
                "complete": True,
            }
            if partition == 0 and self.listing is not None and len(self.listing) <= LISTING_RECORD_MAX:
                record["listing"] = [f.to_json() for f in self.listing]
            return record
        if self.task_files is None or partition >= len(self.task_files):
            return None
        return self._files_record(self.task_files[partition])

    def for_pieces_met(self, met: Iterable[tuple[int, int, int]]) -> dict[str, Any] | None:
        """The record of a task that met rows of these pieces (path hash, first byte, length; Spark Connect).

        A task reads each piece of its scan whole, so a piece it met rows of is one it read (a piece
        none of whose rows reached the writer is simply not recorded: less is skipped, never more). A
        piece of a file the run did not list (the input changed under it) records nothing."""
        if self.piece_files is None:
            return None
        pieces = []
        for path_hash, start, length in met:
            file = self.piece_files.get(path_hash)
            if file is None:
                return None
            pieces.append(FilePiece(file, start, length))
        return self._files_record(pieces) if pieces else None

    def _files_record(self, pieces: Sequence[FilePiece]) -> dict[str, Any] | None:
        if any(p.file.identity in self.pruned for p in pieces):
            return None
        whole = sorted({p.file.path: p.file for p in pieces if p.whole}.values(), key=lambda f: f.path)
        split = sorted((p for p in pieces if not p.whole), key=lambda p: (p.file.path, p.start))
        return {
            "digest": self.digest,
            "files": [f.to_json() for f in whole],
            "pieces": [[*p.file.to_json(), p.start, p.length] for p in split],
            "complete": True,
        }


def input_records(
    source: RowSource,
    *,
    buckets: int | None = None,
    task_files: tuple[tuple[FilePiece, ...], ...] | None = None,
    pieces_met: bool = False,
) -> InputRecords | None:
    """The input records of ``source``'s writer tasks, or None when none of them may vouch for its input:
    no listing (not a plain file scan), or the done keys were anti-joined (each task then holds only the
    keys pending in this run, not every key of what it read). ``pieces_met``: each task records the pieces
    its rows came from (the source carries them, :func:`piece_files`)."""
    if not source.digest or source.anti_joined:
        return None
    piece_files = source.piece_files if pieces_met else None
    if buckets is None and task_files is None and piece_files is None:
        return None
    return InputRecords(
        source.digest,
        buckets=buckets,
        task_files=task_files,
        skipped_buckets=source.skipped_buckets,
        pruned=source.pruned,
        listing=source.listing if buckets is not None else None,
        piece_files=piece_files,
    )


def piece_files(spark: SparkSession, listing: Sequence[InputFile]) -> dict[int, InputFile] | None:
    """The listed files by Spark's ``xxhash64`` of their path (one small query), or None when two collide, the
    listing is larger than bucket 0 may record (the paths travel in the query), or the query fails: the run then
    records no pieces, which costs the next run its shortcut, never this run."""
    if not listing or len(listing) > LISTING_RECORD_MAX:
        return None
    try:
        rows = (
            spark.createDataFrame([(f.path,) for f in listing], "path string")
            .select("path", F.xxhash64("path").alias("hash"))
            .collect()
        )
    except Exception as exc:  # a server refusing the query must cost the shortcut, not the job
        log.info("could not hash the input listing's paths (%s); checkpoints record keys only", exc)
        return None
    by_path = {f.path: f for f in listing}
    files = {int(r["hash"]): by_path[r["path"]] for r in rows}
    return files if len(files) == len(listing) else None


def piece_column() -> Column:
    """The piece of its file each row was read from, as Spark's ``_metadata`` shows it."""
    return F.struct(
        F.xxhash64(F.col("_metadata.file_path")).alias("file"),
        F.col("_metadata.file_block_start").alias("start"),
        F.col("_metadata.file_block_length").alias("length"),
    )


@dataclass(frozen=True)
class DoneInput:
    """What a rerun may skip without keys (``prune``: file identities, ``buckets``) and whether keys are needed."""

    prune: frozenset[str] = frozenset()
    buckets: frozenset[int] = frozenset()
    needs_keys: bool = False
    #: Valid checkpoints vouched for by their input record, and the rest (for the log and the result).
    vouched: int = 0
    unvouched: int = 0
    #: The oldest epoch of a checkpoint that vouched (an action removing checkpoints since then is
    #: where a shortcut could be wrong: spark/job/skip_audit.py checks it).
    vouched_since: int | None = None
    #: Whether this run checked its shortcut (spark/job/skip_audit.py), and how many pending keys it found.
    audited: bool = False
    pending_skipped: int = 0
    #: No pending key lies between the least and the greatest done key: nothing to anti-join (row_skip.py).
    beyond_done_keys: bool = False

    @property
    def shortcut(self) -> bool:
        """Whether input is skipped without reading its keys."""
        return bool(self.prune or self.buckets)

    def describe(self) -> str:
        parts = [f"{len(self.prune)} done files skipped unread", f"{len(self.buckets)} done buckets filtered"]
        if self.beyond_done_keys:
            parts.append("pending keys all beyond the done ones: none joined")
        else:
            parts.append("done keys anti-joined" if self.needs_keys else "no done key read")
        audit = f"; audit found {self.pending_skipped} pending keys in skipped input" if self.audited else ""
        return ", ".join(parts) + f" ({self.vouched} checkpoints vouched by their input, {self.unvouched} not{audit})"


def resolve_done_input(valid: Iterable[Checkpoint], *, snapshot_keys: int, source: RowSource) -> DoneInput:
    """Which done input ``source`` can skip by its records, and whether the done keys must be anti-joined.

    Only complete records count (``"complete": true``: the task read its input unfiltered,
    see :class:`InputRecords`). A file is skipped when it is unchanged and valid checkpoints
    read all of it (whole, or each byte range Spark split it into). A bucket is filtered when
    its checkpoint saw an input listing identical to this one and the same bucket count. Any valid checkpoint
    with keys that neither vouches for (another input, a file not all done, no record),
    and keys in the compacted snapshot, need the anti-join (against every done key:
    exact, and the store reads them in parallel).
    """
    digest = source.digest
    current = {f.path: f.identity for f in source.listing or ()}
    records: list[tuple[Checkpoint, Mapping[str, Any] | None]] = []
    coverage: dict[str, list[tuple[int, int]]] = {}
    sizes: dict[str, int] = {}
    for checkpoint in valid:
        record = checkpoint.metadata.get(INPUT_RECORD) if isinstance(checkpoint.metadata, Mapping) else None
        record = record if isinstance(record, Mapping) and record.get("complete") is True else None
        records.append((checkpoint, record))
        for file, start, length in _covered(record, current):
            coverage.setdefault(file.identity, []).append((start, start + length))
            sizes[file.identity] = file.size
    prune = {identity for identity, ranges in coverage.items() if _covers(ranges, sizes[identity])}
    prune |= _files_of_whole_bucket_runs([r for _, r in records if r is not None], current)
    buckets: set[int] = set()
    needs_keys = snapshot_keys > 0
    vouched = unvouched = 0
    since: int | None = None
    for checkpoint, record in records:
        covered = False
        if record is not None and digest is not None:
            files_done = record.get("digest") == digest and all(
                f.identity in prune for f, _, _ in _covered(record, current, unchanged_only=False)
            )
            covered = (files_done and ("files" in record or "pieces" in record)) or _bucket_covers(
                record, digest, source.buckets, buckets
            )
        if record is not None:  # it may vouch for a file with others' pieces even when not covered itself
            since = checkpoint.epoch if since is None else min(since, checkpoint.epoch)
        if covered:
            vouched += 1
        else:
            unvouched += 1
            needs_keys = needs_keys or checkpoint.num_keys > 0
    return DoneInput(frozenset(prune), frozenset(buckets), needs_keys, vouched, unvouched, since)


def _covered(
    record: Mapping[str, Any] | None, current: Mapping[str, str], *, unchanged_only: bool = True
) -> list[tuple[InputFile, int, int]]:
    """The byte ranges a record says its task read, of files unchanged since (all of them if not
    ``unchanged_only``; a changed file then never counts as done)."""
    if record is None:
        return []
    ranges: list[tuple[InputFile, int, int]] = []
    try:
        for item in record.get("files") or ():
            file = InputFile.from_json(item)
            ranges.append((file, 0, file.size))
        for item in record.get("pieces") or ():
            file = InputFile.from_json(item[:3])
            ranges.append((file, int(item[3]), int(item[4])))
    except (TypeError, ValueError, IndexError):
        return []
    if unchanged_only:
        ranges = [r for r in ranges if current.get(r[0].path) == r[0].identity]
    return ranges


def _covers(ranges: list[tuple[int, int]], size: int) -> bool:
    """Whether the byte ranges together cover ``[0, size)``."""
    reached = 0
    for start, end in sorted(ranges):
        if start > reached:
            return False
        reached = max(reached, end)
    return reached >= size


def _files_of_whole_bucket_runs(records: Sequence[Mapping[str, Any]], current: Mapping[str, str]) -> set[str]:
    """Files of this listing that an earlier exchange run read in full: every bucket of that run has a valid
    complete record (so each of its rows is in a valid checkpoint, or was filtered by none) and its bucket 0
    recorded the run's listing, whose digest is the one every bucket saw. Only the files unchanged since
    count; the done keys still decide for every other file (a key of a done bucket may have rows in a new
    file), so these checkpoints never vouch for their keys here: only the files are skipped unread."""
    runs: dict[tuple[str, int], set[int]] = {}
    listings: dict[tuple[str, int], Any] = {}
    for record in records:
        digest, buckets, bucket = record.get("digest"), record.get("buckets"), record.get("bucket")
        if record.get("hash") != BUCKET_HASH or not isinstance(digest, str):
            continue
        if not isinstance(buckets, int) or not isinstance(bucket, int) or not 0 <= bucket < buckets:
            continue
        runs.setdefault((digest, buckets), set()).add(bucket)
        if bucket == 0 and "listing" in record:
            listings[(digest, buckets)] = record["listing"]
    done: set[str] = set()
    for (digest, buckets), seen in runs.items():
        if len(seen) < buckets or (digest, buckets) not in listings:
            continue
        try:
            listing = [InputFile.from_json(item) for item in listings[(digest, buckets)]]
        except (TypeError, ValueError):
            continue
        if listing_digest(listing) != digest:  # a listing its buckets did not see: vouches for nothing
            continue
        done.update(f.identity for f in listing if current.get(f.path) == f.identity)
    return done


def _bucket_covers(record: Mapping[str, Any], digest: str, buckets: int | None, done: set[int]) -> bool:
    if buckets is None or record.get("hash") != BUCKET_HASH or record.get("digest") != digest:
        return False
    if record.get("buckets") != buckets or not isinstance(record.get("bucket"), int):
        return False
    done.add(int(record["bucket"]))
    return True


def identity_column() -> Column:
    """The identity of the file a row was read from (as ``InputFile.identity``), from Spark's ``_metadata``."""
    return F.concat_ws(
        "|",
        F.col("_metadata.file_path"),
        F.col("_metadata.file_size").cast("string"),
        F.unix_micros(F.col("_metadata.file_modification_time")).cast("string"),
    )


#: :func:`identity_column` in Spark SQL, for the one ``IN`` expression of :func:`without_files`.
_IDENTITY_SQL = (
    "concat_ws('|', _metadata.file_path, CAST(_metadata.file_size AS STRING), "
    "CAST(unix_micros(_metadata.file_modification_time) AS STRING))"
)


def without_files(df: DataFrame, identities: Iterable[str]) -> DataFrame | None:
    """``df`` without the rows of these files; Spark prunes the files when it plans the scan. None if
    ``df`` does not expose Spark's ``_metadata`` (not a plain file read).

    A row is dropped only when its file's whole identity (path, size, modification time) is done.
    The path is tested first: a row whose path is not done (every row a rerun reads) costs one hash
    lookup of its path, and only a row of a done path builds its identity, which is what tells a
    file changed since it was done (over Spark Connect the scan lists its files again) from the
    done one. Building every row's identity cost 30 % of a rerun's scan (measured: 24 of 48 files
    pruned, 1.80 s against 1.07 s for the rest of the input).
    """
    wanted = sorted(identities)
    if not wanted:
        return df
    paths = sorted({identity.rsplit("|", 2)[0] for identity in wanted})
    try:
        if any("'" in identity or "\\" in identity for identity in wanted):
            # A quote or a backslash would need SQL escaping, which spark.sql.parser.escapedStringLiterals
            # changes: exact literals instead (one Py4J call per file, the same hash sets per row).
            return df.where(~F.col("_metadata.file_path").isin(paths) | ~identity_column().isin(wanted))
        # One SQL expression, so one Py4J round trip (isin makes one per file: 0.8 s for 288 files), and IN
        # lists, which Spark turns into hash sets (InSet) per row: an array literal with array_contains
        # compared every row with every done file, a cost that grew with the done share of a rerun.
        listed_paths = ", ".join(f"'{path}'" for path in paths)
        listed = ", ".join(f"'{identity}'" for identity in wanted)
        return df.where(F.expr(f"NOT (_metadata.file_path IN ({listed_paths})) OR NOT ({_IDENTITY_SQL} IN ({listed}))"))
    except Exception as exc:  # AnalysisException: _metadata does not resolve on this plan
        log.info("cannot skip done files of this source (%s); its done keys are anti-joined instead", exc)
        return None


def without_buckets(df: DataFrame, buckets: int, done: Iterable[int]) -> DataFrame:
    wanted = sorted(done)
    if not wanted:
        return df
    return df.where(~bucket_of(SOURCE_KEY_COLUMN, buckets).isin(wanted))
