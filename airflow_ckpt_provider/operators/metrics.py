"""Metric names and emission through Airflow's ``Stats`` (StatsD, Datadog or OpenTelemetry).

Every metric is prefixed ``ckpt.`` and tagged with ``dag_id`` and ``task_id`` (tags
reach backends that support them; plain StatsD gets the bare name).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from airflow.sdk.observability.stats import Stats

KEYS_SKIPPED = "ckpt.keys_skipped"
CHECKPOINTS_SKIPPED = "ckpt.checkpoints_skipped"
CHECKPOINTS_SEALED = "ckpt.checkpoints_sealed"
ROWS_WRITTEN = "ckpt.rows_written"
BREAKER_TRIPS = "ckpt.breaker_trips"
SUBMITS = "ckpt.submits"
REATTACHES = "ckpt.reattaches"
COMMIT_DURATION = "ckpt.commit_duration"
ORPHANS_DELETED = "ckpt.orphans_deleted"
BYTES_FREED = "ckpt.bytes_freed"
FILES_COMMITTED = "ckpt.files_committed"
UNKNOWN_FILES = "ckpt.unknown_files"
CLEARS = "ckpt.clears"
REPROCESSES = "ckpt.reprocesses"
FILES_RETRACTED = "ckpt.files_retracted"


def task_tags(context: Mapping[str, Any]) -> dict[str, str]:
    ti = context.get("ti")
    if ti is None:
        return {}
    return {"dag_id": str(ti.dag_id), "task_id": str(ti.task_id)}


def count(stat: str, value: int, tags: Mapping[str, str]) -> None:
    """A counter; zero is not sent (StatsD counters only ever add)."""
    if value > 0:
        Stats.incr(stat, count=int(value), tags=dict(tags))


def duration(stat: str, elapsed: dt.timedelta, tags: Mapping[str, str]) -> None:
    Stats.timing(stat, elapsed, tags=dict(tags))
