"""Local-filesystem object layer: the embedded default.

Atomicity comes from the OS: every write goes to a temporary file in the target
directory, is fsynced, then appears under its name in one step — ``link`` for
create-if-absent (fails if the name exists), ``rename`` otherwise. Temporary
files start with ``.`` and are never listed. ``if_match`` updates serialize on a
hidden per-key lock file (``fcntl``), since POSIX has no compare-and-swap on content.

**A path is what it resolves to** (docs/security.md, "Symbolic links"). Everybody who writes
under a store or output root (every Spark executor of a job) can put a symbolic link there,
and the processes that act on the store (the API server, a commit on a worker, the CLI) may
have rights the writers lack. So no operation follows a link below its *anchor*: the root
itself, or the declared output root an output location lies under. Each operation opens the
anchor, then every directory below it one component at a time with ``O_NOFOLLOW`` relative to
the previous one (``openat``), and creates, renames, links and deletes only relative to that
directory's descriptor. A directory swapped for a link between a check and the act is
therefore never followed at the act: the call fails with :class:`RefusedError`
(``symlink``). Listings leave links (and anything that is not a regular file or a directory)
out: a link is not an object. :meth:`LocalBlobStore.links` finds them, for ``check``.
Links at or above the anchor are followed once, when it is opened: they are the
deployment's (a mount point, ``/tmp`` on macOS), not a writer's.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fcntl
import hashlib
import os
import re
import stat
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from urllib.parse import quote, unquote

from airflow_ckpt_provider.store.blobs.base import BlobInfo, BlobNotFoundError, BlobStore, check_key
from airflow_ckpt_provider.store.errors import (
    InvalidArgumentError,
    PreconditionFailedError,
    RefusedError,
    StoreUnavailableError,
)

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


_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: A directory below the anchor: never through a link (a link opened this way fails with ENOTDIR or ELOOP).
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
#: An object read: never through a link; a FIFO planted under the root must not block the reader.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
_NOT_A_DIRECTORY = (errno.ENOTDIR, errno.ELOOP, getattr(errno, "EMLINK", errno.ELOOP))


class LocalBlobStore(BlobStore):
    """Objects are files under a root directory (created on first write).

    ``anchor``: a directory at or above the root from which no link is followed (default: the
    root itself). An output location opened under a declared output root is anchored there, so
    a link anywhere between that root and a file is refused, not only one below the location.
    """

    def __init__(self, uri: str, *, anchor: str | None = None) -> None:
        self.root = local_path_of(uri)
        self.uri = file_uri(self.root).rstrip("/")
        self.anchor = self.root if anchor is None else local_path_of(anchor)
        if self.anchor != self.root and self.anchor not in self.root.parents:
            raise InvalidArgumentError(
                f"{self.uri!r} is not under its anchor {file_uri(self.anchor)!r}", reason="path_outside_root"
            )
        self._anchor_text = str(self.anchor)
        #: The root's components below the anchor: opened without following links, like a key's.
        self._below = self.root.relative_to(self.anchor).parts
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

    def _refuse_link(self, parts: Sequence[str]) -> RefusedError:
        where = os.path.join(self._anchor_text, *parts)
        try:
            target = f" (to {os.readlink(where)})"
        except OSError:
            target = ""
        return RefusedError(
            f"{where} is a symbolic link{target} under {self.anchor}: links under a store or output root are "
            "never followed, so nothing was read or changed through it. Remove the link (`airflow-ckpt check` "
            "lists them)",
            reason="symlink",
        )

    def _open_below(self, fd: int, name: str, walked: Sequence[str]) -> int:
        """``name`` in directory ``fd`` as a directory, never through a link (:class:`RefusedError` if it is one;
        ``NotADirectoryError`` if it is a file)."""
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in _NOT_A_DIRECTORY and _is_link(fd, name):
                raise self._refuse_link([*walked, name]) from exc
            if exc.errno in _NOT_A_DIRECTORY:
                raise NotADirectoryError(exc.errno, exc.strerror, name) from exc
            raise

    def _make_below(self, fd: int, name: str, walked: Sequence[str]) -> int:
        """``name`` in directory ``fd``, made if missing (never through a link)."""
        for _ in range(3):  # a concurrent delete may prune the directory between the mkdir and the open
            try:
                return self._open_below(fd, name, walked)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):  # a concurrent writer made it: fine
                    os.mkdir(name, 0o777, dir_fd=fd)
        return self._open_below(fd, name, walked)

    @contextlib.contextmanager
    def _directory(self, parts: Sequence[str], *, create: bool = False) -> Iterator[int]:
        """A descriptor of the directory ``parts`` under the root, reached from the anchor without following
        any link (``create``: making the missing directories on the way, each relative to its parent)."""
        try:
            fd = os.open(self._anchor_text, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
        except FileNotFoundError:
            if not create:
                raise
            os.makedirs(self._anchor_text, exist_ok=True)
            fd = os.open(self._anchor_text, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
        walked: list[str] = []
        try:
            for name in (*self._below, *parts):
                child = self._open_below(fd, name, walked) if not create else self._make_below(fd, name, walked)
                os.close(fd)
                fd = child
                walked.append(name)
            yield fd
        finally:
            os.close(fd)

    def _write_temp(self, directory: int, name: str, data: bytes) -> str:
        tmp = f".{name}{_TEMP_MARKER}{uuid.uuid4().hex}"
        fd = os.open(tmp, _CREATE_FLAGS, 0o644, dir_fd=directory)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        return tmp

    @contextlib.contextmanager
    def _key_lock(self, directory: int, name: str, parts: Sequence[str]) -> Iterator[None]:
        """Serialize compare-and-swap on one key across threads and processes.

        The lock is a hidden sibling file (never listed): locking the object itself
        would not work, since a rename gives it a new inode.
        """
        lock = f".{name}{_LOCK_SUFFIX}"
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | _CLOEXEC, 0o644, dir_fd=directory)
        except OSError as exc:
            if exc.errno in _NOT_A_DIRECTORY and _is_link(directory, lock):
                raise self._refuse_link([*self._below, *parts, lock]) from exc
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _split(self, key: str) -> tuple[list[str], str]:
        parts = check_key(key).split("/")
        return parts[:-1], parts[-1]

    def _read_at(self, directory: int, name: str, parts: Sequence[str]) -> bytes:
        """The regular file ``name`` in ``directory``; ``FileNotFoundError`` for anything else (a directory, a
        FIFO), :class:`RefusedError` for a link."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=directory)
        except OSError as exc:
            if exc.errno in _NOT_A_DIRECTORY and _is_link(directory, name):
                raise self._refuse_link([*self._below, *parts, name]) from exc
            raise
        with open(fd, "rb", closefd=True) as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise FileNotFoundError(errno.ENOENT, "not a regular file", name)
            return handle.read()

    # -- BlobStore ---------------------------------------------------------------------------

    def put(self, key: str, data: bytes, *, if_absent: bool = False, if_match: str | None = None) -> str:
        parts, name = self._split(key)
        self._count()
        with self._os_errors(f"writing {key}"), self._directory(parts, create=True) as directory:
            if if_match is not None:
                with self._key_lock(directory, name, parts):
                    try:
                        current = self._read_at(directory, name, parts)
                    except FileNotFoundError as exc:
                        raise PreconditionFailedError(f"{key} does not exist (if-match {if_match})") from exc
                    if _etag(current) != if_match:
                        raise PreconditionFailedError(f"{key} changed (if-match {if_match})")
                    tmp = self._write_temp(directory, name, data)
                    os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
            else:
                tmp = self._write_temp(directory, name, data)
                if if_absent:
                    try:
                        os.link(tmp, name, src_dir_fd=directory, dst_dir_fd=directory, follow_symlinks=False)
                    except FileExistsError as exc:
                        if data and _is_empty(
                            directory, name
                        ):  # a write cut short elsewhere: take its place (base.put)
                            return self.put(key, data, if_match=_etag(b""))
                        raise PreconditionFailedError(f"{key} already exists") from exc
                    finally:
                        os.unlink(tmp, dir_fd=directory)
                else:
                    # A rename replaces a link at ``name`` itself, never the file it points to.
                    os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
            os.fsync(directory)
        return _etag(data)

    def get(self, key: str) -> tuple[bytes, str]:
        parts, name = self._split(key)
        self._count()
        try:
            with self._directory(parts) as directory:
                data = self._read_at(directory, name, parts)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise BlobNotFoundError(key) from exc
        except OSError as exc:
            raise self._fail(exc, f"reading {key}") from exc
        return data, _etag(data)

    def exists(self, key: str) -> bool:
        parts, name = self._split(key)
        self._count()
        try:
            with self._directory(parts) as directory:
                mode = os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode
        except (FileNotFoundError, NotADirectoryError, RefusedError):
            return False  # a link is not an object (list() leaves it out too)
        except OSError as exc:
            raise self._fail(exc, f"looking up {key}") from exc
        return stat.S_ISREG(mode)

    def copy_from(self, source: BlobStore, source_key: str, key: str, *, if_absent: bool = False) -> None:
        """A hard link when both are on one filesystem (no bytes copied), else a copy through a
        temporary file; then the name appears in one step (a rename, or with ``if_absent`` a link
        that fails if the name exists: :class:`PreconditionFailedError`). Neither side is ever
        reached through a link (:class:`RefusedError` (``symlink``))."""
        if not isinstance(source, LocalBlobStore):
            super().copy_from(source, source_key, key, if_absent=if_absent)
            return
        self._count()
        source_parts, source_name = source._split(source_key)
        parts, name = self._split(key)
        missing = BlobNotFoundError(f"{source.uri}/{source_key}")
        with self._os_errors(f"copying {source_key} to {key}"):
            try:
                with source._directory(source_parts) as origin, self._directory(parts, create=True) as directory:
                    mode = os.stat(source_name, dir_fd=origin, follow_symlinks=False).st_mode
                    if stat.S_ISLNK(mode):
                        raise source._refuse_link([*source._below, *source_parts, source_name])
                    if not stat.S_ISREG(mode):
                        raise missing
                    self._place(
                        origin,
                        source_name,
                        directory,
                        name,
                        if_absent=if_absent,
                        source=source,
                        source_parts=source_parts,
                    )
                    os.fsync(directory)
            except (FileNotFoundError, NotADirectoryError) as exc:
                raise missing from exc

    def _place(
        self,
        origin: int,
        source_name: str,
        directory: int,
        name: str,
        *,
        if_absent: bool,
        source: LocalBlobStore,
        source_parts: Sequence[str],
    ) -> None:
        """Give ``source_name`` (in ``origin``) the name ``name`` in ``directory``: hard links where the
        filesystem allows, else a copy of the bytes through a temporary file."""
        if if_absent:
            try:  # one step that fails if the name exists: never an overwrite
                os.link(source_name, name, src_dir_fd=origin, dst_dir_fd=directory, follow_symlinks=False)
                return
            except FileExistsError as exc:
                raise PreconditionFailedError(f"{self.child_uri(name)} already exists") from exc
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    raise
        tmp = f".{name}{_TEMP_MARKER}{uuid.uuid4().hex}"
        try:
            os.link(source_name, tmp, src_dir_fd=origin, dst_dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            raise
        except OSError:  # another filesystem, or links not allowed: copy the bytes
            data = source._read_at(origin, source_name, source_parts)
            tmp = self._write_temp(directory, name, data)
        if if_absent:
            try:
                os.link(tmp, name, src_dir_fd=directory, dst_dir_fd=directory, follow_symlinks=False)
            except FileExistsError as exc:
                raise PreconditionFailedError(f"{self.child_uri(name)} already exists") from exc
            finally:
                os.unlink(tmp, dir_fd=directory)
        else:
            os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)

    def discard_interrupted_writes(self, keys: Iterable[str]) -> builtins.list[str]:
        """Delete the temporary files (``.{name}.tmp-{hex}``) a killed writer of ``keys`` left in
        their directories (one directory scan each); see :meth:`BlobStore.discard_interrupted_writes`."""
        names_by_dir: dict[tuple[str, ...], set[str]] = {}
        for key in keys:
            directory_parts, name = self._split(key)
            names_by_dir.setdefault(tuple(directory_parts), set()).add(name)
        removed: builtins.list[str] = []
        for parts, names in sorted(names_by_dir.items()):
            self._count()
            prefix = "".join(f"{p}/" for p in parts)
            try:
                with self._directory(parts) as directory:
                    entries = [e.name for e in os.scandir(directory)]
                    for entry in entries:
                        temporary = _TEMP_NAME.fullmatch(entry)
                        if temporary and temporary.group("name") in names:
                            with contextlib.suppress(FileNotFoundError):
                                os.unlink(entry, dir_fd=directory)
                                removed.append(prefix + entry)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                raise self._fail(exc, f"cleaning {prefix or '/'}") from exc
        return removed

    def list(self, prefix: str = "") -> Iterator[BlobInfo]:
        self._count()
        base = prefix.rsplit("/", 1)[0].split("/") if "/" in prefix else []
        found: builtins.list[BlobInfo] = []
        try:
            with self._directory(base) as directory:
                _files_under(directory, "".join(f"{p}/" for p in base), prefix, found)
        except (FileNotFoundError, NotADirectoryError, RefusedError):
            return iter(())  # a link is not a directory of objects
        except OSError as exc:
            raise self._fail(exc, f"listing {prefix}") from exc
        found.sort(key=lambda info: info.key)
        return iter(found)

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        self._count()
        parts = prefix.rstrip("/").split("/") if prefix.rstrip("/") else []
        try:
            with self._directory(parts) as directory:
                return sorted(
                    e.name
                    for e in os.scandir(directory)
                    if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
                )
        except (FileNotFoundError, NotADirectoryError, RefusedError):
            return []
        except OSError as exc:
            raise self._fail(exc, f"listing {prefix}") from exc

    def links(self, prefix: str = "") -> builtins.list[tuple[str, str]]:
        """Every symbolic link under ``prefix`` (hidden names too: a lock file can be a link) as (key,
        target), sorted; if the prefix itself is reached through a link, that one (its absolute path
        when it lies between the anchor and the root). No listing or operation follows them; ``check``
        reports them."""
        found: builtins.list[tuple[str, str]] = []
        parts = prefix.rstrip("/").split("/") if prefix.rstrip("/") else []
        try:
            with self._directory(parts) as directory:
                _links_under(directory, "".join(f"{p}/" for p in parts), found)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except RefusedError:  # the prefix itself passes through a link: that one
            walked: builtins.list[str] = []
            for name in (*self._below, *parts):
                where = os.path.join(self._anchor_text, *walked, name)
                if os.path.islink(where):
                    inside = [*walked, name][len(self._below) :]
                    found.append(("/".join(inside) if inside else where, _target(where)))
                    break
                walked.append(name)
        except OSError as exc:
            raise self._fail(exc, f"listing {prefix or '/'}") from exc
        return sorted(found)

    def delete_many(self, keys: Iterable[str]) -> builtins.list[str]:
        deleted: list[str] = []
        parents: set[tuple[str, ...]] = set()
        for key in keys:
            self._count()
            parts, name = self._split(key)
            try:
                with self._directory(parts) as directory:
                    # unlink removes a link itself, never what it points to.
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=directory)
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(f".{name}{_LOCK_SUFFIX}", dir_fd=directory)
            except (FileNotFoundError, NotADirectoryError):
                pass  # its directory is gone: so is the object
            except OSError as exc:
                raise self._fail(exc, f"deleting {key}") from exc
            deleted.append(key)
            parents.add(tuple(parts))
        # Empty directories are not objects: prune them so listings stay cheap (rmdir never removes a link).
        for parent in sorted(parents, key=len, reverse=True):
            for depth in range(len(parent), 0, -1):
                try:
                    with self._directory(parent[: depth - 1]) as directory:
                        os.rmdir(parent[depth - 1], dir_fd=directory)
                except (OSError, RefusedError):
                    break
        return deleted


