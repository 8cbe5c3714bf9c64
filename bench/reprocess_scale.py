"""Benchmark: what reprocess, undo and rewind cost as a store grows, against its own commit.

For each backend (local disk; the SeaweedFS S3 server, started here) and each size N, a store
is filled as N Spark tasks fill it (bench/store_scale.py's ``fill``: one output file and
``keys`` int64 keys per checkpoint), committed and compacted with ``retain`` — the baseline,
measured in the same run on the same store. Then, each on a freshly opened store:

* ``preview`` — the dry run of a reprocess by 3 keys (reads the snapshot's keys once, the
  lineage of one commit, one listing per output directory);
* ``reprocess`` — the same reprocess (3 checkpoints pending, 3 files to the quarantine);
* ``undo`` — back as before;
* ``rewind`` — to commit 0: all N checkpoints pending, all N files to the quarantine.

Requests are counted by the object layer (store and output directories). Times are ratios to the
commit + retain cleanup of the same store, so a busy machine shifts both.

    .venv/bin/python bench/reprocess_scale.py [--local 1000,10000] [--s3 1000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_ckpt_provider.store import CheckpointStore, RetentionPolicy, Selection, open_store  # noqa: E402
from bench import quiet  # noqa: E402
from bench.store_scale import _measure, fill, load  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def measure(backend: str, uri: str, output: str, options: dict[str, Any], n: int, keys: int) -> dict[str, Any]:
    def opener() -> CheckpointStore:
        return open_store(uri, **options)

    print(f"[reprocess] {backend} {n:,} checkpoints: filling ...", flush=True)
    filler = opener()
    fill(filler, output, n, keys)
    filler.close()
    chosen = Selection(keys=[5, (n // 2) * keys + 1, n * keys - 1])  # 3 keys in 3 checkpoints
    row: dict[str, Any] = {"backend": backend, "checkpoints": n, "keys": n * keys}
    row["commit_and_retain"] = _measure(
        opener,
        lambda s: (
            s.commit([output]).summary()["files_committed"],
            len(s.housekeeping.cleanup(RetentionPolicy.RETAIN)),
        ),
    )
    row["preview"] = _measure(opener, lambda s: len(s.reprocessing.preview(chosen).files))
    row["reprocess"] = _measure(opener, lambda s: len(s.reprocessing.run(chosen).moved))
    row["undo"] = _measure(opener, lambda s: len(s.reprocessing.undo().restored))
    row["rewind"] = _measure(opener, lambda s: len(s.reprocessing.rewind(0).moved))
    assert row["preview"]["value"] == row["reprocess"]["value"] == row["undo"]["value"] == 3, row
    assert row["rewind"]["value"] == n, row["rewind"]
    base = row["commit_and_retain"]["seconds"]
    cells = " | ".join(
        f"{name} {row[name]['seconds']:.2f} s ({row[name]['seconds'] / base:.2f}x, {row[name]['requests']} req)"
        for name in ("preview", "reprocess", "undo", "rewind")
    )
    commit_requests = row["commit_and_retain"]["requests"]
    print(f"[reprocess] {backend} {n:,}: commit+retain {base:.2f} s ({commit_requests} req) | {cells}", flush=True)
    return row


def run(local_sizes: list[int], s3_sizes: list[int], keys: int) -> dict[str, Any]:
    result: dict[str, Any] = {"load_start": load(), "keys_per_checkpoint": keys, "rows": []}
    (ROOT / "bench" / "work").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ckpt-reprocess-scale-", dir=ROOT / "bench" / "work") as tmp:
        for n in local_sizes:
            base = Path(tmp) / f"local-{n}"
            result["rows"].append(measure("local", f"file://{base}/store", f"file://{base}/out", {}, n, keys))
        if s3_sizes:
            from ckpt_testkit.seaweed import SeaweedServer

            server = SeaweedServer(Path(tmp) / "seaweed")
            server.start()
            try:
                for n in s3_sizes:
                    bucket = server.create_bucket(f"reprocess-{n}")
                    result["rows"].append(
                        measure("s3", f"s3://{bucket}/store", f"s3://{bucket}/out", server.options(), n, keys)
                    )
            finally:
                server.close()
    result["load_end"] = load()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local", default="1000,10000", help="checkpoint counts on local disk")
    parser.add_argument("--s3", default="1000", help="checkpoint counts on the S3 server")
    parser.add_argument("--keys", type=int, default=100, help="keys per checkpoint")
    parser.add_argument("--out", type=Path, default=RESULTS / "reprocess_scale.json")
    quiet.add_argument(parser)
    args = parser.parse_args()
    machine = quiet.gate(args)
    sizes = [[int(x) for x in text.split(",") if x.strip()] for text in (args.local, args.s3)]
    result = run(sizes[0], sizes[1], args.keys)
    machine.finish()
    result["machine"] = machine.record()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str))
    print(f"load {result['load_start']} -> {result['load_end']}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
