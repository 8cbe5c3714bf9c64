"""Local-filesystem object layer: the embedded default.

Atomicity comes from the OS: every write goes to a temporary file in the target
directory, is fsynced, then appears under its name in one step — ``os.link`` for
create-if-absent (fails if the name exists), ``os.replace`` otherwise. Temporary
files start with ``.`` and are never listed. ``if_match`` updates serialize on a
hidden per-key lock file (``fcntl``), since POSIX has no compare-and-swap on content.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fcntl
import hashlib
import os
import re
import shutil
import threading
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import quote, unquote

from airflow_ckpt_provider.store.blobs.base import BlobInfo, BlobNotFoundError, BlobStore, check_key
from airflow_ckpt_provider.store.errors import InvalidArgumentError, PreconditionFailedError, StoreUnavailableError

_LOCK_SUFFIX = ".lock"
#: Temporary files are ``.{name}{_TEMP_MARKER}{hex}`` beside ``name``.
_TEMP_MARKER = ".tmp-"
_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.tmp-[0-9a-f]{32}")


#: Characters a file URI keeps as they are (RFC 3986 path characters). Everything else, and '%'
#: itself, is percent-escaped, so that '#', '?', '%2F' or a space in a directory name can never
#: make a URI name another directory (docs/store-api.md, "Store URIs").
_URI_SAFE = "/:@!$&'()*+,;=~"


def file_uri(path: str | os.PathLike[str]) -> str:
    """``/a/b c#1`` → ``file:///a/b%20c%231``: the one URI of an absolute local path."""
    return "file://" + quote(os.fspath(path), safe=_URI_SAFE)


def local_path_of(uri: str) -> Path:
    """``file:///a/b``, ``file:/a/b`` or ``/a/b`` → ``Path('/a/b')`` (absolute, normalized).

    A file URI's path is percent-decoded; it has no query or fragment, so a raw '#' or '?'
    (a URI typed by hand or written by another tool without escaping) is part of the path.
    """
    if uri.startswith("file:"):
        rest = uri[len("file:") :]
        if rest.startswith("//"):
            host, slash, path = rest[2:].partition("/")
            if host not in ("", "localhost"):
                raise InvalidArgumentError(
                    f"{uri!r}: file URIs must be local (file:///absolute/path)", reason="store_uri"
                )
            rest = slash + path
        raw = unquote(rest)
    else:
        raw = uri
    if not raw or not os.path.isabs(raw):
        raise InvalidArgumentError(
            f"{uri!r} is not an absolute local path: use file:///absolute/path or /absolute/path", reason="store_uri"
        )
    return Path(os.path.normpath(raw))


def _etag(data: bytes) -> str:
    """A local object's etag: 128 bits of its SHA-256, which CPUs with SHA instructions (current x86 and
    ARM servers) hash about three times as fast as MD5: every seal writes a key object of a few MB, and
    every read of one hashes it again."""
    return hashlib.sha256(data).hexdigest()[:32]


