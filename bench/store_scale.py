"""Benchmark: how the store's reads, commit and cleanup grow with the number of checkpoints.

For each backend (local disk; the SeaweedFS S3 server, started here) and each size N,
a fresh store is filled the way N Spark tasks fill it: per checkpoint an intent, one
output file (a few bytes, written to the output directory), its file metadata,
``keys_per_checkpoint`` keys and the seal. One attempt in a hundred fails before its
seal (intent and output file, no manifest), so the commit has orphans to delete.
Then, each on a freshly opened store (no cache carried over):

* ``get_checkpointed_keys`` — what ``pending_files``/``skip_completed`` read at submit;
* ``progress`` — what the operator logs before the submit and the UI shows;
* ``commit`` — ``CheckpointCommitOperator``'s phase 1 and 2 (orphans deleted);
* ``cleanup`` — the default retention policy ``delete_after_success``.

Requests are counted by the object layer (S3: HTTP requests by operation; local:
filesystem operations), the store's own and those on the output directory.

    .venv/bin/python bench/store_scale.py [--local 1000,10000,100000] [--s3 1000,10000]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_ckpt_provider.store import (  # noqa: E402
    CheckpointStore,
    EpochStatus,
    FileMetadata,
    RetentionPolicy,
    open_store,
)

RESULTS = ROOT / "bench" / "results"
FAILED_EVERY = 100


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _requests(store: CheckpointStore) -> tuple[int, collections.Counter[str]]:
    """Requests so far by the store's object layer and those of its output directories."""
    layers = [store.blobs, *store.context.opened_output_stores()]
    total = sum(int(b.request_count) for b in layers)
    by_op: collections.Counter[str] = collections.Counter()
    for blobs in layers:
        by_op.update(getattr(blobs, "requests_by_operation", {}) or {})
    return total, by_op


def fill(
    store: CheckpointStore,
    output: str,
    checkpoints: int,
    keys: int,
    *,
    workers: int = 32,
    status: EpochStatus = EpochStatus.SUCCEEDED,
    owner: str = "bench",
) -> float:
    """N sealed checkpoints (plus one failed attempt per ``FAILED_EVERY``) in one epoch that ends ``status``."""
    epoch = store.begin_epoch(owner=owner, output_roots=[output]).number
    out = store.context.output_store(output)
    payload = b"PAR1" + b"\0" * 60 + b"PAR1"  # a few bytes: the store never reads output files

    def one(index: int) -> None:
        attempts = 2 if index % FAILED_EVERY == 0 else 1
        for attempt in range(attempts):
            checkpoint_id = str(uuid.uuid4())
            name = f"part-{index:06d}-a{attempt}-{checkpoint_id[:8]}.parquet"
            store.record_intent(checkpoint_id, [f"{out.uri}/{name}"], epoch=epoch)
            out.put(name, payload)
            if attempt + 1 < attempts:
                continue  # the failed attempt: its file stays, its checkpoint is never sealed
            store.stage_files(checkpoint_id, [FileMetadata(f"{out.uri}/{name}", len(payload), keys, "parquet")])
            store.stage_keys(checkpoint_id, pa.array(range(index * keys, (index + 1) * keys), pa.int64()))
            store.checkpoint(checkpoint_id, epoch=epoch, partition=index)

    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, range(checkpoints)))
    store.end_epoch(epoch, status=status)
    return time.perf_counter() - started


def _measure(opener: Callable[[], CheckpointStore], action: Callable[[CheckpointStore], Any]) -> dict[str, Any]:
    store = opener()
    before, before_ops = _requests(store)
    started = time.perf_counter()
    value = action(store)
    seconds = time.perf_counter() - started
    after, after_ops = _requests(store)
    store.close()
    return {
        "seconds": seconds,
        "requests": after - before,
        "by_operation": dict(after_ops - before_ops),
        "value": value,
    }


def measure(backend: str, uri: str, output: str, options: dict[str, Any], n: int, keys: int) -> dict[str, Any]:
    def opener() -> CheckpointStore:
        return open_store(uri, **options)

    print(f"[store] {backend} {n:,} checkpoints: filling ...", flush=True)
    filler = opener()
    fill_seconds = fill(filler, output, n, keys)
    filler.close()
    row: dict[str, Any] = {"backend": backend, "checkpoints": n, "keys": n * keys, "fill_seconds": fill_seconds}
    row["keys_read"] = _measure(opener, lambda s: s.get_checkpointed_keys().num_rows)
    row["progress"] = _measure(opener, lambda s: s.progress().valid_checkpoints)
    row["commit"] = _measure(opener, lambda s: s.commit([output]).summary())
    row["cleanup"] = _measure(opener, lambda s: len(s.cleanup(RetentionPolicy.DELETE_AFTER_SUCCESS)))
    assert row["keys_read"]["value"] == n * keys, row["keys_read"]
    assert row["commit"]["value"]["orphans_deleted"] == len(range(0, n, FAILED_EVERY)), row["commit"]["value"]
    print(
        f"[store] {backend} {n:,}: fill {fill_seconds:.1f} s | keys {row['keys_read']['seconds']:.2f} s "
        f"({row['keys_read']['requests']} req) | progress {row['progress']['seconds']:.2f} s | commit "
        f"{row['commit']['seconds']:.2f} s ({row['commit']['requests']} req) | cleanup "
        f"{row['cleanup']['seconds']:.2f} s ({row['cleanup']['requests']} req)",
        flush=True,
    )
    return row


def run(local_sizes: list[int], s3_sizes: list[int], keys: int = 100) -> dict[str, Any]:
    result: dict[str, Any] = {"load_start": load(), "keys_per_checkpoint": keys, "rows": []}
    print(f"[store] load average at start: {result['load_start']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="ckpt-store-scale-", dir=ROOT / "bench" / "work") as tmp:
        for n in local_sizes:
            base = Path(tmp) / f"local-{n}"
            result["rows"].append(measure("local", f"file://{base}/store", f"file://{base}/out", {}, n, keys))
        if s3_sizes:
            from ckpt_testkit.seaweed import SeaweedServer

            server = SeaweedServer(Path(tmp) / "seaweed")
            server.start()
            try:
                for n in s3_sizes:
                    bucket = server.create_bucket(f"scale-{n}")
                    result["rows"].append(
                        measure("s3", f"s3://{bucket}/store", f"s3://{bucket}/out", server.options(), n, keys)
                    )
            finally:
                server.close()
    result["load_end"] = load()
    print(f"[store] load average at end: {result['load_end']}", flush=True)
    return result


def _sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local", default="1000,10000,100000", help="checkpoint counts on local disk")
    parser.add_argument("--s3", default="1000,10000", help="checkpoint counts on the S3 server")
    parser.add_argument("--keys", type=int, default=100, help="keys per checkpoint")
    parser.add_argument("--out", type=Path, default=RESULTS / "store_scale.json")
    args = parser.parse_args()
    (ROOT / "bench" / "work").mkdir(parents=True, exist_ok=True)
    result = run(_sizes(args.local), _sizes(args.s3), args.keys)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
