"""Benchmark: how the store's reads, epoch opening, commit and cleanup grow with the number of checkpoints.

For each backend (local disk; the SeaweedFS S3 server, started here) and each size N,
a fresh store is filled the way N Spark tasks fill it: per checkpoint an intent, one
output file (a few bytes, written to the output directory), its file metadata,
``keys_per_checkpoint`` keys and the seal. One attempt in a hundred fails before its
seal (intent and output file, no manifest), so the commit has orphans to delete.
While the tasks seal, a second store client compacts every two seconds, as the Spark
driver does while a job runs (``store.housekeeping.compact(min_loose=500, delete_retired=False)``,
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

``--tail`` measures a store whose compaction fell behind (the driver that was
compacting was killed), instead of the table above:

* ``--sizes`` (default 2000,20000) checkpoints sealed through the public API (100 keys and one file
  each, one epoch, no driver compaction), then on a freshly opened store each: ``get_checkpointed_keys``,
  ``progress``, ``begin_epoch`` (the resume; it folds at most ``submit_fold_limit``) and ``commit([])``,
  requests counted beside each time, and the growth from the smallest size to the largest. Two stores per
  size: ``bounded`` (the default bound: sealing tasks fold batches, the only store a user can configure)
  and ``folds-failing`` (the degraded case: every sealer's fold fails, a failpoint, so every manifest stays
  loose; measured for what it costs, no target);
* ``--concurrent`` (default 100000) checkpoints sealed by ``--sealers`` (32) threads, each with its own
  store client (as 32 executors), no driver: the loose tail's maximum (a watcher lists ``checkpoints/``
  every half second, and each client's own counts) against the bound.

    .venv/bin/python bench/store_scale.py --tail [--sizes 2000,20000] [--concurrent 100000] [--sealers 32]
        [--backends local,s3] [--variants bounded,folds-failing] [--s3-staged] [--allow-noisy]
        [--out bench/results/store_tail.json]

Every mode refuses to run when the 1-minute load average at its start is above 1.5 (bench/quiet.py),
unless ``--allow-noisy`` (then every line printed is marked noisy); the load at start and end is recorded.

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
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_ckpt_provider import failpoints  # noqa: E402
from airflow_ckpt_provider.store import (  # noqa: E402
    CheckpointStore,
    EpochStatus,
    FileMetadata,
    RetentionPolicy,
    open_store,
)
from airflow_ckpt_provider.store.blobs.base import BlobStore  # noqa: E402
from bench import quiet  # noqa: E402

RESULTS = ROOT / "bench" / "results"
FAILED_EVERY = 100
#: The driver's compaction while the job runs: store.housekeeping.background_compaction()'s min_loose
#: (spark/job/write_pipeline.py runs it around each write), every 2 s rather than its 10 s, so that a
#: fill of minutes compacts as a long job does.
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
        self.enabled = hasattr(store, "housekeeping")
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
        result = self.store.housekeeping.compact(min_loose=min_loose, delete_retired=False)  # type: ignore[attr-defined]
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
    if "output_roots" in inspect.signature(store.epochs.begin).parameters:
        return store.epochs.begin(owner=owner, output_roots=[output]).number
    return store.epochs.begin(owner=owner).number


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
    store.epochs.end(epoch, status=status)
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
    row["progress"] = _measure(opener, lambda s: s.inspection.progress().valid_checkpoints)
    row["begin_epoch"] = _measure(opener, lambda s: len(s.epochs.begin(owner="bench-2").base))
    opener().epochs.end(2, status=EpochStatus.SUCCEEDED)
    if "commit" not in skip:
        row["commit"] = _measure(opener, lambda s: s.commit([output]).summary())
        assert row["commit"]["value"]["orphans_deleted"] == len(range(0, n, FAILED_EVERY)), row["commit"]["value"]
        if "cleanup" not in skip:
            row["cleanup"] = _measure(
                opener, lambda s: len(s.housekeeping.cleanup(RetentionPolicy.DELETE_AFTER_SUCCESS))
            )
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


# ---------------------------------------------------------------------- --tail: compaction fell behind

TAIL_OPERATIONS = ("keys_read", "progress", "begin_epoch", "commit")
TAIL_VARIANTS = ("bounded", "folds-failing")
#: The failpoint that makes every sealer's fold fail (the folds-failing variant).
FOLD_FAILPOINT = "store.tail.before_fold"
#: Targets for a store whose compaction fell behind: with 20,000 sealed checkpoints, begin_epoch <= 3 s
#: local and <= 10 s on S3, keys <= 2 s local; growth from 2,000 to 20,000 <= 4x for every read. They
#: apply to the bounded store; folds-failing is the degraded case, reported without a verdict.
TAIL_TARGETS = {("local", "begin_epoch"): 3.0, ("s3", "begin_epoch"): 10.0, ("local", "keys_read"): 2.0}
TAIL_MAX_GROWTH = 4.0


def seal_plain(store: CheckpointStore, output: str, checkpoints: int, keys: int, *, workers: int = 32) -> float:
    """``checkpoints`` sealed through the public API in one epoch (100 keys and one file metadata each, as the
    issue measured; no output file, no driver compaction); the epoch ends succeeded. Returns the seconds."""
    epoch = _begin(store, "bench", output)

    def one(index: int) -> None:
        checkpoint_id = str(uuid.uuid4())
        store.stage_keys(checkpoint_id, pa.array(range(index * keys, (index + 1) * keys), pa.int64()))
        store.stage_files(checkpoint_id, [FileMetadata(f"{output}/part-{index:06d}.parquet", 100, keys, "parquet")])
        store.checkpoint(checkpoint_id, epoch=epoch, partition=index)

    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, range(checkpoints)))
    store.epochs.end(epoch, status=EpochStatus.SUCCEEDED)
    return time.perf_counter() - started


def loose_now(store: CheckpointStore) -> int:
    return len(store.blobs.list_dirs("checkpoints/"))


def tail_reads(
    backend: str,
    uri: str,
    output: str,
    options: dict[str, Any],
    n: int,
    keys: int,
    variant: str,
    stage: Path | None,
    max_loose: int | None = None,
) -> dict[str, Any]:
    """One store of ``n`` sealed checkpoints (``variant``: bounded, or folds-failing: every fold of the
    sealers fails), then each read on a freshly opened store."""
    bound = {"max_loose_manifests": max_loose}
    # A staged fill's store is on local disk and its output on the S3 server: the bench vouches for that root.
    trusted = {"trusted_output_roots": [output]} if stage is not None else {}
    filler = open_store(stage.as_uri() if stage is not None else uri, **options, **bound, **trusted)
    print(f"[tail] {backend} {variant} {n:,}: sealing ... ({quiet.sample().describe()})", flush=True)
    row: dict[str, Any] = {"backend": backend, "variant": variant, "checkpoints": n, "keys": n * keys}
    if variant == "folds-failing":
        failpoints.enable(FOLD_FAILPOINT, kind="raise", hit=None)
        logging.getLogger("airflow_ckpt_provider.store.tail").setLevel(logging.ERROR)  # a warning per fold
    try:
        row["fill_seconds"] = seal_plain(filler, output, n, keys)
    finally:
        failpoints.disable_all()
    row["fill_folds"] = filler.loose_tail.folds
    filler.close()
    if stage is not None:
        row["upload"] = upload_tree(stage, uri, options)

    def opener() -> CheckpointStore:
        return open_store(uri, **options)

    row["loose_before"] = loose_now(opener())
    row["keys_read"] = _measure(opener, lambda s: s.get_checkpointed_keys().num_rows)
    row["progress"] = _measure(opener, lambda s: s.inspection.progress().valid_checkpoints)
    row["begin_epoch"] = _measure(opener, lambda s: len(s.epochs.begin(owner="resume", takeover=True).base))
    row["loose_after_begin"] = loose_now(opener())
    opener().epochs.end(2, status=EpochStatus.SUCCEEDED)
    row["commit"] = _measure(opener, lambda s: len(s.commit([]).committed_checkpoints))
    for op in ("keys_read",):
        assert row[op]["value"] == n * keys, row[op]
    for op in ("progress", "begin_epoch", "commit"):
        assert row[op]["value"] == n, (op, row[op])
    print(
        f"[tail] {backend} {variant} {n:,}: {row['loose_before']:,} loose | "
        + " | ".join(f"{op} {row[op]['seconds']:.2f} s ({row[op]['requests']:,} req)" for op in TAIL_OPERATIONS),
        flush=True,
    )
    return row


def concurrent_seal(
    backend: str,
    uri: str,
    output: str,
    options: dict[str, Any],
    n: int,
    keys: int,
    sealers: int,
    max_loose: int | None = None,
) -> dict[str, Any]:
    """``n`` checkpoints sealed by ``sealers`` threads, each with its own store client (its own loose tail, as
    one executor each), no driver compacting: the loose tail's maximum against the bound."""
    clients = [open_store(uri, **options, max_loose_manifests=max_loose) for _ in range(sealers)]
    bound = clients[0].loose_tail.max_loose
    epoch = _begin(clients[0], "bench", output)
    watcher_store = open_store(uri, **options)
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.5):
            seen.append(loose_now(watcher_store))

    def sealer(index: int) -> None:
        store = clients[index]
        for task in range(index, n, sealers):
            checkpoint_id = str(uuid.uuid4())
            store.stage_keys(checkpoint_id, pa.array(range(task * keys, (task + 1) * keys), pa.int64()))
            store.stage_files(checkpoint_id, [FileMetadata(f"{output}/part-{task:06d}.parquet", 100, keys, "parquet")])
            store.checkpoint(checkpoint_id, epoch=epoch, partition=task)

    print(f"[tail] {backend} {n:,} by {sealers} sealers: sealing ... ({quiet.sample().describe()})", flush=True)
    before = sum(c.blobs.request_count for c in clients)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.perf_counter()
    try:
        with ThreadPoolExecutor(sealers) as pool:
            list(pool.map(sealer, range(sealers)))
    finally:
        stop.set()
        watcher.join()
    seconds = time.perf_counter() - started
    requests = sum(c.blobs.request_count for c in clients) - before
    tail_max = max([*seen, *(c.loose_tail.max_seen for c in clients), 0])
    row = {
        "backend": backend,
        "checkpoints": n,
        "sealers": sealers,
        "bound": bound,
        "seconds": seconds,
        "requests": requests,
        "requests_per_checkpoint": requests / max(n, 1),
        "tail_max": tail_max,
        "tail_samples": len(seen),
        "loose_at_end": loose_now(watcher_store),
        "folds": sum(c.loose_tail.folds for c in clients),
        "folded": sum(c.loose_tail.folded for c in clients),
        "lost_races": sum(c.loose_tail.lost_races for c in clients),
    }
    progress = open_store(uri, **options).inspection.progress()
    assert progress.valid_checkpoints == n, progress
    print(
        f"[tail] {backend} {n:,} by {sealers}: {seconds:.1f} s, {requests:,} req ({row['requests_per_checkpoint']:.1f}"
        f"/checkpoint), loose tail max {tail_max:,} (bound {bound:,}), {row['folds']} folds "
        f"({row['lost_races']} lost a race)",
        flush=True,
    )
    return row


