"""Benchmark: reading every done key of a big store, before and after `retain` compaction.

A store with N checkpoints of K keys each (default 10,000 x 1,000 = 10M keys), on
local disk and on a real S3 server (SeaweedFS, started here). The floor, measured
in the same run on the same backend: reading the same keys from one Parquet file.

    .venv/bin/python bench/store_keys.py [--checkpoints 10000] [--keys 1000] [--backends local,s3]

Targets: after compaction within 2x of the floor, and a handful of
requests per read.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_ckpt_provider.store import CheckpointStore, EpochStatus, RetentionPolicy, open_store
from bench import quiet


def timed(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    """Best of ``repeat`` wall-clock times (the result of the last call)."""
    best = float("inf")
    result: Any = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def fill(store: CheckpointStore, checkpoints: int, keys: int) -> float:
    epoch = store.epochs.begin(owner="bench")
    start = time.perf_counter()

    def one(index: int) -> None:
        checkpoint_id = str(uuid.uuid4())
        base = index * keys
        store.stage_keys(checkpoint_id, pa.array(range(base, base + keys), pa.int64()))
        store.checkpoint(checkpoint_id, epoch=epoch.number, partition=index)

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(one, range(checkpoints)))
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    return time.perf_counter() - start


def run(name: str, uri: str, options: dict[str, Any], checkpoints: int, keys: int) -> list[dict[str, Any]]:
    store = open_store(uri, max_workers=32, **options)
    total = checkpoints * keys
    print(f"[{name}] writing {checkpoints:,} checkpoints x {keys:,} keys ...", flush=True)
    fill_seconds = fill(store, checkpoints, keys)

    # Floor: the same keys in one Parquet file on the same backend, read through the same object layer.
    floor_blobs = store.context.output_store(f"{uri}-floor")
    sink = io.BytesIO()
    pq.write_table(pa.table({"key": pa.array(range(total), pa.int64())}), sink, compression="zstd")
    floor_blobs.put("keys.parquet", sink.getvalue())
    floor_seconds, floor_table = timed(lambda: pq.read_table(pa.BufferReader(floor_blobs.get("keys.parquet")[0])))
    assert floor_table.num_rows == total

    def read() -> pa.Table:
        return store.get_checkpointed_keys()

    rows: list[dict[str, Any]] = []
    before = store.blobs.request_count
    seconds, table = timed(read, repeat=2)
    requests = (store.blobs.request_count - before) // 2
    assert table.num_rows == total, table.num_rows
    rows.append(
        {
            "backend": name,
            "phase": f"{checkpoints:,} checkpoints",
            "seconds": seconds,
            "floor_seconds": floor_seconds,
            "requests": requests,
        }
    )

    start = time.perf_counter()
    store.commit([f"{uri}-out"])
    commit_seconds = time.perf_counter() - start
    start = time.perf_counter()
    store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    compact_seconds = time.perf_counter() - start

    before = store.blobs.request_count
    seconds, table = timed(read)
    requests = (store.blobs.request_count - before) // 3
    assert table.num_rows == total
    rows.append(
        {
            "backend": name,
            "phase": "after retain compaction",
            "seconds": seconds,
            "floor_seconds": floor_seconds,
            "requests": requests,
        }
    )
    print(
        f"[{name}] fill {fill_seconds:.1f}s, commit {commit_seconds:.1f}s, compaction {compact_seconds:.1f}s",
        flush=True,
    )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--backends", default="local,s3")
    quiet.add_argument(parser)
    args = parser.parse_args()
    machine = quiet.gate(args)

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-") as tmp:
        for backend in args.backends.split(","):
            if backend == "local":
                rows += run("local", f"file://{tmp}/store", {}, args.checkpoints, args.keys)
            elif backend == "s3":
                from ckpt_testkit.seaweed import SeaweedServer

                server = SeaweedServer(Path(tmp) / "seaweed")
                server.start()
                try:
                    server.create_bucket("bench")
                    rows += run("s3", "s3://bench/store", server.options(), args.checkpoints, args.keys)
                finally:
                    server.stop()
            else:
                parser.error(f"unknown backend {backend}")

    print()
    print("| backend | store state | get_checkpointed_keys | floor (1 Parquet file) | ratio | requests/read |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        ratio = row["seconds"] / row["floor_seconds"]
        print(
            f"| {row['backend']} | {row['phase']} | {row['seconds']:.3f} s | {row['floor_seconds']:.3f} s "
            f"| {ratio:.2f}x | {row['requests']:,} |"
        )
    compacted = [r for r in rows if r["phase"].startswith("after")]
    met = all(r["seconds"] / r["floor_seconds"] <= 2.0 and r["requests"] <= 10 for r in compacted)
    print(f"\ntarget (after compaction: <= 2x floor, <= 10 requests/read): {'MET' if met else 'NOT MET'}")
    machine.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
