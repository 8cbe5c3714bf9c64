"""The local-disk object layer's own behaviour (the contract both backends share is in tests/store)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from airflow_ckpt_provider.store.blobs.base import BlobNotFoundError
from airflow_ckpt_provider.store.blobs.local import LocalBlobStore
from airflow_ckpt_provider.store.errors import RefusedError
from tests.support.errors import raises_reason


def test_interrupted_writes_of_named_keys_are_discarded(tmp_path: Path) -> None:
    """A writer killed before its rename leaves ``.{name}.tmp-{hex}``; only the named keys' temporaries go."""
    blobs = LocalBlobStore(tmp_path.as_uri())
    blobs.put("d/part-1.parquet", b"restored")
    mine = f".part-1.parquet.tmp-{uuid.uuid4().hex}"
    kept = [f".part-2.parquet.tmp-{uuid.uuid4().hex}", ".part-1.parquet.tmp-not-ours", ".part-1.parquet.lock"]
    for leftover in [mine, *kept]:
        (tmp_path / "d" / leftover).write_bytes(b"partial")

    assert blobs.discard_interrupted_writes(["d/part-1.parquet", "e/absent.parquet"]) == [f"d/{mine}"]
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == sorted([*kept, "part-1.parquet"])
    assert blobs.get("d/part-1.parquet")[0] == b"restored"  # the object itself stays
    assert blobs.discard_interrupted_writes(["d/part-1.parquet"]) == []  # idempotent


def test_no_call_follows_a_link_below_the_anchor(tmp_path: Path) -> None:
    """The writer's links under a root: a directory link anywhere between the anchor and a key, a link
    as the object itself, a link as a key's lock file. Nothing is read, written or deleted through
    them; listings leave them out; ``links()`` names them (docs/security.md, "Symbolic links")."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_bytes(b"precious")
    out = tmp_path / "out"
    (out / "day").mkdir(parents=True)
    (out / "day" / "link").symlink_to(victim, target_is_directory=True)
    (out / "day" / "file-link").symlink_to(victim / "precious.txt")
    (out / "day" / ".lock-link.json.lock").symlink_to(victim / "created-by-lock")
    (out / "day" / "own.txt").write_bytes(b"own")
    blobs = LocalBlobStore((out / "day").as_uri(), anchor=out.as_uri())

    for call in (
        lambda: blobs.get("link/precious.txt"),
        lambda: blobs.get("file-link"),
        lambda: blobs.put("link/planted.py", b"code"),
        lambda: blobs.put("lock-link.json", b"{}", if_match="0" * 32),
        lambda: blobs.delete_many(["link/precious.txt"]),
        lambda: blobs.copy_from(blobs, "link/precious.txt", "stolen.txt"),
        lambda: blobs.copy_from(blobs, "file-link", "stolen.txt"),
        lambda: LocalBlobStore((out / "day").as_uri()).copy_from(blobs, "own.txt", "link/planted.py", if_absent=True),
    ):
        with raises_reason(RefusedError, "symlink", match="never followed"):
            call()
    assert [i.key for i in blobs.list("")] == ["own.txt"]
    assert [i.key for i in blobs.list("link/")] == []
    assert blobs.list_dirs("") == [] and blobs.list_dirs("link/") == []
    assert not blobs.exists("link/precious.txt") and not blobs.exists("file-link")
    assert blobs.links("") == [
        (".lock-link.json.lock", str(victim / "created-by-lock")),
        ("file-link", str(victim / "precious.txt")),
        ("link", str(victim)),
    ]
    # A location whose own root is reached through a link below its anchor.
    through = LocalBlobStore((out / "day" / "link").as_uri(), anchor=out.as_uri())
    with raises_reason(RefusedError, "symlink"):
        through.get("precious.txt")
    assert list(through.list("")) == [] and through.links("") == [(str(out / "day" / "link"), str(victim))]
    # Replacing or deleting a link is safe: the link goes, never what it points to.
    blobs.put("file-link", b"mine now")
    assert (out / "day" / "file-link").read_bytes() == b"mine now" and not (out / "day" / "file-link").is_symlink()
    assert sorted(p.name for p in victim.iterdir()) == ["precious.txt"]
    assert (victim / "precious.txt").read_bytes() == b"precious"


def test_a_fifo_under_the_root_does_not_block_a_read(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path.as_uri())
    os.mkfifo(tmp_path / "manifest.json")
    with pytest.raises(BlobNotFoundError):
        blobs.get("manifest.json")  # without O_NONBLOCK this open waits for a writer for ever
    assert list(blobs.list("")) == []