def tail_growth(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each backend and variant: time and requests at the largest size over the smallest."""
    out = []
    keys = sorted({(r["backend"], r["variant"]) for r in rows})
    for backend, variant in keys:
        sized = sorted(
            (r for r in rows if (r["backend"], r["variant"]) == (backend, variant)), key=lambda r: r["checkpoints"]
        )
        if len(sized) < 2:
            continue
        small, big = sized[0], sized[-1]
        for op in TAIL_OPERATIONS:
            out.append(
                {
                    "backend": backend,
                    "variant": variant,
                    "operation": op,
                    "from": small["checkpoints"],
                    "to": big["checkpoints"],
                    "time_growth": big[op]["seconds"] / max(small[op]["seconds"], 1e-9),
                    "request_growth": big[op]["requests"] / max(small[op]["requests"], 1),
                }
            )
    return out


def run_tail(
    sizes: list[int],
    concurrent: int,
    sealers: int,
    backends: list[str],
    keys: int,
    *,
    s3_staged: bool = False,
    stage_dir: Path | None = None,
    max_loose: int | None = None,
    variants: Sequence[str] = TAIL_VARIANTS,
    on_row: Callable[[dict[str, Any]], None] = lambda result: None,
) -> dict[str, Any]:
    """The loose-tail measurements (module doc, ``--tail``); ``max_loose``: the bound (None: the store's default);
    ``variants``: which of the bounded and folds-failing stores to fill at each size."""
    result: dict[str, Any] = {"commit": _commit_of(ROOT), "keys_per_checkpoint": keys, "reads": [], "concurrent": []}
    (ROOT / "bench" / "work").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ckpt-store-tail-", dir=ROOT / "bench" / "work") as tmp:
        server = None
        try:
            for backend in backends:
                if backend == "s3" and server is None:
                    from ckpt_testkit.seaweed import SeaweedServer

                    server = SeaweedServer(Path(tmp) / "seaweed")
                    server.start()
                for n in sizes:
                    for variant in variants:
                        name = f"{variant}-{n}-{uuid.uuid4().hex[:6]}"
                        stage = None
                        if backend == "local":
                            uri, output, options = f"file://{tmp}/{name}/store", f"file://{tmp}/{name}/out", {}
                        else:
                            assert server is not None
                            bucket = server.create_bucket(f"tail-{name}".lower())
                            uri, output, options = f"s3://{bucket}/store", f"s3://{bucket}/out", server.options()
                            if s3_staged:
                                stage = Path(stage_dir or tmp) / f"stage-{name}" / "store"
                        row = tail_reads(backend, uri, output, options, n, keys, variant, stage, max_loose)
                        result["reads"].append(row)
                        if stage is not None:
                            shutil.rmtree(stage.parent, ignore_errors=True)
                        on_row(result)
                if concurrent:
                    name = f"concurrent-{uuid.uuid4().hex[:6]}"
                    if backend == "local":
                        uri, output, options = f"file://{tmp}/{name}/store", f"file://{tmp}/{name}/out", {}
                    else:
                        assert server is not None
                        bucket = server.create_bucket(f"tail-{name}".lower())
                        uri, output, options = f"s3://{bucket}/store", f"s3://{bucket}/out", server.options()
                    result["concurrent"].append(
                        concurrent_seal(backend, uri, output, options, concurrent, keys, sealers, max_loose)
                    )
                    on_row(result)
        finally:
            if server is not None:
                server.close()
    result["growth"] = tail_growth(result["reads"])
    return result


def print_tail(result: dict[str, Any]) -> None:
    print()
    print("| backend | tail | sealed | loose | " + " | ".join(TAIL_OPERATIONS) + " |")
    print("|---|---|---|---|" + "---|" * len(TAIL_OPERATIONS))
    for row in result["reads"]:
        cells = [f"{row[op]['seconds']:.2f} s ({row[op]['requests']:,} req)" for op in TAIL_OPERATIONS]
        print(
            f"| {row['backend']} | {row['variant']} | {row['checkpoints']:,} | {row['loose_before']:,} | "
            + " | ".join(cells)
            + " |"
        )
    if result["growth"]:
        print()
        print(f"growth (target <= {TAIL_MAX_GROWTH:g}x for every read):")
        for g in result["growth"]:
            verdict = _verdict(g["variant"], g["time_growth"] <= TAIL_MAX_GROWTH)
            print(
                f"  {g['backend']} {g['variant']} {g['operation']} {g['from']:,} -> {g['to']:,}: "
                f"time {g['time_growth']:.1f}x, requests {g['request_growth']:.1f}x ({verdict})"
            )
    for (backend, op), limit in TAIL_TARGETS.items():
        for row in result["reads"]:
            if row["backend"] == backend and row["checkpoints"] >= 20_000:
                verdict = _verdict(row["variant"], row[op]["seconds"] <= limit)
                print(f"  target {backend} {op} <= {limit:g} s at {row['checkpoints']:,} ({row['variant']}): {verdict}")
    for row in result["concurrent"]:
        verdict = "met" if row["tail_max"] <= row["bound"] else "NOT met"
        print(
            f"  {row['backend']}: {row['checkpoints']:,} sealed by {row['sealers']}: loose tail max {row['tail_max']:,}"
            f" (bound {row['bound']:,}: {verdict}), {row['requests_per_checkpoint']:.1f} requests/checkpoint"
        )


def _verdict(variant: str, met: bool) -> str:
    if variant != "bounded":
        return "degraded case, no target"
    return "met" if met else "NOT met"


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
    parser.add_argument("--tail", action="store_true", help="measure a store whose compaction fell behind")
    parser.add_argument("--sizes", default="2000,20000", help="--tail: checkpoints sealed before the reads")
    parser.add_argument("--concurrent", type=int, default=100_000, help="--tail: checkpoints sealed concurrently")
    parser.add_argument("--sealers", type=int, default=32, help="--tail: concurrent sealers, one client each")
    parser.add_argument(
        "--variants", default=",".join(TAIL_VARIANTS), help="--tail: stores to fill per size (bounded,folds-failing)"
    )
    parser.add_argument("--backends", default="local,s3", help="--tail: local, s3 or both")
    parser.add_argument(
        "--max-loose", type=int, default=None, help="--tail: the bound of the bounded stores (default: the store's)"
    )
    quiet.add_argument(parser)
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
    machine = quiet.gate(args)
    if args.tail:
        return _main_tail(args, machine)
    skip = frozenset(x.strip() for x in args.skip.split(",") if x.strip())
    if not skip <= {"commit", "cleanup"}:
        parser.error(f"--skip takes commit and/or cleanup, not {sorted(skip)}")
    out = args.out or RESULTS / ("store_scale.json" if args.label == "after" else f"store_scale-{args.label}.json")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out.parent.mkdir(parents=True, exist_ok=True)

    def write(result: dict[str, Any]) -> None:
        result["measured"] = {"date": started, "commit": result["commit"]}
        result["machine"] = machine.record()
        out.write_text(json.dumps(result, indent=1, default=str))

    sizes = _sizes(args.local), _sizes(args.s3)
    result = run(
        *sizes, args.keys, args.label, on_row=write, s3_staged=args.s3_staged, stage_dir=args.stage_dir, skip=skip
    )
    machine.finish()
    write(result)
    print(f"wrote {out}")
    return 0


def _main_tail(args: argparse.Namespace, machine: quiet.Quiet) -> int:
    out = args.out or RESULTS / "store_tail.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())

    def write(result: dict[str, Any]) -> None:
        result["measured"] = {"date": started, "commit": result["commit"]}
        result["machine"] = machine.record()
        out.write_text(json.dumps(result, indent=1, default=str))

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not set(backends) <= {"local", "s3"}:
        raise SystemExit(f"--backends takes local and/or s3, not {backends}")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not variants or not set(variants) <= set(TAIL_VARIANTS):
        raise SystemExit(f"--variants takes bounded and/or folds-failing, not {variants}")
    result = run_tail(
        _sizes(args.sizes),
        args.concurrent,
        args.sealers,
        backends,
        args.keys,
        s3_staged=args.s3_staged,
        stage_dir=args.stage_dir,
        max_loose=args.max_loose,
        variants=variants,
        on_row=write,
    )
    print_tail(result)
    machine.finish()
    write(result)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
