"""The skip audit of a row-key run: check a shortcut where it could be wrong, and read exactly if it is.

A rerun skips input files and hash buckets that valid checkpoints vouch for
(:mod:`airflow_ckpt_provider.spark.row_source`) without reading their keys. After an
action that removed checkpoints (any epoch with an ``action``: reprocess, rewind, undo,
purge, clear, discard) since the oldest vouching checkpoint was sealed, or after a run
that already found a wrong shortcut, the run checks the shortcut before it writes: the
keys of the skipped part (the rows of the skipped files and buckets, key column only),
anti-joined against every done key. A key left over was pending: the run logs an error,
reads its input exactly (no file or bucket skipped, every done key anti-joined), and
records the finding in the store (store/input_audit.py), whose commit refuses while the
finding is unresolved.

Cost: nothing on a resume of the run just before (no epoch in between); after more epochs, one
listing of ``epochs/`` and the records of the epochs since the oldest vouching checkpoint, nothing
in Spark; one scan of the skipped part's key column in the runs that check.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, Row

from airflow_ckpt_provider.spark.job.job_context import JobContext
from airflow_ckpt_provider.spark.keys import SOURCE_KEY_COLUMN
from airflow_ckpt_provider.spark.row_source import DoneInput, RowSource, bucket_of, identity_column
from airflow_ckpt_provider.spark.skip import anti_join, done_keys_frame
from airflow_ckpt_provider.store import SkipAudit
from airflow_ckpt_provider.store.input_audit import KEYS_KEPT

log = logging.getLogger(__name__)


def audit_due(job: JobContext, done: DoneInput) -> bool:
    """Whether this run must check its shortcut: it takes one, and since the oldest vouching checkpoint
    an action removed checkpoints or a run found a wrong shortcut. What the store's records say can only
    make a run check (and read more), never skip more."""
    if not done.shortcut or done.vouched_since is None:
        return False
    since = done.vouched_since + 1
    if since >= job.epoch:  # a plain resume of the run before: nothing between them, nothing read
        return False
    if any(e.metadata.get("action") for e in job.store.epochs.all(since=since) if e.number != job.epoch):
        return True
    return bool(job.store.epochs.skip_audit_epochs(since))


def pending_skipped(
    job: JobContext, source_df: DataFrame, source: RowSource, done: DoneInput, num_keys: int
) -> tuple[int, list[Any]]:
    """How many keys of the input ``done`` skips are pending (no valid checkpoint holds them), and up to
    :data:`KEYS_KEPT` of them (JSON values)."""
    parts: list[DataFrame] = []
    if done.prune:
        rows = source_df.where(identity_column().isin(sorted(done.prune)))
        parts.append(job.keys.add_source_key(rows, source.columns).select(SOURCE_KEY_COLUMN))
    if done.buckets and source.buckets is not None:
        keyed = job.keys.add_source_key(source_df, source.columns)
        chosen = bucket_of(SOURCE_KEY_COLUMN, source.buckets).isin(sorted(done.buckets))
        parts.append(keyed.where(chosen).select(SOURCE_KEY_COLUMN))
    if not parts:
        return 0, []
    skipped = parts[0]
    for part in parts[1:]:
        skipped = skipped.unionByName(part)
    skipped = skipped.distinct()
    frame = done_keys_frame(
        job.spark,
        job.store,
        skipped.schema[SOURCE_KEY_COLUMN].dataType,
        broadcast_threshold=job.broadcast_threshold,
        num_keys=num_keys,
        parallelism=job.backend.default_parallelism(),
    )
    pending = anti_join(skipped, frame)
    first = pending.limit(KEYS_KEPT).collect()  # one Spark job when the shortcut is right (the usual answer)
    if not first:
        return 0, []
    count = len(first) if len(first) < KEYS_KEPT else pending.count()
    return count, [_json_key(r[SOURCE_KEY_COLUMN]) for r in first]


def fall_back(done: DoneInput) -> DoneInput:
    """``done`` without its shortcut: no file or bucket skipped, every done key anti-joined."""
    return dataclasses.replace(done, prune=frozenset(), buckets=frozenset(), needs_keys=True)


def audit(job: JobContext, source_df: DataFrame, source: RowSource, done: DoneInput, num_keys: int) -> DoneInput:
    """``done`` checked (:func:`audit_due`): as it is when its shortcut skips no pending key, else without
    its shortcut, the finding recorded in the store (the commit refuses it while unresolved)."""
    if not audit_due(job, done):
        return done
    count, keys = pending_skipped(job, source_df, source, done, num_keys)
    checked = dataclasses.replace(done, audited=True, pending_skipped=count)
    if not count:
        log.info("skip_completed(%s): the input its shortcut skips holds no pending key", list(source.columns))
        return checked
    exact = fall_back(checked)
    log.error(
        "skip_completed(%s): %d pending key(s) (e.g. %s) are in the input the checkpoints' records vouch for; "
        "this run reads its input exactly instead (a bug in the shortcut: please report it)",
        list(source.columns),
        count,
        keys[:5],
    )
    job.store.epochs.record_skip_audit(
        SkipAudit(
            epoch=job.epoch,
            source=source.source_id,
            columns=tuple(source.columns),
            pending_skipped=count,
            keys=tuple(keys),
            fell_back=not exact.shortcut,
        )
    )
    return exact


def _json_key(value: Any) -> Any:
    if isinstance(value, Row):
        return value.asDict(recursive=True)
    return value


def audit_summary(skips: Sequence[DoneInput]) -> dict[str, int]:
    """The job result's ``input_audit``: sources whose shortcut was checked, and pending keys found."""
    audited = [s for s in skips if s.audited]
    return {"sources_audited": len(audited), "pending_skipped": sum(s.pending_skipped for s in audited)}
