"""Benchmark: how the store's reads, epoch opening, commit and cleanup grow with the number of checkpoints.

For each backend (local disk; the SeaweedFS S3 server, started here) and each size N,
a fresh store is filled the way N Spark tasks fill it: per checkpoint an intent, one
output file (a few bytes, written to the output directory), its file metadata,
``keys_per_checkpoint`` keys and the seal. One attempt in a hundred fails before its
seal (intent and output file, no manifest), so the commit has orphans to delete.
While the tasks seal, a second store client compacts every two seconds, as the Spark
driver does while a job runs (``store.compact(min_loose=500, delete_retired=False)``,
then once more when the job ends); code without compaction skips that.

Then, each on a freshly opened store (no cache carried over):

* ``get_checkpointed_keys`` — what ``pending_files``/``skip_completed`` read at submit,
  next to the floor: the same keys read from one Parquet file on the same backend
  through the same object layer (best of two runs each);
* ``progress`` — what the operator logs before the submit and the UI/CLI show;
* ``begin_epoch`` — the operator opening the next epoch on the filled store;
* ``commit`` — ``CheckpointCommitOperator``'s phase 1 and 2 (orphans deleted);
* ``cleanup`` — the default retention policy ``delete_after_success``.

Requests are counted by the object layer (S3: HTTP requests by operation; local:
filesystem operations), the store's own and those on the output directory. The same
script measures the code of another checkout (``--label before`` from a worktree of
main before a change: it works with the store API of both).

    .venv/bin/python bench/store_scale.py [--local 1000,10000,100000] [--s3 1000,10000,100000] [--label after]
        [--s3-staged] [--skip commit,cleanup]
    .venv/bin/python bench/store_scale.py --merge run1.json run2.json --out bench/results/store_scale.json

``--s3-staged`` fills each S3 store on local disk (its output files on the S3 server), with the driver's
compaction beside the sealing tasks as in a real job, then copies the store's objects to the bucket with
parallel PUTs: the same objects a finished job leaves, without about 11 S3 round trips per checkpoint
during the fill (100,000 checkpoints would take hours here); the operations are then measured on S3.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import inspect
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_ckpt_provider.store import (  # noqa: E402
    CheckpointStore,
    EpochStatus,
    FileMetadata,
    RetentionPolicy,
    open_store,
)
from airflow_ckpt_provider.store.blobs.base import BlobStore  # noqa: E402

RESULTS = ROOT / "bench" / "results"
FAILED_EVERY = 100
#: The driver's compaction while the job runs: store.background_compaction()'s min_loose (spark/job/write_pipeline.py
#: runs it around each write), every 2 s rather than its 10 s, so that a fill of minutes compacts as a long job does.
COMPACT_EVERY_SECONDS = 2.0
COMPACT_MIN_LOOSE = 500
OPERATIONS = ("keys_read", "progress", "begin_epoch", "commit", "cleanup")


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _output_store(store: CheckpointStore, uri: str) -> BlobStore:
    """An output location through the store's object layer (before the store split: a private method)."""
    context = getattr(store, "context", None)
    if context is not None:
        return context.output_store(uri)  # type: ignore[no-any-return]
    return store._output_store(uri)  # type: ignore[attr-defined,no-any-return]


def _requests(store: CheckpointStore) -> tuple[int, collections.Counter[str]]:
    """Requests so far by the store's object layer and those of its output directories."""
    context = getattr(store, "context", None)
    outputs = context.opened_output_stores() if context is not None else list(store._output_blobs.values())  # type: ignore[attr-defined]
    layers = [store.blobs, *outputs]
    total = sum(int(b.request_count) for b in layers)
    by_op: collections.Counter[str] = collections.Counter()
    for blobs in layers:
        by_op.update(getattr(blobs, "requests_by_operation", {}) or {})
    return total, by_op


