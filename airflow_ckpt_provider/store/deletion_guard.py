"""The one gate every deletion of the store passes (docs/design.md, invariant 10 and section 7).

Records read back from a store are input: any writer of the store's prefix (every Spark
executor that uses it) can write an intent record naming any path. So a record never
decides by itself what may be deleted. Only two kinds of objects ever are:

* the store's own records, by key under the store root (``check_key`` refuses keys that
  climb out of it);
* output files under an **output root declared by the side that opened an epoch**: the
  operator (``store.epochs.begin(output_roots=...)``, recorded in the epoch record) or the Spark
  driver before a write (``declare_output_root``, never executors), and copied by each commit
  into its commit record. A path that does not climb out of the root.

Those records are input too, so what they declare is bounded by what the store was opened
with (docs/security.md, "The trust model"):

* **trusted roots** (``open_store(trusted_output_roots=...)``): the output roots the DAG
  declares (its submit and commit operators' ``output_roots``, as deployed and rendered for the
  run), or those the person on the command line gives. Records only narrow them: a recorded
  root counts where it lies under a trusted root (or a trusted root under it); a store whose
  records declare nothing gets the trusted roots. An empty set: nothing is declared, so no
  output file is ever deleted.
* **configured roots** (``open_store(configured_output_roots=...)``, the ``[ckpt]
  trusted_output_roots`` option), used where the DAG declares nothing: they only bound what the
  records declare. A recorded root counts where it lies under one (or one under it); a store whose
  records declare nothing gets nothing, and a recorded root outside them is refused.
* without trusted roots (a Spark driver, a library caller), a recorded root counts only if it
  is **bound to the store**: the store's scheme and, on S3, the store's bucket. An S3 store's
  record naming ``file:///`` on the host, or another bucket, declares nothing.

A location is compared in its decoded, canonical form: ``file:///a/b%20c`` and
``file:///a/b c`` are one file; ``..``, ``.`` and empty segments are refused rather than
normalized away, and so is a location inside the store root or one that contains it.

A local location is also what it resolves to (docs/security.md, "Symbolic links"): a root that
overlaps the store root once both are resolved declares nothing; a recorded root, or a file,
reached through a symbolic link below the root that vouches for it (its *anchor*: the trusted
root it lies under, or without trusted roots the declared root) is refused. These checks are made
when deciding; at the act the local blob layer opens every directory below the anchor without
following links, so a link put in place after the check is refused there too.
"""

from __future__ import annotations

import functools
import os
import posixpath
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

from airflow_ckpt_provider.store.blobs.base import check_key
from airflow_ckpt_provider.store.blobs.local import file_uri
from airflow_ckpt_provider.store.errors import InvalidArgumentError

#: A name intent's marker is at least this long (a random token), on write and on read: a short
#: marker would match other writers' files ("." matches nearly every file name).
MIN_NAME_MARKER = 12


@dataclass(frozen=True, order=True)
class Location:
    """A file or directory in canonical form: ``scheme`` ``file`` or ``s3``; for ``file`` an
    absolute path, for ``s3`` a bucket and a key (no leading or trailing ``/``)."""

    scheme: str
    bucket: str
    path: str

    @property
    def uri(self) -> str:
        if self.scheme == "file":
            return file_uri(self.path)
        return f"s3://{self.bucket}/{self.path}" if self.path else f"s3://{self.bucket}"

    def is_under(self, root: Location) -> bool:
        """True if this location is ``root`` itself or inside it (same scheme and bucket)."""
        if (self.scheme, self.bucket) != (root.scheme, root.bucket):
            return False
        if self.path == root.path or not root.path or root.path == "/":
            return True
        return self.path.startswith(root.path.rstrip("/") + "/")

    def overlaps(self, other: Location) -> bool:
        return self.is_under(other) or other.is_under(self)

    def bound_to(self, store_root: Location) -> bool:
        """True if this location has the store's scheme and, on S3, the store's bucket."""
        return (self.scheme, self.bucket) == (store_root.scheme, store_root.bucket)