def _is_link(directory: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _is_empty(directory: int, name: str) -> bool:
    try:
        info = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size == 0


def _target(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _files_under(directory: int, rel: str, prefix: str, found: builtins.list[BlobInfo]) -> None:
    """Every regular file under the open ``directory`` (key ``rel`` + name) whose key starts with ``prefix``,
    hidden names left out. Depth first, one descriptor per level: subdirectories are opened relative to
    their parent and never through a link."""
    # One scandir per directory and its entries' own types: a listing of 20,000 loose manifests is the
    # longest part of a state read.
    for entry in list(os.scandir(directory)):
        name = entry.name
        if name.startswith("."):
            continue
        key = rel + name
        try:
            if entry.is_dir(follow_symlinks=False):
                if (key + "/").startswith(prefix) or prefix.startswith(key + "/"):
                    child = os.open(name, _DIR_FLAGS, dir_fd=directory)
                    try:
                        _files_under(child, key + "/", prefix, found)
                    finally:
                        os.close(child)
                continue
            if not entry.is_file(follow_symlinks=False) or not key.startswith(prefix):
                continue  # a link, a FIFO, a socket: not an object
            size = entry.stat(follow_symlinks=False).st_size
        except (FileNotFoundError, NotADirectoryError):
            continue  # deleted (or swapped for a link) while listing
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                continue
            raise
        found.append(BlobInfo(key=key, size=size))


def _links_under(directory: int, rel: str, found: builtins.list[tuple[str, str]]) -> None:
    for entry in list(os.scandir(directory)):
        key = rel + entry.name
        try:
            if entry.is_symlink():
                try:
                    target = os.readlink(entry.name, dir_fd=directory)
                except OSError:
                    target = "?"
                found.append((key, target))
            elif entry.is_dir(follow_symlinks=False):
                child = os.open(entry.name, _DIR_FLAGS, dir_fd=directory)
                try:
                    _links_under(child, key + "/", found)
                finally:
                    os.close(child)
        except (FileNotFoundError, NotADirectoryError):
            continue
