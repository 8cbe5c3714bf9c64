"""Reading segments: the state object, the segments it names (kept in memory by name), and what they carry.

A segment holds the manifests (and, beside them, the keys) of many compacted checkpoints;
the state object names the segments in use (docs/store-api.md, "Segments").
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_ckpt_provider.store.blobs.base import BlobNotFoundError
from airflow_ckpt_provider.store.catalog import LoadedSegment
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.errors import CorruptCheckpointError, corrupt_record
from airflow_ckpt_provider.store.segments import (
    EMPTY_STATE,
    STATE_KEY,
    SUMMARY_COLUMNS,
    SegmentState,
    intent_records,
    manifests_key,
    read_manifests,
)
from airflow_ckpt_provider.store.store_state import StoreState

#: How often a reader reads the state object again when a segment it names was replaced meanwhile.
_SEGMENT_RETRIES = 3
#: Segments kept in memory per store (immutable, so a process that reads the state often reads each once).
_SEGMENT_CACHE_SIZE = 64


class SegmentReader:
    """Reads the state object and its segments; a segment is immutable under its name, so it is read once."""

    def __init__(self, context: StoreContext) -> None:
        self._context = context
        self._blobs = context.blobs
        self._segment_cache: dict[str, LoadedSegment] = {}
        self._cache_lock = threading.Lock()

    def warm(self) -> None:
        """Load the segments the state object names into the cache; errors are left to the real read."""
        with contextlib.suppress(Exception):
            self.load_all()

    def segment_state(self) -> SegmentState:
        """The state object (with its etag), or an empty state when the store has none (an older layout)."""
        found = self._blobs.get_if_exists(STATE_KEY)
        if found is None:
            return EMPTY_STATE
        data = self._context.parse_json(STATE_KEY, found[0])
        try:
            return SegmentState.from_json(data, found[1])
        except (KeyError, TypeError, ValueError) as exc:
            raise corrupt_record(self._blobs.child_uri(STATE_KEY), f"is not a valid state object ({exc!r})") from exc

    def load_all(self, *, tolerate_corrupt: bool = False) -> tuple[SegmentState, list[LoadedSegment], dict[str, str]]:
        """The state object, every segment it names (immutable: cached by name) and, with
        ``tolerate_corrupt``, the segments that cannot be read (name -> error) instead of raising.

        A segment a newer compaction replaced and deleted meanwhile is not an error: the
        state object is read again (the rows it held are in the replacing segment).
        """
        missing: BlobNotFoundError | None = None
        for _ in range(_SEGMENT_RETRIES):
            state = self.segment_state()

            def load(name: str) -> LoadedSegment | str:
                try:
                    loaded = self.load_segment(name)
                    if tolerate_corrupt:  # who reports damage (check, cleanup) decodes every column
                        loaded.manifests  # noqa: B018
                    return loaded
                except CorruptCheckpointError as exc:
                    if not tolerate_corrupt:
                        raise
                    return str(exc)

            try:
                loaded = self._context.map(load, list(state.names))
            except BlobNotFoundError as exc:
                missing = exc
                continue
            corrupt = {n: r for n, r in zip(state.names, loaded, strict=True) if isinstance(r, str)}
            return state, [r for r in loaded if not isinstance(r, str)], corrupt
        message = (
            f"{self._blobs.child_uri(STATE_KEY)} names a segment that does not exist ({missing}); nothing was "
            "changed. Run `airflow-ckpt check`"
        )
        if tolerate_corrupt:
            return self.segment_state(), [], {"?": message}
        raise CorruptCheckpointError(message, reason="corrupt")

    def load_segment(self, name: str) -> LoadedSegment:
        with self._cache_lock:
            cached = self._segment_cache.get(name)
        if cached is not None:
            return cached
        key = manifests_key(name)
        data, _ = self._blobs.get(key)
        uri = self._blobs.child_uri(key)
        loaded = LoadedSegment(name, read_manifests(data, uri, SUMMARY_COLUMNS), data, uri)
        with self._cache_lock:
            self._segment_cache[name] = loaded
            while len(self._segment_cache) > _SEGMENT_CACHE_SIZE:
                self._segment_cache.pop(next(iter(self._segment_cache)))
        return loaded


def segment_intents(state: StoreState, skip: set[str]) -> list[dict[str, Any]]:
    """The intent records segments carry for their checkpoints not in ``skip`` (their directories are gone)."""
    records: list[dict[str, Any]] = []
    catalog = state.catalog
    wanted = ~catalog.mask_of(skip) if skip else np.ones(len(catalog), dtype=bool)
    for index, segment in enumerate(catalog.segments):
        _, rows = catalog.segment_rows(index, wanted)
        if len(rows):
            records.extend(intent_records(segment.manifests.take(pa.array(rows))))
    return records
