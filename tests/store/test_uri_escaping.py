"""A local path becomes a URI one way only, and that URI names the same path again.

Paths may hold '#', '?', '%', spaces and non-ASCII letters; none of them may make two
stores (or two output files) share a name, or make a URI name another directory.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from airflow_ckpt_provider.store import open_store

ODD_NAMES = ["store#2", "store?x=1", "a%2Fb", "with space", "\u00fcml\u00e4ut \u6f22", "100%", "h=1,c:2~"]


@pytest.mark.parametrize("name", ODD_NAMES)
def test_the_store_uri_round_trips_to_the_same_directory(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    store = open_store(str(path))
    assert Path(unquote(urlsplit(store.uri).path)) == path  # any URI parser reads it back
    assert open_store(store.uri).blobs.uri == store.uri
    assert open_store(path.as_uri()).blobs.uri == store.uri  # the escaped form from elsewhere is the same store


def test_a_slash_escape_and_a_slash_are_different_stores(tmp_path: Path) -> None:
    escaped = open_store(str(tmp_path / "a%2Fb"))
    nested = open_store(str(tmp_path / "a" / "b"))
    assert escaped.uri != nested.uri
    escaped.epochs.begin(owner="x")
    assert nested.epochs.current() is None
    assert (tmp_path / "a%2Fb" / "epochs").is_dir() and not (tmp_path / "a").exists()