def parse_location(uri: str) -> Location | None:
    """The canonical form of ``uri`` (``file:``, a plain absolute path, ``s3://``, ``s3a://``), or
    None if it is not a location this store acts on: another scheme, a relative path, a remote
    file host, or a path with ``..``, ``.`` or empty segments."""
    if not isinstance(uri, str) or not uri:
        return None
    if uri.startswith(("s3://", "s3a://")):
        rest = uri.split("://", 1)[1]
        bucket, _, key = rest.partition("/")
        key = key.rstrip("/")
        if not bucket or "@" in bucket or (key and not _clean(key.split("/"))):
            return None
        return Location("s3", bucket, key)
    if uri.startswith("file:"):
        rest = uri[len("file:") :]
        if rest.startswith("//"):
            host, slash, tail = rest[2:].partition("/")
            if host not in ("", "localhost"):
                return None
            rest = slash + tail
        path = unquote(rest)
    elif uri.startswith("/"):
        path = uri
    else:
        return None
    if not path.startswith("/") or "\x00" in path:
        return None
    trimmed = path.rstrip("/") or "/"
    if trimmed != "/" and not _clean(trimmed[1:].split("/")):
        return None
    return Location("file", "", posixpath.normpath(trimmed))


def _declarable(root: Location, store_root: Location) -> bool:
    """Whether ``root`` can bound deletions: never the filesystem root, never the store's own root
    (or a directory holding or inside it, as spelled or once links are resolved). A record declaring
    such a root declares nothing."""
    return not (root.scheme == "file" and root.path == "/") and not overlaps_resolved(root, store_root)


def resolved(location: Location) -> Location:
    """A local location with every link in its path resolved (``os.path.realpath``); others as they are."""
    if location.scheme != "file":
        return location
    return Location("file", "", os.path.realpath(location.path))


def overlaps_resolved(root: Location, other: Location) -> bool:
    """Whether two locations overlap as spelled or once resolved (a link above or at either may join them)."""
    return root.overlaps(other) or resolved(root).overlaps(resolved(other))


def anchor_of(uri: str, roots: Iterable[str | Location]) -> str | None:
    """The path of the most specific local root of ``roots`` that ``uri`` lies under (the directory below
    which nothing is followed), or None (not a local location, or under none of them)."""
    found = parse_location(uri)
    if found is None or found.scheme != "file":
        return None
    best: Location | None = None
    for root in roots:
        location = root if isinstance(root, Location) else parse_location(root)
        if location is None or not found.is_under(location):
            continue
        if best is None or len(location.path) > len(best.path):
            best = location
    return None if best is None else best.path


def symlink_on_path(path: str, anchor: str) -> str | None:
    """The first component of local ``path`` below ``anchor`` (``path`` itself included) that is a
    symbolic link, or None. A check made when deciding: the act opens the same components without
    following links (store/blobs/local.py)."""
    if path == anchor or not path.startswith(anchor.rstrip("/") + "/"):
        return None
    current = anchor.rstrip("/")
    for part in path[len(current) + 1 :].split("/"):
        current = f"{current}/{part}"
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            return None  # missing (or unreadable): nothing below it can be followed
        if stat.S_ISLNK(mode):
            return current
    return None


def symlink_refusal(location: Location, anchor: str | None, what: str = "") -> str | None:
    """Why ``location`` may not be acted on because a link lies between ``anchor`` and it, or None."""
    if location.scheme != "file" or anchor is None:
        return None
    link = symlink_on_path(location.path, anchor)
    if link is None:
        return None
    try:
        target = f" (to {os.readlink(link)})"
    except OSError:
        target = ""
    return (
        f"{what or location.uri} passes through the symbolic link {link}{target} under {file_uri(anchor)}: links "
        "under a store or output root are never followed"
    )


def _declarable_set(uris: Iterable[str], store_root: Location) -> set[Location]:
    return {p for p in (parse_location(r) for r in uris) if p is not None and _declarable(p, store_root)}


def binding_refusal(root: Location, store_root: Location) -> str | None:
    """Why ``root`` is not bound to the store (another scheme, or another bucket), or None."""
    if root.scheme != store_root.scheme:
        return (
            f"output root {root.uri} is not a {store_root.scheme}:// location like the store {store_root.uri}: "
            "a store's records never declare output on another filesystem"
        )
    if root.bucket != store_root.bucket:
        return f"output root {root.uri} is in bucket {root.bucket!r}, not in the store's bucket {store_root.bucket!r}"
    return None


def narrow(recorded: Iterable[Location], trusted: Iterable[Location]) -> set[Location]:
    """The parts of ``recorded`` roots that lie inside ``trusted`` ones: a recorded root under a
    trusted root, or a trusted root under a recorded one. Never anything outside ``trusted``."""
    trusted = list(trusted)
    kept: set[Location] = set()
    for root in recorded:
        for anchor in trusted:
            if root.is_under(anchor):
                kept.add(root)
            elif anchor.is_under(root):
                kept.add(anchor)
    return kept


