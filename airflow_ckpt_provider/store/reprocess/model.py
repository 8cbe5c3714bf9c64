"""What a reprocess is asked (``Selection``, with the checks of its keys and times) and what the
store remembers of it (``ReprocessRecord``); the actions, modes and crash points they name.
What it will do and what it did (``ReprocessPlan``, ``ReprocessResult``) are in :mod:`.plan`.

All are immutable and JSON-round-trippable (docs/reprocess.md, "Records").
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_ckpt_provider.store.errors import InvalidArgumentError

#: Actions recorded in a maintenance epoch (``epochs/{n}.json`` field ``maintenance``).
REPROCESS, REWIND, UNDO, PURGE = "reprocess", "rewind", "undo", "purge"
ACTIONS = (REPROCESS, REWIND, UNDO, PURGE)
#: Actions after which the store's keys are pending and a run must come before a commit.
RETRACTING_ACTIONS = (REPROCESS, REWIND, PURGE)
QUARANTINE, DELETE = "quarantine", "delete"

#: Every crash point of reprocess, rewind, undo and purge, in the order the steps meet them
#: (docs/reprocess.md, "Steps and crash points"). The fault campaign deals them.
REPROCESS_FAILPOINTS = (
    "store.reprocess.before_epoch",
    "store.reprocess.after_epoch",
    "store.reprocess.after_snapshot",
    "store.reprocess.after_copy",
    "store.reprocess.after_move",
    "store.reprocess.before_end",
    "store.undo.after_epoch",
    "store.undo.after_restore",
    "store.undo.before_end",
    "store.purge.after_epoch",
    "store.purge.during_delete",
    "store.purge.before_end",
)


def aware_time(value: dt.datetime | str, *, name: str = "", reason: str = "selection") -> dt.datetime:
    """``value`` (an ISO 8601 text or a datetime) as a datetime with a time zone; :class:`InvalidArgumentError`
    (``reason``) naming ``name`` (e.g. a CLI flag) if it is not a time or has no time zone."""
    said = f"{name} {value!r}" if name else repr(value)
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidArgumentError(
                f"{said} is not an ISO 8601 time (e.g. 2024-07-01T12:00:00Z)", reason=reason
            ) from None
    if value.tzinfo is None:
        raise InvalidArgumentError(f"{said} has no time zone: add one (e.g. Z or +00:00 for UTC)", reason=reason)
    return value


def _iso(value: dt.datetime | str | None) -> str | None:
    if value is None:
        return None
    return aware_time(value).astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


#: Nesting a selection key may have (composite keys are flat objects; deeper is not a key).
MAX_KEY_DEPTH = 8
_INT64 = 1 << 63


def check_key(value: Any, depth: int = 0) -> Any:
    """``value`` if it can be a done key (a string, a 64-bit integer, a finite number, a bool, None,
    or a shallow list/object of those), else :class:`InvalidArgumentError` (``selection``) saying why."""
    if depth > MAX_KEY_DEPTH:
        raise InvalidArgumentError(
            f"a key nests deeper than {MAX_KEY_DEPTH} levels: keys are flat values", reason="selection"
        )
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise InvalidArgumentError(
                f"a key is an integer of {len(str(abs(value))) if value.bit_length() < 14000 else 'thousands of'} "
                "digits: keys are at most 64-bit integers",
                reason="selection",
            )
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidArgumentError("a key is not a finite number", reason="selection")
        return value
    if isinstance(value, (list, tuple)):
        for item in value:
            check_key(item, depth + 1)
        return value
    if isinstance(value, Mapping):
        for item in value.values():
            check_key(item, depth + 1)
        return value
    return value  # other Python values (dates, decimals) are the store's key types to judge


def parse_time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Selection:
    """Which checkpoints to reprocess. Every criterion given must hold; a list matches any value.

    ``keys``: row keys (the checkpoints holding any of them); ``files``: input files, for stores
    with file keys (normalized as ``read_parquet`` keys them); ``epochs``: sealed in one of these
    epochs; ``commits``: committed for the first time by one of these commits;
    ``sealed_after`` / ``sealed_before``: sealed in that window (aware datetimes or ISO strings).
    A checkpoint is never split: selecting one of its keys reprocesses all of them.
    """

    keys: tuple[Any, ...] = ()
    files: tuple[str, ...] = ()
    epochs: tuple[int, ...] = ()
    commits: tuple[int, ...] = ()
    sealed_after: str | None = None
    sealed_before: str | None = None

    def __init__(
        self,
        *,
        keys: Iterable[Any] = (),
        files: Iterable[str] = (),
        epochs: Iterable[int] = (),
        commits: Iterable[int] = (),
        sealed_after: dt.datetime | str | None = None,
        sealed_before: dt.datetime | str | None = None,
    ) -> None:
        object.__setattr__(self, "keys", tuple(check_key(k) for k in keys))
        object.__setattr__(self, "files", tuple(str(f) for f in files))
        object.__setattr__(self, "epochs", tuple(int(e) for e in epochs))
        object.__setattr__(self, "commits", tuple(int(c) for c in commits))
        object.__setattr__(self, "sealed_after", _iso(sealed_after))
        object.__setattr__(self, "sealed_before", _iso(sealed_before))

    @property
    def empty(self) -> bool:
        return not (self.keys or self.files or self.epochs or self.commits or self.sealed_after or self.sealed_before)

    def to_json(self) -> dict[str, Any]:
        return {
            "keys": list(self.keys),
            "files": list(self.files),
            "epochs": list(self.epochs),
            "commits": list(self.commits),
            "sealed_after": self.sealed_after,
            "sealed_before": self.sealed_before,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Selection:
        return cls(
            keys=data.get("keys") or (),
            files=data.get("files") or (),
            epochs=data.get("epochs") or (),
            commits=data.get("commits") or (),
            sealed_after=data.get("sealed_after"),
            sealed_before=data.get("sealed_before"),
        )

    def describe(self) -> str:
        parts: list[str] = []
        for label, values in (("keys", self.keys), ("files", self.files), ("epochs", self.epochs)):
            if values:
                shown = ", ".join(repr(v) if label != "epochs" else str(v) for v in values[:5])
                parts.append(f"{label} {shown}" + (f" (+{len(values) - 5} more)" if len(values) > 5 else ""))
        if self.commits:
            parts.append("commits " + ", ".join(str(c) for c in self.commits))
        if self.sealed_after:
            parts.append(f"sealed after {self.sealed_after}")
        if self.sealed_before:
            parts.append(f"sealed before {self.sealed_before}")
        return " and ".join(parts) or "nothing"


@dataclass(frozen=True)
class ReprocessRecord:
    """One reprocess or rewind as the store remembers it (``retractions/{n}.json`` and markers)."""

    epoch: int
    action: str
    mode: str
    selection: Selection | None
    to_commit: int | None
    requested_by: str | None
    created_at: str | None
    finished_at: str | None
    checkpoints: int
    keys: int
    files: int
    bytes: int
    paths: tuple[str, ...] = field(repr=False, default=())
    undone: bool = False
    purged: bool = False

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "action": self.action,
            "mode": self.mode,
            "selection": None if self.selection is None else self.selection.to_json(),
            "to_commit": self.to_commit,
            "requested_by": self.requested_by,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "checkpoints": self.checkpoints,
            "keys": self.keys,
            "files": self.files,
            "bytes": self.bytes,
            "undone": self.undone,
            "purged": self.purged,
        }


def sorted_unique(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(values)))


def dumps(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode()


def canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, default=str)


def first_at_least(numbers: Sequence[int], value: int) -> int | None:
    """The smallest of the sorted ``numbers`` that is >= ``value``."""
    import bisect

    index = bisect.bisect_left(numbers, value)
    return numbers[index] if index < len(numbers) else None