class LocalBlobStore(BlobStore):
    """Objects are files under a root directory (created on first write)."""

    def __init__(self, uri: str) -> None:
        self.root = local_path_of(uri)
        self._root_text = str(self.root)
        self.uri = file_uri(self.root).rstrip("/")
        self.request_count = 0
        self._count_lock = threading.Lock()

    def child_uri(self, key: str) -> str:
        return f"{self.uri}/{quote(check_key(key), safe=_URI_SAFE)}"

    def relative_key(self, uri: str) -> str:
        path = local_path_of(uri)
        if self.root not in path.parents:
            raise InvalidArgumentError(f"{uri!r} is not under {self.uri!r}", reason="path_outside_root")
        return check_key(path.relative_to(self.root).as_posix())

    # -- helpers -----------------------------------------------------------------------------

    def _count(self) -> None:
        with self._count_lock:
            self.request_count += 1

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def _fail(self, exc: OSError, what: str) -> StoreUnavailableError:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return StoreUnavailableError(
                f"{what}: permission denied under {self.root} ({exc.strerror})", reason="access_denied"
            )
        if exc.errno == errno.ENOSPC:
            return StoreUnavailableError(
                f"{what}: no space left on the device holding {self.root}", reason="unreachable"
            )
        return StoreUnavailableError(f"{what} under {self.root} failed: {exc}", reason="unreachable")

    @contextlib.contextmanager
    def _os_errors(self, what: str) -> Iterator[None]:
        """An ``OSError`` raised in the block as the store's typed error (its own errors pass as they are)."""
        try:
            yield
        except OSError as exc:
            raise self._fail(exc, what) from exc

    def _write_temp(self, path: Path, data: bytes) -> Path:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except FileNotFoundError as exc:  # pragma: no cover - racing rmtree
            raise StoreUnavailableError(f"cannot create {path.parent}: {exc}", reason="store_not_found") from exc
        tmp = path.parent / f".{path.name}{_TEMP_MARKER}{uuid.uuid4().hex}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        return tmp

    @staticmethod
    def _fsync_dir(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _key_lock(self, path: Path) -> Iterator[None]:
        """Serialize compare-and-swap on one key across threads and processes.

        The lock is a hidden sibling file (never listed): locking the object itself
        would not work, since ``os.replace`` gives it a new inode.
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.parent / f".{path.name}{_LOCK_SUFFIX}", "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    # -- BlobStore ---------------------------------------------------------------------------

    def put(self, key: str, data: bytes, *, if_absent: bool = False, if_match: str | None = None) -> str:
        path = self._path(key)
        self._count()
        with self._os_errors(f"writing {key}"):
            if if_match is not None:
                with self._key_lock(path):
                    try:
                        current = path.read_bytes()
                    except FileNotFoundError as exc:
                        raise PreconditionFailedError(f"{key} does not exist (if-match {if_match})") from exc
                    if _etag(current) != if_match:
                        raise PreconditionFailedError(f"{key} changed (if-match {if_match})")
                    tmp = self._write_temp(path, data)
                    os.replace(tmp, path)
            else:
                tmp = self._write_temp(path, data)
                if if_absent:
                    try:
                        os.link(tmp, path)
                    except FileExistsError as exc:
                        if data and _is_empty(path):  # a write cut short elsewhere: take its place (base.put)
                            return self.put(key, data, if_match=_etag(b""))
                        raise PreconditionFailedError(f"{key} already exists") from exc
                    finally:
                        os.unlink(tmp)
                else:
                    os.replace(tmp, path)
            self._fsync_dir(path.parent)
        return _etag(data)

    def get(self, key: str) -> tuple[bytes, str]:
        self._count()
        try:
            # A plain string path: pathlib's parsing was a third of reading a small manifest.
            with open(os.path.join(self._root_text, check_key(key)), "rb") as handle:
                data = handle.read()
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise BlobNotFoundError(key) from exc
        except IsADirectoryError as exc:
            raise BlobNotFoundError(key) from exc
        except OSError as exc:
            raise self._fail(exc, f"reading {key}") from exc
        return data, _etag(data)

    def exists(self, key: str) -> bool:
        self._count()
        return self._path(key).is_file()

    def copy_from(self, source: BlobStore, source_key: str, key: str) -> None:
        """A hard link when both are on one filesystem (no bytes copied), else a copy through a
        temporary file; then the name appears in one step (``os.replace``)."""
        if not isinstance(source, LocalBlobStore):
            super().copy_from(source, source_key, key)
            return
        self._count()
        origin = source._path(source_key)
        path = self._path(key)
        with self._os_errors(f"copying {source_key} to {key}"):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.parent / f".{path.name}{_TEMP_MARKER}{uuid.uuid4().hex}"
            try:
                os.link(origin, tmp)
            except FileNotFoundError as exc:
                raise BlobNotFoundError(f"{source.uri}/{source_key}") from exc
            except OSError:  # another filesystem, or links not allowed: copy the bytes
                try:
                    shutil.copyfile(origin, tmp)
                except FileNotFoundError as exc:
                    raise BlobNotFoundError(f"{source.uri}/{source_key}") from exc
                with open(tmp, "rb") as handle:
                    os.fsync(handle.fileno())
            os.replace(tmp, path)
            self._fsync_dir(path.parent)

    def discard_interrupted_writes(self, keys: Iterable[str]) -> builtins.list[str]:
        """Delete the temporary files (``.{name}.tmp-{hex}``) a killed writer of ``keys`` left in
        their directories (one directory scan each); see :meth:`BlobStore.discard_interrupted_writes`."""
        names_by_dir: dict[Path, set[str]] = {}
        for key in keys:
            path = self._path(key)
            names_by_dir.setdefault(path.parent, set()).add(path.name)
        removed: builtins.list[str] = []
        for directory, names in sorted(names_by_dir.items()):
            self._count()
            try:
                entries = [e.name for e in os.scandir(directory)]
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                raise self._fail(exc, f"listing {directory}") from exc
            for entry in entries:
                temporary = _TEMP_NAME.fullmatch(entry)
                if temporary and temporary.group("name") in names:
                    try:
                        (directory / entry).unlink()
                    except FileNotFoundError:
                        continue
                    except OSError as exc:
                        raise self._fail(exc, f"deleting {directory / entry}") from exc
                    removed.append(os.path.relpath(directory / entry, self.root))
        return removed

    def list(self, prefix: str = "") -> Iterator[BlobInfo]:
        self._count()
        return iter(_files_under(self.root, prefix))

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        self._count()
        directory = self.root / prefix.rstrip("/") if prefix else self.root
        try:
            return sorted(
                entry.name for entry in os.scandir(directory) if entry.is_dir() and not entry.name.startswith(".")
            )
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise self._fail(exc, f"listing {prefix}") from exc

    def delete_many(self, keys: Iterable[str]) -> builtins.list[str]:
        deleted: list[str] = []
        parents: set[Path] = set()
        for key in keys:
            self._count()
            path = self._path(key)
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise self._fail(exc, f"deleting {key}") from exc
            with contextlib.suppress(FileNotFoundError):
                (path.parent / f".{path.name}{_LOCK_SUFFIX}").unlink()
            deleted.append(key)
            parents.add(path.parent)
        # Empty directories are not objects: prune them so listings stay cheap.
        for parent in sorted(parents, key=lambda p: len(p.parts), reverse=True):
            directory = parent
            while directory != self.root and self.root in directory.parents:
                try:
                    directory.rmdir()
                except OSError:
                    break
                directory = directory.parent
        return deleted


def _is_empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except FileNotFoundError:
        return False


def _files_under(root: Path, prefix: str) -> list[BlobInfo]:
    """Every file under ``root`` whose key starts with ``prefix``, hidden names left out, sorted by key."""
    # Walk only the directory that can hold the prefix.
    base_dir = root / prefix.rsplit("/", 1)[0] if "/" in prefix else root
    if not base_dir.is_dir():
        return []
    found: list[BlobInfo] = []
    rel_base = os.path.relpath(base_dir, root)
    # One scandir per directory, its entries' own stat calls and no path normalising per
    # directory: a listing of 20,000 loose manifests is the longest part of a state read.
    pending = [(str(base_dir), "" if rel_base == "." else rel_base + "/")]
    while pending:
        directory, rel = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue
            key = rel + name
            try:
                if entry.is_dir():  # a link to a directory is not walked, as os.walk does not
                    walk = not entry.is_symlink()
                    if walk and ((key + "/").startswith(prefix) or prefix.startswith(key + "/")):
                        pending.append((entry.path, key + "/"))
                    continue
                if not key.startswith(prefix):
                    continue
                size = entry.stat().st_size
            except FileNotFoundError:
                continue
            found.append(BlobInfo(key=key, size=size))
    found.sort(key=lambda info: info.key)
    return found
