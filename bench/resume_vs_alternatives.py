"""Benchmark: resume after a failure, against what a Spark user would do instead.

One generated data set (Parquet files of raw web sessions, cached under
``bench/work/``), one transformation (``bench/jobs/sessions_job.py``), four ways
to run it with ``spark-submit --master local[2]``:

* ``plain``       — ``df.write.parquet`` (overwrite): a rerun reprocesses everything;
* ``streaming``   — Structured Streaming, ``trigger(availableNow=True)``, file source
  with ``maxFilesPerTrigger``, a checkpoint location, a Parquet file sink;
* ``ckpt-files``  — this package, file-path keys (``read_parquet`` + ``write_parquet``);
* ``ckpt-rows``   — this package, row keys (``skip_completed`` + ``write_parquet``).

For each: a clean run, then for each kill point (25%, 50%, 90% of the run's commit
units — checkpoints sealed, micro-batches committed, or write tasks committed) a
fresh run that the harness SIGKILLs (driver and all it spawned) as soon as that
many units are durable, then a rerun to completion. The variants take turns at every
step (each clean repeat, then each kill point), so that runs compared with each other
are made minutes apart on a shared machine. The done fraction is measured
after the kill from what the rerun will reuse (keys in valid checkpoints; files of
committed micro-batches). The harness plays the Airflow operator for the
checkpointed variants: it opens an epoch before each submit, ends it after, and
runs the commit (``store.commit`` + retention, as ``CheckpointCommitOperator``
does) before the output is checked.

Exactly-once is judged as a plain Parquet reader sees the output directory
(``pyarrow.dataset``, which skips ``_``/``.``-prefixed names): duplicate and missing
session ids, and files it cannot read. For the streaming sink the view through its
``_spark_metadata`` log (what Spark itself reads) is reported as well.

    .venv/bin/python bench/resume_vs_alternatives.py [--scale small|full] [--variants ...] [--kills 0.25,0.5,0.9]
        [--out FILE] [--no-decomposition]

A run of some variants only goes to its own ``--out`` file and is merged into the
results with ``bench/merge_resume.py`` (which keeps each run's own plain baseline).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_ckpt_provider.store import EpochStatus, RetentionPolicy, open_store  # noqa: E402
from bench import quiet  # noqa: E402
from ckpt_testkit.spark_cluster import SPARK_HOME, spark_env  # noqa: E402

JOB = ROOT / "bench" / "jobs" / "sessions_job.py"
WORK = ROOT / "bench" / "work"
RESULTS = ROOT / "bench" / "results"
OWNER = "bench-operator"
VARIANTS = ("plain", "streaming", "ckpt-files", "ckpt-rows")


@dataclass(frozen=True)
class Scale:
    files: int
    sessions_per_file: int
    units: int  # commit units per run: checkpoints (our writers) and micro-batches (streaming)
    users: int = 50_000
    repeats: int = 1  # clean runs per variant (the fastest counts)


SCALES = {
    "small": Scale(files=24, sessions_per_file=2_000, units=8),
    "full": Scale(files=320, sessions_per_file=3_000, units=40, repeats=2),
}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ---------------------------------------------------------------------------------------- data


def _session_file(index: int, per: int, users: int, path: str) -> int:
    """One input file: ``per`` sessions with ids [index*per, (index+1)*per); deterministic per index."""
    rng = np.random.default_rng(index)
    counts = rng.integers(3, 24, per)
    total = int(counts.sum())

    def text(values: Any) -> pa.Array:
        return pa.array(values).cast(pa.string())

    def const(value: str, n: int) -> pa.Array:
        return pa.array(np.full(n, value))

    actions = np.array(["view", "click", "scroll", "buy", "hover"])
    event = pc.binary_join_element_wise(
        pc.binary_join_element_wise(const("p", total), text(rng.integers(0, 5000, total)), ""),
        text(rng.integers(50, 60_000, total)),
        text(rng.integers(0, 3600, total)),
        pa.array(actions[rng.choice(5, total, p=[0.5, 0.25, 0.15, 0.03, 0.07])]),
        "|",
    )
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    events = pc.binary_join(pa.ListArray.from_arrays(offsets, event), ";")
    domains = np.array([f"www.site{k}.com" for k in range(300)])
    sources = np.array(["google", "newsletter", "twitter", "partner", "direct", "ads"])
    referrer = pc.binary_join_element_wise(
        const("https://", per),
        pa.array(domains[rng.integers(0, 300, per)]),
        const("/landing/", per),
        text(rng.integers(0, 10**6, per)),
        const("?utm_source=", per),
        pa.array(sources[rng.integers(0, 6, per)]),
        const("&q=", per),
        text(rng.integers(0, 10**9, per)),
        "",
    )
    devices = np.array(["ios", "android", "windows", "mac", "linux", "tv"])
    table = pa.table(
        {
            "session_id": np.arange(index * per, (index + 1) * per, dtype=np.int64),
            "user_id": rng.integers(0, users, per),
            "started_at": pa.array(1_717_200_000_000_000 + rng.integers(0, 86_400_000_000, per)).cast(
                pa.timestamp("us", tz="UTC")
            ),
            "device": pa.array(devices[rng.integers(0, 6, per)]),
            "referrer": referrer,
            "events": events,
        }
    )
    tmp = path + ".tmp"
    pq.write_table(table, tmp, compression="snappy")
    os.replace(tmp, path)
    return os.path.getsize(path)


@dataclass(frozen=True)
class DataSet:
    directory: Path
    files: int
    sessions: int
    bytes: int


def generate(scale: Scale, work: Path = WORK) -> DataSet:
    """The input files (reused if already generated with the same parameters)."""
    name = f"sessions-{scale.files}x{scale.sessions_per_file}-u{scale.users}"
    directory = work / "data" / name
    marker = work / "data" / f"{name}.json"
    if marker.exists():
        info = json.loads(marker.read_text())
        return DataSet(directory, info["files"], info["sessions"], info["bytes"])
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    print(f"generating {scale.files} input files under {directory} ...", flush=True)
    started = time.monotonic()
    paths = [str(directory / f"sessions-{i:05d}.parquet") for i in range(scale.files)]
    with ProcessPoolExecutor(2) as pool:
        sizes = list(
            pool.map(
                _session_file,
                range(scale.files),
                [scale.sessions_per_file] * scale.files,
                [scale.users] * scale.files,
                paths,
            )
        )
    # Streaming's file source takes files oldest first: make the order the file order.
    for i, path in enumerate(paths):
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    info = {"files": scale.files, "sessions": scale.files * scale.sessions_per_file, "bytes": sum(sizes)}
    marker.write_text(json.dumps(info))
    print(f"generated {sum(sizes) / 1e6:.0f} MB in {time.monotonic() - started:.0f} s", flush=True)
    return DataSet(directory, info["files"], info["sessions"], info["bytes"])


# ---------------------------------------------------------------------------------------- runs


@dataclass
class Submit:
    wall_seconds: float
    returncode: int
    killed: bool
    job: dict[str, Any]
    bytes_read: int | None
    cpu_seconds: float
    stderr_tail: str = ""


def _event_log_bytes_read(directory: Path) -> int | None:
    """Bytes of the input files Spark's file scans read in the run (SQL metric "size of files read").

    Spark's task input metrics ("Bytes Read") stay near zero for the vectorized Parquet
    reader here, so the scans' own metric is used: the sizes of the files each scan
    opened, summed over every query (every micro-batch for streaming).
    """
    logs = [p for p in directory.rglob("events_*") if p.is_file()]
    if not logs:
        return None
    metric_ids: set[int] = set()
    values: dict[int, int] = {}

    def walk(node: dict[str, Any]) -> None:
        for metric in node.get("metrics", []):
            if metric.get("name") == "size of files read":
                metric_ids.add(int(metric["accumulatorId"]))
        for child in node.get("children", []):
            walk(child)

    for log_file in logs:
        with open(log_file, encoding="utf-8") as handle:
            for line in handle:
                if "SQLExecutionStart" in line[:120] or "SQLAdaptiveExecutionUpdate" in line[:120]:
                    walk(json.loads(line).get("sparkPlanInfo") or {})
                elif "SparkListenerDriverAccumUpdates" in line[:120]:
                    for accumulator, value in json.loads(line).get("accumUpdates", []):
                        values[int(accumulator)] = max(values.get(int(accumulator), 0), int(value))
    return sum(v for k, v in values.items() if k in metric_ids)


class CpuSampler:
    """CPU seconds of every process in a session (the submit, its JVM, the driver, the Python workers).

    ``getrusage(RUSAGE_CHILDREN)`` misses Spark's Python workers (their daemon is never
    reaped), so /proc is sampled instead: per pid the last seen utime+stime. A process
    loses at most one interval of CPU at its end. CPU time is far less noisy than wall
    time when other processes compete for the two cores.
    """

    def __init__(self, session: int, interval: float = 0.2) -> None:
        self.session = session
        self.interval = interval
        self._seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._tick = os.sysconf("SC_CLK_TCK")
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", encoding="utf-8") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # fields[0] is field 3 (state): session is field 6, utime/stime fields 14/15.
            if int(fields[3]) == self.session:
                self._seen[int(entry.name)] = (int(fields[11]) + int(fields[12])) / self._tick

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def total(self) -> float:
        """CPU seconds so far (samples now)."""
        self._sample()
        return sum(self._seen.values())

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return sum(self._seen.values())


def _spark_submit_prefix() -> list[str]:
    """``spark-submit`` as every run of this benchmark starts it: local[2], no UI, loopback only."""
    return [
        os.path.join(SPARK_HOME, "bin", "spark-submit"),
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.driver.bindAddress=127.0.0.1",
    ]


def spark_submit(
    spec: dict[str, Any],
    confs: dict[str, str],
    run_dir: Path,
    *,
    kill_when: Callable[[], bool] | None = None,
    timeout: float = 3600,
) -> Submit:
    """One ``spark-submit`` of the job; with ``kill_when``, SIGKILL its process group once it holds."""
    event_dir = run_dir / "eventlog"
    shutil.rmtree(event_dir, ignore_errors=True)
    event_dir.mkdir(parents=True)
    argv = [
        *_spark_submit_prefix(),
        "--driver-memory",
        "1536m",
        "--conf",
        "spark.eventLog.enabled=true",
        "--conf",
        f"spark.eventLog.dir=file://{event_dir}",
        "--conf",
        "spark.eventLog.compress=false",
    ]
    for name, value in confs.items():
        argv += ["--conf", f"{name}={value}"]
    argv += [str(JOB), json.dumps(spec)]
    env = spark_env({"PYTHONPATH": str(ROOT)})
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=ROOT
    )
    sampler = CpuSampler(proc.pid)
    killed = threading.Event()

    def watch() -> None:
        assert kill_when is not None
        while proc.poll() is None:
            if kill_when():
                killed.set()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True) if kill_when else None
    if watcher:
        watcher.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        sampler.stop()
        raise RuntimeError(f"spark-submit timed out after {timeout}s:\n{err[-3000:]}") from None
    wall = time.monotonic() - started
    cpu = sampler.stop()
    if watcher:
        watcher.join()
    # Executors' Python workers share the group; make sure none outlives a kill.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    job: dict[str, Any] = {}
    for line in out.splitlines():
        if line.startswith("BENCH_JOB "):
            job = json.loads(line[len("BENCH_JOB ") :])
    if proc.returncode != 0 and not killed.is_set():
        raise RuntimeError(f"spark-submit failed ({proc.returncode}):\n{out[-2000:]}\n{err[-5000:]}")
    return Submit(wall, proc.returncode, killed.is_set(), job, _event_log_bytes_read(event_dir), cpu, err[-2000:])


# ---------------------------------------------------------------------------------------- output checks


def _read_ids(paths: list[str]) -> tuple[list[np.ndarray], list[str]]:
    arrays, unreadable = [], []
    for path in paths:
        try:
            arrays.append(pq.read_table(path, columns=["session_id"]).column(0).to_numpy())
        except (OSError, pa.ArrowInvalid):
            unreadable.append(path)
    return arrays, unreadable


def check_ids(paths: list[str], sessions: int) -> dict[str, int]:
    arrays, unreadable = _read_ids(paths)
    ids = np.concatenate(arrays) if arrays else np.array([], np.int64)
    counts = np.bincount(ids, minlength=sessions) if len(ids) else np.zeros(sessions, np.int64)
    return {
        "files": len(paths),
        "unreadable_files": len(unreadable),
        "rows": len(ids),
        "duplicates": int((counts[counts > 1] - 1).sum()),
        "missing": int((counts[:sessions] == 0).sum()),
        "unexpected": int((counts[sessions:] > 0).sum()),
    }


def plain_reader_view(output: Path, sessions: int) -> dict[str, int]:
    """What ``pyarrow.dataset`` over the directory sees (it skips ``_*`` and ``.*`` names)."""
    dataset = ds.dataset(str(output), format="parquet", exclude_invalid_files=False)
    return check_ids(sorted(dataset.files), sessions)


def spark_metadata_view(output: Path, sessions: int) -> dict[str, int]:
    """The files the streaming sink's ``_spark_metadata`` log names (what Spark's reader uses)."""
    paths: set[str] = set()
    for log_file in (output / "_spark_metadata").glob("*"):
        if log_file.name.startswith("."):
            continue
        for line in log_file.read_text().splitlines()[1:]:
            entry = json.loads(line)
            if entry.get("action", "add") == "add":
                paths.add(entry["path"].removeprefix("file://").removeprefix("file:"))
    return check_ids(sorted(paths), sessions)


def exactly_once(view: dict[str, int]) -> bool:
    return view["duplicates"] == 0 and view["missing"] == 0 and view["unreadable_files"] == 0


# ---------------------------------------------------------------------------------------- variants


class Variant:
    """One way to run the job: its directories, its submits, its progress and its finish."""

    name = ""
    mode = ""

    def __init__(self, data: DataSet, scale: Scale, base: Path) -> None:
        self.data, self.scale, self.base = data, scale, base
        self.output = base / "out"

    def reset(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)
        self.base.mkdir(parents=True)

    def spec(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "input_dir": str(self.data.directory),
            "output": str(self.output),
            "units": self.scale.units,
            "users": self.scale.users,
        }

    def read_confs(self) -> dict[str, str]:
        """Batch variants read whole files in about ``units`` tasks (Spark packs files by size only)."""
        return {
            "spark.sql.files.maxPartitionBytes": str(math.ceil(self.data.bytes / self.scale.units)),
            "spark.sql.files.openCostInBytes": "0",
        }

    def submit(self, kill_after: int | None = None) -> Submit:
        confs = {**self.read_confs(), **self.before_submit()}
        when = None if kill_after is None else self._kill_rule(kill_after)
        result = spark_submit(self.spec(), confs, self.base, kill_when=when)
        self.after_submit(result)
        return result

    def before_submit(self) -> dict[str, str]:
        return {}

    def after_submit(self, result: Submit) -> None:
        return None

    def _kill_rule(self, units: int) -> Callable[[], bool]:
        """True once ``units`` commit units are durable *and* a later unit has begun writing.

        Killing right at a commit boundary would flatter whoever commits there (a
        micro-batch that has not started leaves nothing behind); a real failure
        strikes mid-write, so the kill waits for a new output file to appear.
        """
        files_then: list[int] = []

        def rule() -> bool:
            if not files_then:
                if self.units_done() < units:
                    return False
                files_then.append(self.output_files())
                return False
            return self.output_files() > files_then[0]

        return rule

    def output_files(self) -> int:
        """Parquet files under the output directory, temporary ones included (not Spark's metadata)."""
        count = 0
        for _dir, dirs, files in os.walk(self.output):
            dirs[:] = [d for d in dirs if d != "_spark_metadata"]
            count += sum(1 for f in files if f.endswith(".parquet") and not f.startswith("."))
        return count

    def units_done(self) -> int:
        """Commit units durable so far (polled while the job runs)."""
        raise NotImplementedError

    def done_fraction(self) -> float:
        """After a kill: the share of the input whose output the rerun keeps."""
        raise NotImplementedError

    def finish(self) -> float:
        """What must run after a successful submit before the output is final (seconds)."""
        return 0.0

    def bytes_read(self, result: Submit) -> int | None:
        return result.bytes_read

    def views(self) -> dict[str, dict[str, int]]:
        return {"plain_reader": plain_reader_view(self.output, self.data.sessions)}


class Plain(Variant):
    name, mode = "plain", "plain"

    def units_done(self) -> int:
        # FileOutputCommitter v1: a committed task's files move to _temporary/0/task_*.
        with contextlib.suppress(FileNotFoundError):
            return sum(1 for e in os.scandir(self.output / "_temporary" / "0") if e.name.startswith("task_"))
        return 0

    def total_units(self) -> int:
        return sum(1 for p in self.output.glob("part-*"))

    def done_fraction(self) -> float:
        return 0.0  # overwrite: the rerun keeps nothing


class Streaming(Variant):
    name, mode = "streaming", "streaming"

    def read_confs(self) -> dict[str, str]:
        return {}  # micro-batches of files/units files each (maxFilesPerTrigger), Spark's own split

    @property
    def checkpoint(self) -> Path:
        return self.base / "checkpoint"

    def spec(self) -> dict[str, Any]:
        return {**super().spec(), "checkpoint_location": str(self.checkpoint)}

    def _committed(self) -> list[int]:
        with contextlib.suppress(FileNotFoundError):
            return [int(e.name) for e in os.scandir(self.checkpoint / "commits") if e.name.isdigit()]
        return []

    def units_done(self) -> int:
        return len(self._committed())

    def done_fraction(self) -> float:
        committed = self._committed()
        if not committed:
            return 0.0
        last = max(committed)
        files: set[str] = set()
        for log_file in (self.checkpoint / "sources" / "0").glob("*"):
            if log_file.name.startswith("."):
                continue
            for line in log_file.read_text().splitlines()[1:]:
                entry = json.loads(line)
                if int(entry["batchId"]) <= last:
                    files.add(entry["path"])
        return len(files) / self.data.files

    def views(self) -> dict[str, dict[str, int]]:
        return {**super().views(), "spark_metadata": spark_metadata_view(self.output, self.data.sessions)}


class Checkpointed(Variant):
    """Our variants: the harness opens and ends epochs and commits, as the Airflow operators do."""

    @property
    def store_uri(self) -> str:
        return f"file://{self.base / 'store'}"

    def before_submit(self) -> dict[str, str]:
        store = open_store(self.store_uri)
        self.epoch = store.epochs.begin(owner=OWNER).number
        return {
            "spark.ckpt.store.uri": self.store_uri,
            "spark.ckpt.epoch": str(self.epoch),
            "spark.ckpt.store.options": "{}",
        }

    def after_submit(self, result: Submit) -> None:
        status = EpochStatus.SUCCEEDED if result.returncode == 0 else EpochStatus.FAILED
        open_store(self.store_uri).epochs.end(self.epoch, status=status)

    def units_done(self) -> int:
        with contextlib.suppress(FileNotFoundError):
            return sum(
                1 for e in os.scandir(self.base / "store" / "checkpoints") if os.path.exists(f"{e.path}/manifest.json")
            )
        return 0

    def finish(self) -> float:
        started = time.monotonic()
        store = open_store(self.store_uri)
        store.commit([str(self.output)])
        store.housekeeping.cleanup(RetentionPolicy.DELETE_AFTER_SUCCESS)
        return time.monotonic() - started


class CheckpointedFiles(Checkpointed):
    name, mode = "ckpt-files", "files"

    def done_fraction(self) -> float:
        return open_store(self.store_uri).get_checkpointed_keys().num_rows / self.data.files

    def bytes_read(self, result: Submit) -> int | None:
        if result.bytes_read:
            return result.bytes_read
        # read_parquet's pyarrow reader (used when Spark's scan would split files) is invisible to
        # Spark's input metrics: count the pending files' bytes instead.
        return int(result.job.get("result", {}).get("input", {}).get("bytes_pending", 0))


class CheckpointedRows(Checkpointed):
    name, mode = "ckpt-rows", "rows"

    def done_fraction(self) -> float:
        return open_store(self.store_uri).get_checkpointed_keys().num_rows / self.data.sessions


VARIANT_CLASSES: dict[str, type[Variant]] = {
    "plain": Plain,
    "streaming": Streaming,
    "ckpt-files": CheckpointedFiles,
    "ckpt-rows": CheckpointedRows,
}


# ---------------------------------------------------------------------------------------- experiment


@dataclass
class CleanRun:
    wall_seconds: float
    cpu_seconds: float
    job_seconds: float
    finish_seconds: float
    bytes_read: int | None
    units: int
    views: dict[str, dict[str, int]]
    all_walls: list[float] = field(default_factory=list)
    all_cpus: list[float] = field(default_factory=list)


@dataclass
class KillRun:
    kill_at: float
    kill_after_units: int
    killed: bool
    killed_run_seconds: float
    progress_at_kill: float  # commit units durable at the kill / units of a clean run (reused or not)
    done_fraction: float  # share of the input the rerun skips
    rerun_wall_seconds: float
    rerun_cpu_seconds: float
    rerun_job_seconds: float
    finish_seconds: float
    bytes_read: int | None
    views: dict[str, dict[str, int]]
    load_at_rerun: list[float] = field(default_factory=list)


def clean_run(variant: Variant, repeats: int) -> CleanRun:
    best: CleanRun | None = None
    walls, cpus = [], []
    for _ in range(repeats):
        variant.reset()
        result = variant.submit()
        finish = variant.finish()
        walls.append(result.wall_seconds)
        cpus.append(result.cpu_seconds)
        if best is None or result.wall_seconds < best.wall_seconds:
            best = CleanRun(
                result.wall_seconds,
                result.cpu_seconds,
                float(result.job.get("job_seconds", 0.0)),
                finish,
                variant.bytes_read(result),
                0,
                {},
            )
    assert best is not None
    best.all_walls = walls
    best.all_cpus = cpus
    best.views = variant.views()
    best.units = _units_of_clean_run(variant)
    return best


def _fastest(best: CleanRun | None, run: CleanRun) -> CleanRun:
    """The faster of two clean runs of one variant, listing every run's wall and CPU seconds."""
    if best is None:
        return run
    walls, cpus = [*best.all_walls, *run.all_walls], [*best.all_cpus, *run.all_cpus]
    faster = run if run.wall_seconds < best.wall_seconds else best
    return dataclasses.replace(faster, all_walls=walls, all_cpus=cpus)


def _units_of_clean_run(variant: Variant) -> int:
    if isinstance(variant, Plain):
        return variant.total_units()
    if isinstance(variant, Streaming):
        return variant.units_done()
    # The checkpoints were deleted by the retention policy: the commit record counts them.
    records = sorted((variant.base / "store" / "commits").glob("*[0-9].json"))
    return len(json.loads(records[-1].read_text())["checkpoint_ids"]) if records else 0


def kill_run(variant: Variant, fraction: float, units: int) -> KillRun:
    variant.reset()
    # At least one unit must remain, or there would be nothing left to kill.
    threshold = min(max(1, math.ceil(fraction * units)), units - 1)
    killed = variant.submit(kill_after=threshold)
    progress = variant.units_done() / units
    done = variant.done_fraction()
    load_at_rerun = load()
    rerun = variant.submit()
    finish = variant.finish()
    return KillRun(
        kill_at=fraction,
        kill_after_units=threshold,
        killed=killed.killed,
        killed_run_seconds=killed.wall_seconds,
        progress_at_kill=progress,
        done_fraction=done,
        rerun_wall_seconds=rerun.wall_seconds,
        rerun_cpu_seconds=rerun.cpu_seconds,
        rerun_job_seconds=float(rerun.job.get("job_seconds", 0.0)),
        finish_seconds=finish,
        bytes_read=variant.bytes_read(rerun),
        views=variant.views(),
        load_at_rerun=load_at_rerun,
    )


def startup_seconds(base: Path) -> float:
    """Wall time of a spark-submit that starts a session and stops (the fixed cost of every run)."""
    base.mkdir(parents=True, exist_ok=True)
    script = base / "noop.py"
    script.write_text(
        "from pyspark.sql import SparkSession\ns = SparkSession.builder.getOrCreate()\ns.range(10).count()\ns.stop()\n"
    )
    argv = [*_spark_submit_prefix(), str(script)]
    started = time.monotonic()
    subprocess.run(argv, env=spark_env(), check=True, capture_output=True, cwd=ROOT)
    return time.monotonic() - started


def decomposition(data: DataSet, scale: Scale, work: Path, repeats: int = 2) -> dict[str, Any]:
    """The in-session breakdown of a clean run (``sessions_job.decompose``), in one spark-submit."""
    base = work / "runs" / "decompose"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    spec = {"mode": "decompose", "input_dir": str(data.directory), "output": str(base / "out"), "repeats": repeats}
    variant = Plain(data, scale, base)
    result = spark_submit(spec, variant.read_confs(), base)
    runs: dict[str, list[list[float]]] = result.job["decomposition"]
    summary = {
        name: {"wall": min(r[0] for r in rs), "cpu": min(r[1] for r in rs), "runs": rs} for name, rs in runs.items()
    }
    print(f"[resume] in-session decomposition: {json.dumps(summary)}", flush=True)
    return summary


def run(
    scale_name: str, variants: list[str], kills: list[float], work: Path = WORK, *, decompose: bool = True
) -> dict[str, Any]:
    scale = SCALES[scale_name]
    result: dict[str, Any] = {"scale": scale_name, "scale_params": dataclasses.asdict(scale), "load_start": load()}
    print(f"[resume] load average at start: {result['load_start']}", flush=True)
    data = generate(scale, work)
    result["data"] = {"files": data.files, "sessions": data.sessions, "bytes": data.bytes}
    result["startup_seconds"] = startup_seconds(work / "runs" / "noop")
    print(f"[resume] spark-submit start+stop: {result['startup_seconds']:.1f} s", flush=True)
    if decompose:
        result["decomposition"] = decomposition(data, scale, work)
    result["variants"] = {}
    objects = {name: VARIANT_CLASSES[name](data, scale, work / "runs" / name) for name in variants}
    # The variants take turns at every step (each clean repeat, then each kill point): on a shared
    # machine the load drifts over a run of many minutes, and runs made minutes apart compare unfairly.
    cleans: dict[str, CleanRun] = {}
    for repeat in range(scale.repeats):
        for name, variant in objects.items():
            print(f"[resume] {name}: clean run {repeat + 1} of {scale.repeats} ...", flush=True)
            cleans[name] = _fastest(cleans.get(name), clean_run(variant, 1))
    for name, clean in cleans.items():
        print(
            f"[resume] {name}: clean {clean.wall_seconds:.1f} s, cpu {clean.cpu_seconds:.1f} s "
            f"(job {clean.job_seconds:.1f} s, finish {clean.finish_seconds:.2f} s), {clean.units} units, "
            f"bytes {clean.bytes_read}, views {clean.views}",
            flush=True,
        )
        result["variants"][name] = {"clean": dataclasses.asdict(clean), "kills": []}
    for fraction in kills:
        for name, variant in objects.items():
            clean = cleans[name]
            kill = kill_run(variant, fraction, clean.units)
            print(
                f"[resume] {name}: kill at {fraction:.0%} (after {kill.kill_after_units} units, killed={kill.killed}, "
                f"done {kill.done_fraction:.3f}) -> rerun {kill.rerun_wall_seconds:.1f} s "
                f"({kill.rerun_wall_seconds / clean.wall_seconds:.2f} of clean; cpu "
                f"{kill.rerun_cpu_seconds / clean.cpu_seconds:.2f}), finish {kill.finish_seconds:.2f} s, "
                f"bytes {kill.bytes_read}, views {kill.views}",
                flush=True,
            )
            result["variants"][name]["kills"].append(dataclasses.asdict(kill))
    result["load_end"] = load()
    print(f"[resume] load average at end: {result['load_end']}", flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--kills", default="0.25,0.5,0.9")
    parser.add_argument("--out", type=Path, default=RESULTS / "resume.json")
    parser.add_argument(
        "--no-decomposition", action="store_true", help="skip the in-session breakdown of a clean run (section 2)"
    )
    quiet.add_argument(parser)
    args = parser.parse_args()
    machine = quiet.gate(args)
    kills = [float(k) for k in args.kills.split(",")]
    result = run(args.scale, args.variants.split(","), kills, decompose=not args.no_decomposition)
    machine.finish()
    result["machine"] = machine.record()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
