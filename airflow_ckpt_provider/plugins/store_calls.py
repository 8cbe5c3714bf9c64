"""Store I/O of the Checkpoints view: off the event loop, bounded in time and in number.

A page must never make Airflow's own API wait for a store. So every store call of the
view runs on this module's own threads (never Airflow's request thread pool, never while
a metadata-DB session is held), at most ``[ckpt] ui_max_concurrent_store_calls`` at once
per API-server process, and the page answers by its deadline (``[ckpt]
ui_store_deadline_seconds``) whatever the store does: a call still running then stops
issuing requests (:class:`DeadlineBlobStore`) and its slot is free once its last request
returns (each request is bounded by the store's own timeout).
"""

from __future__ import annotations

import asyncio
import builtins
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_ckpt_provider.store.blobs.base import BlobInfo, BlobStore, PendingUpload
from airflow_ckpt_provider.store.errors import StoreUnavailableError

T = TypeVar("T")


@dataclass(frozen=True)
class Deadline:
    """A point in time after which a store call must not start another request."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds, seconds)

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def check(self, what: str) -> None:
        if time.monotonic() >= self.at:
            raise StoreUnavailableError(
                f"the store did not answer within {self.seconds:g} s ({what} not started). Nothing was changed; "
                "check the store's endpoint and connection, then reload",
                reason="deadline",
            )


class StoreCalls:
    """Runs store calls on a bounded pool of threads, each answered by its deadline.

    A slot is taken on the event loop (waiting costs no thread) and given back by the store
    thread when its call really ends, so at most ``max_concurrent`` calls ever run, however
    many of them have outlived their page.
    """

    def __init__(self, max_concurrent: int, *, kind: str = "store reads") -> None:
        self.max_concurrent = max(1, int(max_concurrent))
        self.kind = kind
        self._pool = ThreadPoolExecutor(max_workers=self.max_concurrent, thread_name_prefix="ckpt-store")
        self._slots: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}
        self._lock = threading.Lock()

    def _semaphore(self, loop: asyncio.AbstractEventLoop) -> asyncio.Semaphore:
        with self._lock:
            return self._slots.setdefault(loop, asyncio.Semaphore(self.max_concurrent))

    async def run(self, fn: Callable[[], T], deadline: Deadline) -> T:
        """``fn()`` on a store thread; raises :class:`StoreUnavailableError` (``busy``) if no slot frees up before the
        deadline and :class:`StoreUnavailableError` (``deadline``) if ``fn`` has not returned by then (it then stops
        at its next store request and frees its slot)."""
        loop = asyncio.get_running_loop()
        slots = self._semaphore(loop)
        try:
            await asyncio.wait_for(slots.acquire(), timeout=deadline.remaining())
        except TimeoutError:
            raise StoreUnavailableError(
                f"{self.max_concurrent} {self.kind} are already running on this API server (waiting on slow "
                "stores). Nothing was changed; try again in a few seconds",
                reason="busy",
            ) from None

        def call() -> T:
            try:
                return fn()
            finally:
                loop.call_soon_threadsafe(slots.release)

        future = loop.run_in_executor(self._pool, call)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout=deadline.remaining())
        except TimeoutError:
            future.add_done_callback(_consume)
            raise StoreUnavailableError(
                f"the store did not answer within {deadline.seconds:g} s. Nothing was changed; check the "
                "store's endpoint and connection, then reload",
                reason="deadline",
            ) from None


def _consume(future: asyncio.Future[Any]) -> None:
    """Retrieve a late call's outcome so that asyncio does not log it as never retrieved."""
    if not future.cancelled():
        future.exception()


class DeadlineBlobStore(BlobStore):
    """A blob store that refuses to start a request after ``deadline`` (wraps the real one)."""

    def __init__(self, inner: BlobStore, deadline: Deadline) -> None:
        self.inner = inner
        self.deadline = deadline
        self.uri = inner.uri

    def __getattr__(self, name: str) -> Any:
        # Backend specifics (an S3 store's endpoint, its request counters) read through to the real store.
        return getattr(self.inner, name)

    def put(self, key: str, data: bytes, *, if_absent: bool = False, if_match: str | None = None) -> str:
        self.deadline.check(f"writing {key}")
        return self.inner.put(key, data, if_absent=if_absent, if_match=if_match)

    def get(self, key: str) -> tuple[bytes, str]:
        self.deadline.check(f"reading {key}")
        return self.inner.get(key)

    def exists(self, key: str) -> bool:
        self.deadline.check(f"looking up {key}")
        return self.inner.exists(key)

    def list(self, prefix: str = "") -> Iterator[BlobInfo]:
        self.deadline.check(f"listing {prefix or '/'}")
        return self.inner.list(prefix)

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        self.deadline.check(f"listing {prefix or '/'}")
        return self.inner.list_dirs(prefix)

    def delete_many(self, keys: Iterable[str]) -> builtins.list[str]:
        self.deadline.check("deleting")
        return self.inner.delete_many(keys)

    def links(self, prefix: str = "") -> builtins.list[tuple[str, str]]:
        self.deadline.check(f"listing links under {prefix or '/'}")
        return self.inner.links(prefix)

    def list_pending_uploads(self, prefix: str = "") -> builtins.list[PendingUpload]:
        self.deadline.check(f"listing uploads under {prefix or '/'}")
        return self.inner.list_pending_uploads(prefix)

    def abort_upload(self, upload: PendingUpload) -> None:
        self.deadline.check(f"aborting {upload.key}")
        self.inner.abort_upload(upload)

    def close(self) -> None:
        self.inner.close()