class DriverCompaction:
    """What the Spark driver does while tasks seal: compact every few seconds, and once at the end."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store
        self.enabled = hasattr(store, "compact")
        self.rounds = 0
        self.checkpoints = 0
        self.seconds = 0.0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DriverCompaction:
        if self.enabled:
            self._thread.start()
        return self

    def _once(self, min_loose: int) -> None:
        started = time.perf_counter()
        result = self.store.compact(min_loose=min_loose, delete_retired=False)  # type: ignore[attr-defined]
        self.seconds += time.perf_counter() - started
        self.rounds += 1
        self.checkpoints += result.checkpoints

    def _run(self) -> None:
        while not self._stop.wait(COMPACT_EVERY_SECONDS):
            try:
                self._once(COMPACT_MIN_LOOSE)
            except Exception as exc:  # best effort, as the driver's (a timeout under load is retried next round)
                self.failures += 1
                print(f"[store] compaction round failed (retried next round): {exc}", flush=True)

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join()
            try:
                self._once(1)
            except Exception as exc:  # the commit compacts what is left, as after a driver that died
                self.failures += 1
                print(f"[store] final compaction failed (the commit compacts the rest): {exc}", flush=True)


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
    """N sealed checkpoints (plus one failed attempt per ``FAILED_EVERY``) in one epoch that ends ``status``;
    the seconds it took (no compaction beside it: what other benchmarks build their stores with)."""
    return float(
        fill_compacting(store, None, output, checkpoints, keys, workers=workers, status=status, owner=owner)["seconds"]
    )


def _begin(store: CheckpointStore, owner: str, output: str) -> int:
    """Open an epoch declaring ``output`` as its output root (code before declared roots: without)."""
    if "output_roots" in inspect.signature(store.begin_epoch).parameters:
        return store.begin_epoch(owner=owner, output_roots=[output]).number
    return store.begin_epoch(owner=owner).number


def fill_compacting(
    store: CheckpointStore,
    compactor_store: CheckpointStore | None,
    output: str,
    checkpoints: int,
    keys: int,
    *,
    workers: int = 32,
    status: EpochStatus = EpochStatus.SUCCEEDED,
    owner: str = "bench",
) -> dict[str, Any]:
    """:func:`fill`, with ``compactor_store`` compacting beside the sealing tasks as the Spark driver does."""
    epoch = _begin(store, owner, output)
    out = _output_store(store, output)
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

    counted = compactor_store or store
    started = time.perf_counter()
    before, _ = _requests(counted)
    driver = DriverCompaction(compactor_store) if compactor_store is not None else contextlib.nullcontext(None)
    with driver as compaction, ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, range(checkpoints)))
    store.end_epoch(epoch, status=status)
    after, _ = _requests(counted)
    result: dict[str, Any] = {"seconds": time.perf_counter() - started}
    if compaction is not None:
        result |= {
            "compaction_rounds": compaction.rounds,
            "compacted_checkpoints": compaction.checkpoints,
            "compaction_seconds": compaction.seconds,
            "compaction_requests": after - before,
            "compaction_failures": compaction.failures,
        }
    return result


def _measure(opener: Callable[[], CheckpointStore], action: Callable[[CheckpointStore], Any]) -> dict[str, Any]:
    store = opener()
    before, before_ops = _requests(store)
    started = time.perf_counter()
    value = action(store)
    seconds = time.perf_counter() - started
    after, after_ops = _requests(store)
    store.close()
    requests = {"requests": after - before, "by_operation": dict(after_ops - before_ops)}
    return {"seconds": seconds, **requests, "value": value}


def _floor(store: CheckpointStore, output: str, total: int) -> dict[str, Any]:
    """Reading the same keys from one Parquet file on the same backend, through the same object layer."""
    blobs = _output_store(store, f"{output}-floor")
    sink = io.BytesIO()
    pq.write_table(pa.table({"key": pa.array(range(total), pa.int64())}), sink, compression="zstd")
    blobs.put("keys.parquet", sink.getvalue())
    runs = []
    for _ in range(2):
        started = time.perf_counter()
        table = pq.read_table(pa.BufferReader(blobs.get("keys.parquet")[0]))
        runs.append(time.perf_counter() - started)
        assert table.num_rows == total
    blobs.delete_many(["keys.parquet"])
    return {"seconds": min(runs), "bytes": len(sink.getvalue())}


def upload_tree(local_root: Path, uri: str, options: dict[str, Any], *, workers: int = 32) -> dict[str, Any]:
    """Copy every object of a store staged on local disk to ``uri`` (parallel plain PUTs, the same keys)."""
    from airflow_ckpt_provider.store.opener import open_blobs

    blobs = open_blobs(uri, **options)
    files = sorted(p for p in local_root.rglob("*") if p.is_file())
    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda p: blobs.put(p.relative_to(local_root).as_posix(), p.read_bytes()), files))
    seconds = time.perf_counter() - started
    requests = int(blobs.request_count)
    blobs.close()
    size = sum(p.stat().st_size for p in files)
    return {"objects": len(files), "bytes": size, "seconds": seconds, "requests": requests}


def measure(
    backend: str,
    uri: str,
    output: str,
    options: dict[str, Any],
    n: int,
    keys: int,
    *,
    stage: Path | None = None,
    skip: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """One size on one backend. ``stage``: fill a store on local disk at that path (its output files on
    ``output``, the driver's compaction beside the sealing tasks as usual), then copy its objects to ``uri``
    and measure there: the same objects a job leaves, without one S3 round trip per staged part. ``skip``:
    ``commit`` (and with it ``cleanup``, which needs the commit) or ``cleanup`` left unmeasured (the old code
    at sizes where one call takes tens of minutes); the row lists them under ``not_measured``."""

    def opener() -> CheckpointStore:
        return open_store(uri, **options)

    print(f"[store] {backend} {n:,} checkpoints: filling ... (load {load()})", flush=True)
    if stage is None:
        filler, compactor = opener(), opener()
    else:
        filler, compactor = (open_store(stage.as_uri(), **options) for _ in range(2))
    filled = fill_compacting(filler, compactor, output, n, keys)
    filler.close()
    compactor.close()
    if stage is not None:
        filled["staged_on_local_disk"] = True
        filled["upload"] = upload_tree(stage, uri, options)
        print(f"[store] {backend} {n:,}: staged store uploaded {filled['upload']}", flush=True)
    row: dict[str, Any] = {"backend": backend, "checkpoints": n, "keys": n * keys, "fill": filled, "load": load()}
    reads = [_measure(opener, lambda s: s.get_checkpointed_keys().num_rows) for _ in range(2)]
    row["keys_read"] = min(reads, key=lambda r: r["seconds"])
    row["floor"] = _floor(opener(), output, n * keys)
    row["progress"] = _measure(opener, lambda s: s.progress().valid_checkpoints)
    row["begin_epoch"] = _measure(opener, lambda s: len(s.begin_epoch(owner="bench-2").base))
    opener().end_epoch(2, status=EpochStatus.SUCCEEDED)
    if "commit" not in skip:
        row["commit"] = _measure(opener, lambda s: s.commit([output]).summary())
        assert row["commit"]["value"]["orphans_deleted"] == len(range(0, n, FAILED_EVERY)), row["commit"]["value"]
        if "cleanup" not in skip:
            row["cleanup"] = _measure(opener, lambda s: len(s.cleanup(RetentionPolicy.DELETE_AFTER_SUCCESS)))
    row["not_measured"] = [op for op in OPERATIONS if op not in row]
    assert row["keys_read"]["value"] == n * keys, row["keys_read"]
    assert row["progress"]["value"] == n, row["progress"]
    assert row["begin_epoch"]["value"] == n, row["begin_epoch"]
    print(
        f"[store] {backend} {n:,}: fill {filled['seconds']:.1f} s "
        f"(compaction {filled.get('compaction_seconds', 0):.1f} s, "
        f"{filled.get('compaction_requests', 0)} req) | "
        + " | ".join(f"{op} {row[op]['seconds']:.2f} s ({row[op]['requests']} req)" for op in OPERATIONS if op in row)
        + f" | floor {row['floor']['seconds']:.2f} s",
        flush=True,
    )
    return row


def _commit_of(root: Path) -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def run(
    local_sizes: list[int],
    s3_sizes: list[int],
    keys: int = 100,
    label: str = "after",
    on_row: Callable[[dict[str, Any]], None] = lambda result: None,
    *,
    s3_staged: bool = False,
    stage_dir: Path | None = None,
    skip: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Every size on each backend; ``on_row`` gets the result so far after each size (a long run keeps its rows)."""
    result: dict[str, Any] = {
        "label": label,
        "commit": _commit_of(ROOT),
        "load_start": load(),
        "keys_per_checkpoint": keys,
        "rows": [],
    }
    print(f"[store] {label} ({result['commit']}): load average at start: {result['load_start']}", flush=True)
    (ROOT / "bench" / "work").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ckpt-store-scale-", dir=ROOT / "bench" / "work") as tmp:
        for n in local_sizes:
            base = Path(tmp) / f"local-{n}"
            result["rows"].append(
                measure("local", f"file://{base}/store", f"file://{base}/out", {}, n, keys, skip=skip)
            )
            on_row(result)
        if s3_sizes:
            from ckpt_testkit.seaweed import SeaweedServer

            server = SeaweedServer(Path(tmp) / "seaweed")
            server.start()
            try:
                for n in s3_sizes:
                    bucket = server.create_bucket(f"scale-{n}")
                    stage_root = Path(stage_dir or tmp) / f"ckpt-store-scale-{uuid.uuid4().hex[:8]}-s3-{n}"
                    stage = stage_root / "store" if s3_staged else None
                    store_uri, output = f"s3://{bucket}/store", f"s3://{bucket}/out"
                    row = measure("s3", store_uri, output, server.options(), n, keys, stage=stage, skip=skip)
                    result["rows"].append(row)
                    if stage is not None:
                        shutil.rmtree(stage_root, ignore_errors=True)
                    on_row(result)
            finally:
                server.close()
    result["load_end"] = load()
    print(f"[store] load average at end: {result['load_end']}", flush=True)
    return result


def _sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from several runs of the same code: a later run's row replaces an earlier one of the
    same backend and size; each row keeps which run measured it (``run``, an index into ``runs``)."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    summaries = []
    for index, result in enumerate(runs):
        summaries.append({k: result.get(k) for k in ("label", "commit", "measured", "load_start", "load_end")})
        for row in result["rows"]:
            rows[(row["backend"], row["checkpoints"])] = {**row, "run": index}
    first = runs[0]
    return {
        "label": first["label"],
        "commit": "+".join(dict.fromkeys(str(r.get("commit")) for r in runs)),
        "keys_per_checkpoint": first["keys_per_checkpoint"],
        "load_start": first.get("load_start"),
        "load_end": runs[-1].get("load_end"),
        "measured": runs[-1].get("measured"),
        "runs": summaries,
        "rows": sorted(rows.values(), key=lambda r: (r["backend"] != "local", r["checkpoints"])),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local", default="1000,10000,100000", help="checkpoint counts on local disk")
    parser.add_argument("--s3", default="1000,10000,100000", help="checkpoint counts on the S3 server")
    parser.add_argument("--keys", type=int, default=100, help="keys per checkpoint")
    parser.add_argument("--label", default="after", help="'after' (this code) or 'before' (a checkout of main)")
    parser.add_argument("--out", type=Path, default=None, help="default: bench/results/store_scale[-LABEL].json")
    parser.add_argument(
        "--s3-staged",
        action="store_true",
        help="fill each S3 store on local disk (output files on S3), then copy its objects to the bucket",
    )
    parser.add_argument(
        "--stage-dir",
        type=Path,
        default=None,
        help="where --s3-staged stages (default: the run's temp dir; /dev/shm spares the local disk's fsyncs)",
    )
    parser.add_argument("--skip", default="", help="operations left unmeasured: commit (and cleanup), cleanup")
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        default=None,
        help="measure nothing: merge these result files (later rows replace earlier ones) into --out",
    )
    args = parser.parse_args()
    if args.merge:
        if args.out is None:
            parser.error("--merge needs --out")
        merged = merge([json.loads(p.read_text()) for p in args.merge])
        args.out.write_text(json.dumps(merged, indent=1, default=str))
        print(f"wrote {args.out}")
        return 0
    skip = frozenset(x.strip() for x in args.skip.split(",") if x.strip())
    if not skip <= {"commit", "cleanup"}:
        parser.error(f"--skip takes commit and/or cleanup, not {sorted(skip)}")
    out = args.out or RESULTS / ("store_scale.json" if args.label == "after" else f"store_scale-{args.label}.json")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out.parent.mkdir(parents=True, exist_ok=True)

    def write(result: dict[str, Any]) -> None:
        result["measured"] = {"date": started, "commit": result["commit"]}
        out.write_text(json.dumps(result, indent=1, default=str))

    sizes = _sizes(args.local), _sizes(args.s3)
    result = run(
        *sizes, args.keys, args.label, on_row=write, s3_staged=args.s3_staged, stage_dir=args.stage_dir, skip=skip
    )
    write(result)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
