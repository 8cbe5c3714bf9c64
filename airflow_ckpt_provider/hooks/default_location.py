"""Where a task instance keeps its checkpoints when its operator names no store.

One location per (dag_id, task_id, run_id, map_index), never shared by two of them
(docs/airflow.md, "Default store location"):

    {base}/{dag_id}/{task_id}/{run_id}                      unmapped task
    {base}/{dag_id}/{task_id}/{run_id}/map_index={i}        mapped instance i

Each id becomes one path segment that is safe in an S3 key, a URI and a file name:
an id made only of ``[a-z0-9._-]`` (not starting with a dot) is used as it is; any
other id becomes a readable part (unsafe characters spelled ``_``) followed by ``~``
and 12 hex digits of the SHA-256 of the raw id. A plain segment never contains ``~``,
so it never equals a hashed one; two hashed segments are equal only if their hashes
are, so distinct ids give distinct segments — also on case-insensitive disks, since a
plain segment is lower-case and the hash is of the id as written.

Before 0.2 every unsafe character became ``_`` and mapped instances shared one store
(:func:`legacy_location`); :func:`adopt_legacy` says when a store there still belongs
to a task instance.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

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


def default_location(base: str, dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> str:
    """The store of one task instance under ``base`` (``map_index`` -1: not mapped)."""
    segments = [path_segment(s) for s in (dag_id, task_id, run_id)]
    if map_index >= 0:
        segments.append(map_index_segment(map_index))
    return f"{base.rstrip('/')}/{'/'.join(segments)}"


def legacy_path_segment(value: str) -> str:
    """The segment 0.1 used: every unsafe run of characters spelled ``_`` (not injective)."""
    cleaned = _UNSAFE.sub("_", value).strip("._")
    return cleaned or "_"


def legacy_location(base: str, dag_id: str, task_id: str, run_id: str) -> str:
    """Where 0.1 put the store of (dag_id, task_id, run_id), mapped or not."""
    segments = "/".join(legacy_path_segment(s) for s in (dag_id, task_id, run_id))
    return f"{base.rstrip('/')}/{segments}"


def legacy_owner(dag_id: str, task_id: str, run_id: str) -> str:
    """The epoch owner 0.1's operator recorded."""
    return f"{dag_id}/{task_id}/{run_id}"


def adopt_legacy(owners: Iterable[str | None], dag_id: str, task_id: str, run_id: str) -> bool:
    """Whether a store at the legacy location, whose epochs name ``owners``, is this task's.

    Only if submits of exactly this (dag, task, run) opened its epochs: the legacy
    spelling maps ``a:b`` and ``a_b`` to one place, and a store that another run (or
    several mapped instances at once) wrote must not be resumed by this one. Owners
    that are not task instances (``clear``, ``discard_uncommitted``) do not count.
    """
    task_owners = {owner for owner in owners if owner and "/" in owner}
    return task_owners == {legacy_owner(dag_id, task_id, run_id)}
