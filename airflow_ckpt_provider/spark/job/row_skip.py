"""Row keys at the source: drop the done rows and lay the rest out so each task is a checkpoint.

What a rerun may skip without reading keys (files read whole, buckets seen with the same
input listing) comes from :mod:`airflow_ckpt_provider.spark.row_source`; the anti-join
against done keys from :mod:`airflow_ckpt_provider.spark.skip` (docs/row-keys.md).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark.job import skip_audit
from airflow_ckpt_provider.spark.job.job_context import JobContext
from airflow_ckpt_provider.spark.keys import SOURCE_FILE_COLUMN, SOURCE_KEY_COLUMN, SOURCE_PIECE_COLUMN, key_columns
from airflow_ckpt_provider.spark.plan import clustered_on, source_listing
from airflow_ckpt_provider.spark.row_source import (
    DoneInput,
    RowSource,
    piece_column,
    piece_files,
    resolve_done_input,
    without_buckets,
    without_files,
)
from airflow_ckpt_provider.spark.skip import (
    anti_join,
    anti_join_in_buckets,
    done_key_bounds,
    done_keys_frame,
    ranged_key_type,
)
from airflow_ckpt_provider.store.errors import InvalidArgumentError

log = logging.getLogger(__name__)


def skip_completed(
    job: JobContext,
    df: DataFrame,
    key: str | Sequence[str],
    *,
    unique: bool,
    num_partitions: int | None,
) -> tuple[DataFrame, DoneInput]:
    """``df`` without its done rows, with the hidden source-key column; and what was skipped.

    See :meth:`CheckpointedJob.skip_completed` for the contract.
    """
    columns = key_columns(key)
    if SOURCE_FILE_COLUMN in df.columns:
        raise InvalidArgumentError(
            "this DataFrame comes from read_parquet (file keys); skip_completed adds row keys. "
            "Use one kind of key per store",
            reason="key_definition_conflict",
        )
    source_df = df.drop(SOURCE_KEY_COLUMN)
    missing = [c for c in columns if c not in source_df.columns]
    if missing:
        raise InvalidArgumentError(
            f"key column(s) {missing} are not in the DataFrame (columns: {source_df.columns}); name the "
            "column(s) that identify an input record",
            reason="key_column_not_found",
        )
    grouped = not unique and clustered_on(job.backend, source_df, columns)
    buckets = None
    if not unique and not grouped:
        buckets = job.partitions(num_partitions)
    job.backend.prepare_plan_tools()
    # Over Spark Connect the listing costs a small job; it serves bucket records, and unique keys' records of
    # the pieces each task met.
    listed = job.backend.kind == "classic" or buckets is not None or unique
    source = RowSource(
        columns,
        unique,
        buckets,
        grouped=grouped,
        listing=source_listing(job.backend, source_df) if listed else None,
        min_tasks=num_partitions if unique else None,
    )
    job.keys.claim("row", columns)
    progress = job.store.inspection.progress()
    done = DoneInput()
    if progress.keys_done or progress.valid_checkpoints:
        valid = job.store.inspection.valid_checkpoints()
        snapshot_keys = max(0, progress.keys_done - sum(c.num_keys for c in valid))
        done = resolve_done_input(valid, snapshot_keys=snapshot_keys, source=source)
    pruned = without_files(source_df, done.prune)
    if pruned is None:
        pruned, done = source_df, dataclasses.replace(done, prune=frozenset(), needs_keys=True)
    # After an action that removed checkpoints, check the shortcut before trusting it (skip_audit.py).
    done = skip_audit.audit(job, source_df, source, done, progress.keys_done)
    if not done.prune:
        pruned = source_df
    # The key's type is checked against the store's before any done key is read.
    with_key = job.keys.add_source_key(pruned, columns, source.source_id)
    if done.needs_keys and len(columns) == 1:
        done = beyond_done_keys(job, source, pruned, columns[0], done, progress.keys_done)
    # More done keys than are broadcast: a sort-merge anti-join, whose exchange lays the rows out in buckets.
    sort_merge = done.needs_keys and progress.keys_done > job.broadcast_threshold
    if (unique or grouped) and sort_merge:
        # A sort-merge anti-join shuffles anyway (a grouped source's grouping is on the key columns, not on
        # the hidden key): into buckets, so its exchange is the writer's layout.
        buckets = job.partitions(num_partitions)
        source = dataclasses.replace(source, buckets=buckets)
    if buckets is not None:
        with_key = without_buckets(with_key, buckets, done.buckets)
    log.info("skip_completed(%s): %s", list(columns), done.describe())
    frame = None
    if done.needs_keys:
        frame = done_keys_frame(
            job.spark,
            job.store,
            with_key.schema[SOURCE_KEY_COLUMN].dataType,
            broadcast_threshold=job.broadcast_threshold,
            num_keys=progress.keys_done,
            parallelism=job.backend.default_parallelism(),
        )
    if frame is not None and buckets is not None and sort_merge:
        with_key = anti_join_in_buckets(with_key, frame, buckets)
    else:
        with_key = anti_join(with_key, frame)
        if buckets is not None:
            # After a broadcast anti-join (or none): a repartition to a fixed number, never split or coalesced.
            with_key = with_key.repartition(buckets, F.col(SOURCE_KEY_COLUMN))
    pieces = None
    if job.backend.kind == "connect" and buckets is None and frame is None and source.listing:
        # Spark Connect shows no task's files: the rows carry their piece, and each writer task records
        # the pieces it met, so a rerun skips the done files as it does on classic PySpark.
        pieces = piece_files(job.spark, source.listing)
        if pieces is not None:
            with_key = with_key.select("*", piece_column().alias(SOURCE_PIECE_COLUMN))
    # What was filtered decides which writer tasks may record their input as read whole (row_source).
    source = dataclasses.replace(
        source,
        min_tasks=pending_tasks(source, done.prune),
        anti_joined=frame is not None,
        pruned=done.prune,
        skipped_buckets=done.buckets if buckets is not None else frozenset(),
        piece_files=pieces,
    )
    job.keys.row_sources[source.source_id] = source
    return with_key, done


def beyond_done_keys(
    job: JobContext, source: RowSource, pending: DataFrame, column: str, done: DoneInput, num_keys: int
) -> DoneInput:
    """``done`` without the anti-join when no pending row's key lies between the least and the greatest done key.

    New input whose keys all lie beyond the done ones (increasing ids: the next day's
    files, the second half of an incremental load) cannot repeat a done key, so joining
    it with every done key (a shuffle of both sides) filters nothing. Asked first: the done
    keys' bounds (the store's read on the driver, or a small job when there are many), then whether any pending row
    lies within them (``isEmpty`` of a range filter, which Parquet's row-group statistics
    answer from the files' footers when the keys do not interleave, and which stops at the
    first row when they do). Only for a source that is a plain file scan, which its listing
    shows (the question then costs at most a scan, never the user's upstream work), and a key
    type that orders the same in Spark and in Arrow; anything else is anti-joined as before.
    """
    if source.listing is None:
        return done
    spark_type = pending.schema[column].dataType
    if not ranged_key_type(spark_type):
        return done
    bounds = done_key_bounds(
        job.spark, job.store, spark_type, num_keys=num_keys, parallelism=job.backend.default_parallelism()
    )
    if bounds is None or not pending.where(F.col(column).between(*bounds)).isEmpty():
        return done
    log.info("skip_completed(%s): no pending key between the done keys %r and %r", column, *bounds)
    return dataclasses.replace(done, needs_keys=False, beyond_done_keys=True)


def pending_tasks(source: RowSource, skipped: frozenset[str]) -> int | None:
    """How many tasks read what is left of a unique-key file source: ``num_partitions`` asks for that many
    tasks over the whole input, so a rerun that skips done files reads the rest in their share of them (as
    big as a clean run's tasks; the writer never packs fewer than the cluster's cores). Keeping all
    ``num_partitions`` would cut the rest into ever smaller tasks, each paying a task's and a checkpoint's
    fixed cost: at half done, a rerun's tasks cost 1.3x a clean run's per row (measured)."""
    if not source.min_tasks or not skipped or not source.listing:
        return source.min_tasks
    total = sum(f.size for f in source.listing)
    pending = sum(f.size for f in source.listing if f.identity not in skipped)
    if total <= 0:
        return source.min_tasks
    return max(1, round(source.min_tasks * pending / total))
