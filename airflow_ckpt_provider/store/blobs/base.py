"""The object layer under the store: a flat key space rooted at a URI.

Both backends (local filesystem, S3) implement :class:`BlobStore`. The store's
logic (epochs, manifests, commit) is written once against this interface, so
both backends behave the same and pass one contract suite.

Keys are ``/``-separated paths relative to the root, never starting with ``/``
and never holding ``..``.
"""

from __future__ import annotations

import abc
import builtins
import posixpath
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from airflow_ckpt_provider.store.errors import CheckpointError, InvalidArgumentError


class BlobNotFoundError(CheckpointError):
    """The object does not exist (internal: the store turns it into a meaningful answer)."""

    def __init__(self, message: str = "", *, reason: str = "blob_not_found") -> None:
        super().__init__(message, reason=reason)


@dataclass(frozen=True)
class BlobInfo:
    key: str
    size: int
    etag: str | None = None


@dataclass(frozen=True)
class PendingUpload:
    """An incomplete multipart upload (S3 only)."""

    key: str
    upload_id: str


def check_key(key: str) -> str:
    """Reject keys that could escape the root."""
    if not key:
        raise InvalidArgumentError(
            f"invalid object key {key!r}: keys are relative '/'-separated paths", reason="path_outside_root"
        )
    return _check_relative(key, key.split("/"), "object key", "keys")


def check_prefix(prefix: str) -> str:
    """A listing prefix: a key or the start of one (may end with ``/``), never escaping the root."""
    if prefix == "":
        return prefix
    parts = prefix.split("/")
    if parts[-1] == "":  # a trailing "/" names a directory
        parts = parts[:-1]
    return _check_relative(prefix, parts, "prefix", "prefixes")


def _check_relative(path: str, parts: builtins.list[str], noun: str, plural: str) -> str:
    if path.startswith("/") or "\\" in path or "\x00" in path:
        raise InvalidArgumentError(
            f"invalid {noun} {path!r}: {plural} are relative '/'-separated paths", reason="path_outside_root"
        )
    if any(part in ("", ".", "..") for part in parts):
        raise InvalidArgumentError(
            f"invalid {noun} {path!r}: '.', '..' and empty segments are not allowed", reason="path_outside_root"
        )
    return path


class BlobStore(abc.ABC):
    """A flat key space under :attr:`uri`. Implementations are thread-safe."""

    #: Root URI without a trailing slash (``file:///abs/dir`` or ``s3://bucket/prefix``).
    uri: str

    #: Requests sent so far (S3: HTTP requests; local: filesystem operations). For benchmarks.
    request_count: int = 0

    def child_uri(self, key: str) -> str:
        return f"{self.uri}/{check_key(key)}"

    def relative_key(self, uri: str) -> str:
        """The key of ``uri`` under this root; :class:`InvalidArgumentError` (``path_outside_root``) if it is not
        under it."""
        prefix = self.uri + "/"
        if not uri.startswith(prefix):
            raise InvalidArgumentError(f"{uri!r} is not under {self.uri!r}", reason="path_outside_root")
        key = uri[len(prefix) :]
        normalized = posixpath.normpath(key)
        if normalized != key:
            raise InvalidArgumentError(
                f"{uri!r} is not a normalized path under {self.uri!r}", reason="path_outside_root"
            )
        return check_key(key)

    @abc.abstractmethod
    def put(self, key: str, data: bytes, *, if_absent: bool = False, if_match: str | None = None) -> str:
        """Write ``data`` at ``key`` atomically (readers see all of it or nothing) and durably.

        ``if_absent``: fail with :class:`PreconditionFailedError` if the key exists. An existing
        *empty* object counts as absent when ``data`` is not empty: every record the store creates
        this way has content, so an empty one is an upload cut short on a server whose PUT is not
        atomic (SeaweedFS keeps the empty object). It is replaced with ``if_match`` on its etag, so
        of two writers doing that at once exactly one wins.
        ``if_match``: fail with :class:`PreconditionFailedError` unless the current etag equals it.
        Returns the new etag.
        """

    @abc.abstractmethod
    def get(self, key: str) -> tuple[bytes, str]:
        """Content and etag; :class:`BlobNotFoundError` if absent."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool: ...

    @abc.abstractmethod
    def list(self, prefix: str = "") -> Iterator[BlobInfo]:
        """Every object whose key starts with ``prefix`` (recursively), in key order."""

    @abc.abstractmethod
    def list_dirs(self, prefix: str) -> builtins.list[str]:
        """Names of the immediate "sub-directories" of ``prefix`` (which ends with ``/``)."""

    @abc.abstractmethod
    def delete_many(self, keys: Iterable[str]) -> builtins.list[str]:
        """Delete the keys (missing ones are fine); returns the keys deleted or already absent."""

    def copy_from(self, source: BlobStore, source_key: str, key: str, *, if_absent: bool = False) -> None:
        """Copy ``source``'s object ``source_key`` to ``key`` here, atomically (readers see the whole
        object or none). Backends copy without reading through this process where they can (same
        filesystem, same S3 endpoint); otherwise the object passes through memory.
        ``if_absent``: create only, as :meth:`put` does (:class:`PreconditionFailedError` if ``key``
        exists; never an overwrite, even of an object created after the caller looked).
        :class:`BlobNotFoundError` if the source is gone."""
        self.put(key, source.get(source_key)[0], if_absent=if_absent)

    def links(self, prefix: str = "") -> builtins.list[tuple[str, str]]:
        """Symbolic links under ``prefix`` as (key, target): never followed, never listed as objects
        (local disk only; object stores have none)."""
        return []

    def list_pending_uploads(self, prefix: str = "") -> builtins.list[PendingUpload]:
        """Incomplete multipart uploads under ``prefix`` (none on backends without them)."""
        return []

    def abort_upload(self, upload: PendingUpload) -> None:
        """Abort an incomplete multipart upload (no-op on backends without them)."""

    def discard_interrupted_writes(self, keys: Iterable[str]) -> builtins.list[str]:
        """Remove what writes of ``keys`` cut short by a killed process left behind them (here:
        incomplete multipart uploads of exactly those keys; local disk: their temporary files),
        never the objects themselves. Readers never saw these leftovers, but they hold space and,
        on a local output directory, a reader that lists hidden files sees a second copy of the
        rows. Call it only while no other writer of these keys can be running (the caller's epoch
        fences them). Idempotent; returns the leftovers removed."""
        wanted = set(keys)
        removed: builtins.list[str] = []
        for prefix in sorted({k.rpartition("/")[0] + "/" if "/" in k else "" for k in wanted}):
            for upload in self.list_pending_uploads(prefix):
                if upload.key in wanted:
                    self.abort_upload(upload)
                    removed.append(upload.key)
        return removed

    def get_if_exists(self, key: str) -> tuple[bytes, str] | None:
        try:
            return self.get(key)
        except BlobNotFoundError:
            return None

    def close(self) -> None:
        """Release connections."""
