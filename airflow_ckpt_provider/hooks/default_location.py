"""Where a task instance keeps its checkpoints when its operator names no store.

One location per *job*: every run that writes the same output shares it (docs/airflow.md,
"Default store location"). Two task instances are the same job when they have the same
(dag_id, task_id, map_index) and the same logical date; a run without a logical date (an
asset-triggered run) is a job of its own, by run id:

    {base}/{dag_id}/{task_id}/date={logical date, UTC}[/map_index={i}]
    {base}/{dag_id}/{task_id}/run={run_id}[/map_index={i}]       no logical date

A retry, a Clear of a finished run, a second trigger of the same logical date, ``airflow dags
test`` twice and a backfill's re-run of a day therefore find what earlier runs of that output did:
a failed run's sealed keys (resumed) or the committed output (replaced or skipped, docs/airflow.md
"Re-running a day"). The date is spelled ``YYYY-MM-DD`` at midnight UTC, else
``YYYY-MM-DDTHHMMSS[.ffffff]Z``.

Each id becomes one path segment that is safe in an S3 key, a URI and a file name:
an id made only of ``[a-z0-9._-]`` (not starting with a dot) is used as it is; any
other id becomes a readable part (unsafe characters spelled ``_``) followed by ``~``
and 12 hex digits of the SHA-256 of the raw id. A plain segment never contains ``~``,
so it never equals a hashed one; two hashed segments are equal only if their hashes
are, so distinct ids give distinct segments — also on case-insensitive disks, since a
plain segment is lower-case and the hash is of the id as written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_PLAIN = re.compile(r"[a-z0-9_-][a-z0-9._-]*")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
#: Longer ids are cut to this many readable characters (the hash keeps them apart):
#: S3 keys are limited to 1024 bytes, many file systems to 255 per segment.
READABLE_MAX = 80
HASH_CHARS = 12
MAP_INDEX_PREFIX = "map_index="


def path_segment(value: str) -> str:
    """``value`` as one path segment; distinct values give distinct segments."""
    if len(value) <= READABLE_MAX and _PLAIN.fullmatch(value):
        return value
    readable = _UNSAFE.sub("_", value).strip("._")[:READABLE_MAX]
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    return f"{readable}~{digest}"


def map_index_segment(map_index: int) -> str:
    """The segment of mapped instance ``map_index`` (Airflow's own log paths spell it the same)."""
    return f"{MAP_INDEX_PREFIX}{int(map_index)}"


DATE_PREFIX = "date="
RUN_PREFIX = "run="


def date_segment(logical_date: dt.datetime) -> str:
    """The segment of a logical date (UTC; a naive date is taken as UTC)."""
    utc = logical_date.replace(tzinfo=dt.UTC) if logical_date.tzinfo is None else logical_date.astimezone(dt.UTC)
    if (utc.hour, utc.minute, utc.second, utc.microsecond) == (0, 0, 0, 0):
        return f"{DATE_PREFIX}{utc:%Y-%m-%d}"
    fraction = f".{utc.microsecond:06d}" if utc.microsecond else ""
    return f"{DATE_PREFIX}{utc:%Y-%m-%dT%H%M%S}{fraction}Z"


@dataclass(frozen=True)
class JobIdentity:
    """What makes runs "the same job" (they write the same output and share one store and history):
    the task, its map index, and the run's logical date — or, for a run without one, its run id."""

    dag_id: str
    task_id: str
    run_id: str
    logical_date: dt.datetime | None = None
    map_index: int = -1

    def segments(self) -> list[str]:
        when = (
            date_segment(self.logical_date) if self.logical_date is not None else RUN_PREFIX + path_segment(self.run_id)
        )
        segments = [path_segment(self.dag_id), path_segment(self.task_id), when]
        if self.map_index >= 0:
            segments.append(map_index_segment(self.map_index))
        return segments

    def key(self) -> str:
        """The job as one string, recorded in the epochs and commits it makes (``store/rerun.py``)."""
        return "/".join(self.segments())

    @classmethod
    def from_context(cls, context: Mapping[str, Any], task_id: str, dag_id: str | None = None) -> JobIdentity:
        """The job of ``task_id`` in the DAG run of an Airflow task ``context`` (its own map index)."""
        ti = context.get("ti")
        dag_run = context.get("dag_run")
        map_index = getattr(ti, "map_index", None)
        logical_date = getattr(dag_run, "logical_date", None)
        return cls(
            dag_id=dag_id or str(getattr(ti, "dag_id", None) or getattr(dag_run, "dag_id", None) or ""),
            task_id=task_id,
            run_id=str(context["run_id"]),
            logical_date=logical_date if isinstance(logical_date, dt.datetime) else None,
            map_index=map_index if isinstance(map_index, int) and map_index >= 0 else -1,
        )


def default_location(base: str, job: JobIdentity) -> str:
    """The store of ``job`` under ``base``."""
    return f"{base.rstrip('/')}/{'/'.join(job.segments())}"
