"""The local-disk object layer's own behaviour (the contract both backends share is in tests/store)."""

from __future__ import annotations

import uuid
from pathlib import Path

from airflow_ckpt_provider.store.blobs.local import LocalBlobStore


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
