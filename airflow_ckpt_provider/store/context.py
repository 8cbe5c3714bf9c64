"""What every concern of the store shares: the blob store, parallel reads, JSON records, output locations."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from airflow_ckpt_provider.store.blobs.base import BlobStore
from airflow_ckpt_provider.store.deletion_guard import anchor_of
from airflow_ckpt_provider.store.errors import CorruptCheckpointError, UnsupportedError

T = TypeVar("T")
#: Batches per thread in :meth:`StoreContext.map` (more: better balance when items' costs differ).
_BATCHES_PER_WORKER = 4
R = TypeVar("R")


class StoreContext:
    """The store root's blobs plus the helpers each concern reads and writes records with. Thread-safe."""

    def __init__(
        self,
        blobs: BlobStore,
        *,
        max_workers: int = 16,
        blob_opener: Callable[[str, str | None], BlobStore] | None = None,
        trusted_roots: Sequence[str] | None = None,
        trusted_by: str | None = None,
        configured_roots: Sequence[str] | None = None,
    ) -> None:
        self.blobs = blobs
        #: The output roots the opener vouches for (the DAG's declaration), None without: what the
        #: store's own records may declare is bounded by them (store/deletion_guard.py).
        self.trusted_roots: tuple[str, ...] | None = None if trusted_roots is None else tuple(trusted_roots)
        #: Who declares ``trusted_roots`` (named in refusals), e.g. "DAG task 'd.commit'".
        self.trusted_by = trusted_by
        #: ``[ckpt] trusted_output_roots``: without ``trusted_roots``, recorded roots count only under them.
        self.configured_roots: tuple[str, ...] | None = (
            tuple(configured_roots) if configured_roots and trusted_roots is None else None
        )
        self.max_workers = max_workers
        self.lock = threading.Lock()
        self._blob_opener = blob_opener
        self._output_blobs: dict[tuple[str, str | None], BlobStore] = {}

    @property
    def uri(self) -> str:
        return self.blobs.uri

    def close(self) -> None:
        self.blobs.close()
        for blobs in self._output_blobs.values():
            blobs.close()

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``fn`` over ``items`` on up to ``max_workers`` threads (requests overlap), in order.

        Items go to the threads in batches (a few per thread), not one task each: reading 20,000
        loose manifests from local disk spent more time handing single reads to the pool than
        reading them."""
        if len(items) <= 1 or self.max_workers <= 1:
            return [fn(item) for item in items]
        workers = min(self.max_workers, len(items))
        size = max(1, -(-len(items) // (workers * _BATCHES_PER_WORKER)))
        batches = [items[i : i + size] for i in range(0, len(items), size)]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return [r for batch in pool.map(lambda b: [fn(item) for item in b], batches) for r in batch]

    def read_json(self, key: str) -> dict[str, Any]:
        data, _ = self.blobs.get(key)
        return self.parse_json(key, data)

    def parse_json(self, key: str, data: bytes) -> dict[str, Any]:
        """A record's JSON object; :class:`CorruptCheckpointError` (saying what to do) if it is not one."""
        try:
            parsed = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptCheckpointError(
                f"{self.blobs.child_uri(key)} is corrupt or truncated ({exc}). Nothing was changed; "
                "run `airflow-ckpt check` on the store, then delete or restore that object",
                reason="corrupt",
            ) from exc
        if not isinstance(parsed, dict):
            raise CorruptCheckpointError(f"{self.blobs.child_uri(key)} does not hold a JSON object", reason="corrupt")
        return parsed

    def output_store(self, uri: str, *, anchor: str | None = None) -> BlobStore:
        """A blob store rooted at an output directory (same credentials as the store). ``anchor``: the
        declared output root it lies under, below which no symbolic link is followed (local disk;
        ``DeletionGuard.anchor_of``); without one, the most specific root the store was opened with
        that holds ``uri``, else ``uri`` itself."""
        root = uri.rstrip("/")
        if anchor is None:
            anchor = anchor_of(root, self.trusted_roots or self.configured_roots or ())
        with self.lock:
            blobs = self._output_blobs.get((root, anchor))
            if blobs is None:
                if self._blob_opener is None:
                    raise UnsupportedError(
                        "this store cannot open output locations (no blob opener)", reason="no_blob_opener"
                    )
                blobs = self._blob_opener(root, anchor)
                self._output_blobs[(root, anchor)] = blobs
            return blobs

    def opened_output_stores(self) -> list[BlobStore]:
        """The output locations opened so far (benchmarks count their requests)."""
        with self.lock:
            return list(self._output_blobs.values())