def _clean(segments: list[str]) -> bool:
    return all(segment not in ("", ".", "..") for segment in segments)


@functools.lru_cache(maxsize=1 << 17)
def canonical_uri(uri: str) -> str:
    """``uri`` in the one form the store compares locations in (unchanged if it is not a location).

    Cached: a commit canonicalises each output path up to three times (the commit record, the listing,
    earlier commit records), 300,000 parses for a job of 100,000 files (docs/store-api.md, "Segments")."""
    found = parse_location(uri)
    return uri if found is None else found.uri


@dataclass(frozen=True)
class DeletionGuard:
    """What deletions of one store may touch: its own records, and output files under ``roots``.

    ``declared`` is False for stores written before output roots were declared (then
    ``roots`` holds only what a commit was explicitly given, or nothing). ``trusted``: the roots
    the store was opened with (the DAG's, or the command line's), None without. ``refused_roots``:
    roots the records declare that count for nothing (not bound to the store, or outside the
    trusted roots), each with why.
    """

    store_root: Location
    roots: tuple[Location, ...]
    declared: bool
    trusted: tuple[Location, ...] | None = None
    refused_roots: tuple[str, ...] = ()
    #: Who declares ``trusted`` (named in refusals): "output_roots of DAG task 'd.t'", "--output-root",
    #: "[ckpt] trusted_output_roots".
    trusted_by: str = "trusted_output_roots"
    #: ``trusted`` are configured roots: they bound what the records declare, never declare by themselves.
    bounds_only: bool = False

    @classmethod
    def build(
        cls,
        store_uri: str,
        roots: Iterable[str],
        *,
        declared: bool,
        trusted: Iterable[str] | None = None,
        explicit: Iterable[str] = (),
        explicit_counts: bool = False,
        trusted_by: str | None = None,
        configured: Iterable[str] | None = None,
    ) -> DeletionGuard:
        """The guard from the roots the store's records declare (``roots``), the roots the store was
        opened with (``trusted``) and a caller's own (``explicit``: a commit's ``output_roots``). The
        caller's roots vouch for recorded roots under them; they count by themselves only when
        ``explicit_counts`` (no epoch record declares a root).
        ``configured`` (only without ``trusted``): roots that bound what the records declare (see
        the module). ``trusted_by``: who declares ``trusted`` (or ``configured``), for messages."""
        store_root = parse_location(store_uri)
        if store_root is None:  # pragma: no cover - the store opened this URI, so it parses
            raise InvalidArgumentError(
                f"{store_uri!r} is not a store root this guard understands", reason="path_outside_root"
            )
        recorded = _declarable_set(roots, store_root)
        given = _declarable_set(explicit, store_root)
        refused: list[str] = []
        anchors: tuple[Location, ...] | None = None
        kept_roots: set[Location] = set()
        bounds_only = trusted is None and configured is not None
        who = trusted_by or ("configured_output_roots" if bounds_only else "trusted_output_roots")
        if trusted is not None or configured is not None:
            anchors = tuple(sorted(_declarable_set(trusted if trusted is not None else configured or (), store_root)))
            named = recorded | given if explicit_counts else recorded
            # Records (and a caller's roots) only narrow the trusted roots; declaring nothing narrows nothing
            # (the DAG's roots are then the declaration; configured roots never declare by themselves).
            kept_roots = narrow(named, anchors) if named or bounds_only else set(anchors)
            if anchors:
                refused.extend(
                    f"output root {r.uri} is outside the declared output roots ({who}: "
                    f"{', '.join(a.uri for a in anchors)})"
                    for r in sorted(recorded)
                    if not any(r.overlaps(a) for a in anchors)
                )
            else:  # the DAG declares nothing: every output file is kept; only forged-looking records are refused
                refused.extend(r for r in (binding_refusal(root, store_root) for root in sorted(recorded)) if r)
        else:
            for root in sorted(recorded):
                reason = binding_refusal(root, store_root)
                vouched = narrow([root], given)  # a caller's own roots (a commit's output_roots) vouch for it
                if reason is None:
                    kept_roots.add(root)
                elif vouched:
                    kept_roots |= vouched
                else:
                    refused.append(reason)
            if explicit_counts:
                kept_roots |= given
        if anchors:  # a recorded root reached through a link under the trusted root points anywhere
            for root in sorted(kept_roots):
                reason = symlink_refusal(root, anchor_of(root.uri, anchors), f"output root {root.uri}")
                if reason is not None:
                    kept_roots.discard(root)
                    refused.append(reason)
        # A root inside another root adds nothing (and would list, and delete, twice).
        kept = tuple(sorted(p for p in kept_roots if not any(p != o and p.is_under(o) for o in kept_roots)))
        return cls(store_root, kept, declared, anchors, tuple(refused), who, bounds_only)

    @property
    def root_uris(self) -> tuple[str, ...]:
        return tuple(r.uri for r in self.roots)

    @property
    def anchor_declares_nothing(self) -> bool:
        """The store was opened with an empty set of trusted roots (the DAG, or the person, declares
        no output root): every output file is kept, and said so (not a refused record)."""
        return self.trusted is not None and not self.trusted and not self.bounds_only

    @property
    def keeps_all_output(self) -> bool:
        """No output file may be deleted because nothing is declared: the anchor declares nothing,
        or no epoch of the store declares a root and no root was given."""
        return not self.roots and (self.anchor_declares_nothing or not self.declared)

    def refusal(self, uri: str) -> str | None:
        """Why ``uri`` may not be deleted as an output file, or None if it may."""
        found = parse_location(uri)
        if found is None:
            return f"{uri!r} is not a plain file:// or s3:// location (relative, another scheme, or '..' segments)"
        if found.is_under(self.store_root):
            return f"{found.uri} is inside the store root: store records are deleted by key, never as output"
        if not self.roots:
            if self.anchor_declares_nothing:
                return (
                    f"{found.uri}: no output root is declared ({self.trusted_by}: none), so no output file is deleted"
                )
            if self.bounds_only:
                return (
                    f"{found.uri}: no output root this store records lies under the configured ones "
                    f"({self.trusted_by}: {', '.join(a.uri for a in self.trusted or ())}), so no output file is deleted"
                )
            return (
                f"{found.uri}: this store declares no output root (no epoch declares one, and no "
                "commit output root was given), so no output file is deleted"
            )
        if not any(found.is_under(root) and found != root for root in self.roots):
            return f"{found.uri} is outside the declared output roots ({', '.join(self.root_uris)})"
        return symlink_refusal(found, self.anchor_of(found.uri))

    def anchor_of(self, uri: str) -> str | None:
        """The local directory below which nothing is followed when acting on ``uri``: the trusted root
        (the DAG's, as deployed) it lies under, or without trusted roots the declared root; None for
        an S3 location or one under no root. Open output locations with it (``StoreContext.output_store``)."""
        return anchor_of(uri, self.trusted if self.trusted else self.roots)

    def allows(self, uri: str) -> bool:
        return self.refusal(uri) is None

    def check(self, uri: str) -> None:
        """Raise :class:`InvalidArgumentError` (``path_outside_root``) unless ``uri`` may be deleted (or moved away)
        as output."""
        reason = self.refusal(uri)
        if reason is not None:
            raise InvalidArgumentError(f"refusing to delete {reason}. Nothing was deleted", reason="path_outside_root")

    def root_of(self, uri: str) -> str | None:
        """The declared root ``uri`` lies under (canonical), or None."""
        found = parse_location(uri)
        if found is None:
            return None
        for root in self.roots:
            if found.is_under(root) and found != root:
                return root.uri
        return None

    def sweep_roots(self, wanted: Iterable[str] | None) -> tuple[list[str], list[str]]:
        """The output roots a commit sweeps: every declared root, or those of ``wanted`` that lie
        under one (a caller may narrow, never widen). Returns (roots, refused roots)."""
        if wanted is None:
            return list(self.root_uris), []
        roots: list[str] = []
        refused: list[str] = []
        for uri in wanted:
            found = parse_location(uri)
            if found is not None and any(found.is_under(r) for r in self.roots):
                roots.append(found.uri)
            else:
                refused.append(uri)
        return roots, refused

    @staticmethod
    def check_store_key(key: str) -> str:
        """A store record's key: relative, under the root (:class:`InvalidArgumentError` (``path_outside_root``)
        otherwise)."""
        return check_key(key)


def name_marker_refusal(marker: object) -> str | None:
    """Why a name intent's marker cannot be used, or None."""
    if not isinstance(marker, str) or len(marker) < MIN_NAME_MARKER or "/" in marker:
        return (
            f"name marker {marker!r} is not a unique token of at least {MIN_NAME_MARKER} characters without "
            "'/': it could match other writers' files"
        )
    return None
