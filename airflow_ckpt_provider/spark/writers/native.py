"""The native writer: Spark's own (JVM) Parquet writer, checkpointed per task by the driver.

``write_parquet`` uses it when it can (``engine="auto"``): the rows never leave
the JVM, so a checkpointed write costs about what ``df.write.parquet`` costs,
instead of the JVM → Arrow → Python conversion of the Arrow writer. It needs

* file keys whose files each writer task reads whole (``read_parquet`` and a
  pipeline without a shuffle: the writer then knows each task's keys from the
  plan and needs no key column in the data), or row keys, which the writer
  records in the JVM as it writes them (``KeyedParquetFormat``, see
  :mod:`.native_keys` and docs/row-keys.md),
* a Hadoop filesystem for the output (local disk; ``s3a://`` where the cluster
  has it), and
* the package's small commit-protocol jar on the driver's classpath (added at
  run time; or ``--jars`` with :func:`jar_path`).

How the checkpoint protocol is kept (docs/design.md, section 5, decision D5 and invariants 5 and 8):

1. before the job, the driver records one *name intent* in the store: every file
   of this write carries a random token in its name, so the commit can delete
   the files of failed, duplicate and zombie attempts, and nothing else;
2. each task writes its files directly under the output with names no other
   attempt can produce (``part-PPPPP-TOKEN-aID-RAND.c000.snappy.parquet``); a
   task that fails deletes them before the failure propagates;
3. Spark reports each partition's first successful attempt to the driver
   (``FileCommitProtocol.onTaskCommit``); a driver thread stages that task's files
   and its keys (its input files, or the row keys it wrote) and seals one
   checkpoint for the partition,
   while the job runs. Tasks that finished before a job failure are sealed
   before the failure is raised; a driver killed outright loses at most the
   seals of the last moments (those partitions are redone, never lost);
4. fencing: a seal refuses a superseded epoch (and the write is cancelled at
   once); with a store on local disk, a task also checks the next epoch's record
   before writing.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.spark.backend.base import SparkBackend
from airflow_ckpt_provider.spark.keys import SOURCE_KEY_COLUMN
from airflow_ckpt_provider.spark.row_source import INPUT_RECORD
from airflow_ckpt_provider.spark.summary import WriteTaskReport
from airflow_ckpt_provider.spark.temporary_conf import session_conf
from airflow_ckpt_provider.spark.writers.native_keys import KEYED_FORMAT, NativeRowKeys
from airflow_ckpt_provider.store import CheckpointStore, FileMetadata, new_checkpoint_id
from airflow_ckpt_provider.store.errors import (
    EpochConflictError,
    IncompleteRunError,
    InvalidArgumentError,
    StoreUnavailableError,
    UnsupportedError,
)

log = logging.getLogger(__name__)

PROTOCOL_CLASS = "io.airflowckpt.spark.CheckpointCommitProtocol"
ENGINES = ("auto", "spark", "arrow")
_COMMIT_PROTOCOL_CONF = "spark.sql.sources.commitProtocolClass"
_POLL_SECONDS = 0.1


def jar_path() -> str:
    """The commit-protocol jar shipped in this package (for ``--jars`` / ``spark.jars``)."""
    return str(Path(__file__).parents[1] / "jvm" / "airflow-ckpt-spark.jar")


@dataclass(frozen=True)
class NativeWrite:
    """One native write: where, how, and what each writer task's keys are.

    File keys: ``task_files``, the input files each task reads (known from the plan).
    Row keys: ``row_keys``, the keys each task wrote come from the JVM with its commit.
    """

    store: CheckpointStore
    epoch: int
    output_root: str
    spark_path: str
    task_files: tuple[tuple[str, ...], ...] | None
    partition_by: tuple[str, ...] = ()
    compression: str = "snappy"
    max_records_per_file: int | None = None
    row_keys: NativeRowKeys | None = None


class _Sealer:
    """Seals one checkpoint per committed task, on a driver thread, while the write runs."""

    def __init__(self, write: NativeWrite, drain: Callable[[], str], on_fenced: Callable[[], None]) -> None:
        self.write = write
        self._drain = drain
        self._on_fenced = on_fenced
        self.reports: dict[int, WriteTaskReport] = {}
        self.fenced: EpochConflictError | None = None
        self.error: BaseException | None = None
        #: Nothing more may be sealed (the plan changed under the write, or the driver was interrupted).
        self._halted = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="ckpt-native-sealer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(_POLL_SECONDS):
            self.seal_pending()

    def finish(self) -> None:
        """Stop the thread, then seal what is left (tasks that committed before the job ended)."""
        self._stop.set()
        self._thread.join()
        self.seal_pending()

    def seal_pending(self, lines: str | None = None) -> None:
        """Seal the tasks committed since the last call (or those in ``lines``).

        A seal that fails for one task (a store error the breaker does not absorb, a bad message)
        fails the write, but not the progress of the other tasks Spark committed: each seal is a
        checkpoint of its own, so they are still sealed, now and at :meth:`finish`, and the first
        error is raised when the write ends. Nothing more is sealed once the epoch is fenced (a
        newer submit owns the store) or the write's plan proved different from the one its keys
        came from."""
        with self._lock:
            if self.fenced is not None or self._halted:
                return
            if lines is None:
                try:
                    lines = self._drain()
                except Exception as exc:  # a py4j hiccup: the commits stay queued for the next drain
                    log.warning("native writer: could not read committed tasks: %s", exc)
                    return
            for line in lines.splitlines():
                if not line.strip():
                    continue
                try:
                    self._seal(json.loads(line))
                except Exception as exc:
                    if isinstance(exc, EpochConflictError) and exc.reason == "epoch_fenced":
                        self.fenced = exc
                        self._on_fenced()
                        return
                    log.warning("native writer: a committed task could not be sealed (%s); sealing the others", exc)
                    self._halted = isinstance(exc, IncompleteRunError) and exc.reason == "write_plan_mismatch"
                    if self.error is None:
                        self.error = exc
                        self._on_fenced()
                    if self._halted:
                        return
                except BaseException as exc:  # an interrupt or exit: nothing more is sealed
                    self.error, self._halted = exc, True
                    self._on_fenced()
                    return

    def _seal(self, message: dict[str, Any]) -> None:
        write, store = self.write, self.write.store
        partition = int(message["partition"])
        if write.task_files is not None and partition >= len(write.task_files):
            raise IncompleteRunError(
                f"native writer: task {partition} is not one of the {len(write.task_files)} tasks the plan showed; "
                "the write's plan changed under it. Nothing of it is sealed: run the job again",
                reason="write_plan_mismatch",
            )
        root = str(message["root"]).rstrip("/")
        files = []
        for f in message["files"]:
            path = str(f["path"])
            relative = path[len(root) :].lstrip("/") if path.startswith(root) else path.rsplit("/", 1)[-1]
            files.append(
                FileMetadata(
                    path=f"{write.output_root}/{relative}",
                    size_bytes=int(f["size"]),
                    num_rows=max(int(f["rows"]), 0),
                    format="parquet",
                )
            )
        metadata: dict[str, Any] = {
            "attempt": message.get("attempt"),
            "stage": message.get("stage"),
            "task_attempt_id": message.get("task_attempt_id"),
            "host": message.get("host"),
            "writer": "spark",
        }
        if write.row_keys is not None:
            keys, rows_in = write.row_keys.task_keys(message)
            metadata["rows_in"] = rows_in
            record = write.row_keys.inputs.for_partition(partition) if write.row_keys.inputs else None
            if record is not None:
                metadata[INPUT_RECORD] = record
        elif write.task_files is not None:
            keys = pa.array(sorted(write.task_files[partition]), pa.string())
        else:
            raise RuntimeError(  # pragma: no cover - a write is built with one of the two
                "native writer: a write needs file keys (task_files) or row keys"
            )
        checkpoint_id = new_checkpoint_id()
        failpoint("spark.native.before_seal")
        failpoint(f"spark.native.before_seal.e{write.epoch}.p{partition}")
        if files:
            failpoint("spark.native.before_seal.with_files")  # failing here surely leaves an orphan
            store.stage_files(checkpoint_id, files)
        store.stage_keys(checkpoint_id, keys)
        sealed = store.checkpoint(checkpoint_id, epoch=write.epoch, partition=partition, metadata=metadata)
        failpoint("spark.native.after_seal")
        self.reports[partition] = WriteTaskReport(
            partition=partition,
            attempt=int(message.get("attempt", 0)),
            checkpoint_id=checkpoint_id if sealed is not None else None,
            rows=sum(f.num_rows for f in files),
            files=len(files),
            bytes=sum(f.size_bytes for f in files),
            keys=len(keys),
            sealed=sealed is not None,
            degraded=store.degraded or sealed is None,
            seconds=float(message.get("seconds", 0.0)),
            host=str(message.get("host", "")),
        )


def _record_name_intent(write: NativeWrite, token: str) -> bool:
    """Record the write's name intent; False (counted by the breaker) if the store is down.

    The store is off the critical path: without the record the write still runs,
    degraded — its files are then never deleted automatically (the commit reports
    the unrecorded ones), exactly like the Arrow writer's unrecorded files.
    """
    store = write.store
    if store.breaker.tripped:
        return False
    try:
        store.record_name_intent(new_checkpoint_id(), write.output_root, f"-{token}-", epoch=write.epoch)
    except (StoreUnavailableError, OSError) as exc:
        store.breaker.record_failure("record_name_intent", exc)
        log.warning("native writer: could not record the write's intent (%s); this write runs degraded", exc)
        return False
    store.breaker.record_success()
    return True


@dataclass(frozen=True)
class NativeResult:
    """What a native write did: one report per sealed task, whether its intent was recorded
    (False: the run is degraded), and how many tasks Spark's job committed."""

    reports: list[WriteTaskReport]
    intent_recorded: bool
    job_tasks: int


def run_native_write(backend: SparkBackend, spark: SparkSession, df: DataFrame, write: NativeWrite) -> NativeResult:
    """Write ``df`` with Spark's Parquet writer, sealing one checkpoint per task. Raises what the job raised.

    With row keys, ``df`` carries the hidden source-key column (it is not written).
    On failure, the tasks that finished are sealed before the error propagates.
    Raises :class:`EpochConflictError` (``epoch_fenced``) when a newer submit took over the store.
    """
    token = "ckw" + uuid.uuid4().hex[:16]
    intent_recorded = _record_name_intent(write, token)
    native_job = backend.native_job(
        token, f"checkpointed write to {write.output_root} (epoch {write.epoch}, Spark writer)"
    )
    sealer = _Sealer(write, native_job.drain, native_job.cancel)
    keys_dir = None
    if write.row_keys is not None:
        # The hidden key column goes last: the keyed format writes the others and records it.
        df = df.select(*[c for c in df.columns if c != SOURCE_KEY_COLUMN], SOURCE_KEY_COLUMN)
        keys_dir = tempfile.mkdtemp(prefix="ckpt-task-keys-")
    writer = df.write.mode("append").option("ckpt.write.token", token).option("compression", write.compression)
    if keys_dir is not None:
        writer = writer.format(KEYED_FORMAT).option("ckpt.keys.dir", keys_dir)
    else:
        writer = writer.format("parquet")
    fence = _fence_path(write.store, write.epoch)
    if fence:
        writer = writer.option("ckpt.fence.path", fence)
    if write.spark_path.startswith("file:"):
        # No .crc side files (the Arrow writer writes none either, and the commit's listing skips hidden files).
        writer = writer.option("fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
        writer = writer.option("fs.file.impl.disable.cache", "true")
    if write.max_records_per_file:
        writer = writer.option("maxRecordsPerFile", str(write.max_records_per_file))
    if write.partition_by:
        writer = writer.partitionBy(*write.partition_by)
    started = time.monotonic()
    failure: BaseException | None = None
    sealer.start()
    try:
        with native_job.scope(), session_conf(spark, _COMMIT_PROTOCOL_CONF, PROTOCOL_CLASS):
            writer.save(write.spark_path)
    except BaseException as exc:
        failure = exc
    finally:
        sealer.finish()
        job_tasks = -1
        try:
            sealer.seal_pending(native_job.close())  # anything the last drain did not see
            job_tasks = native_job.job_tasks()
        except Exception as exc:
            log.warning("native writer: could not read the last committed tasks: %s", exc)
        if keys_dir is not None:
            shutil.rmtree(keys_dir, ignore_errors=True)
    log.info(
        "native write of %s: %d tasks sealed in %.1fs",
        write.output_root,
        len(sealer.reports),
        time.monotonic() - started,
    )
    if sealer.fenced is not None:
        raise sealer.fenced from failure
    if sealer.error is not None:
        raise sealer.error from failure
    if failure is not None:
        raise failure
    return NativeResult([sealer.reports[p] for p in sorted(sealer.reports)], intent_recorded, job_tasks)


def _fence_path(store: CheckpointStore, epoch: int) -> str | None:
    """The next epoch's record as a Hadoop path, if the store is on local disk (tasks check it before writing)."""
    uri = store.epochs.record_uri(epoch + 1)
    return uri if uri.startswith("file://") else None


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise InvalidArgumentError(f"engine={engine!r}: use one of {list(ENGINES)}", reason="option")
    return engine


def native_unsupported_reason(
    backend: SparkBackend, task_files: Sequence[Sequence[str]] | None, output_root: str, *, row_keys: bool = False
) -> tuple[str | None, str]:
    """(Spark path of the output, "") when the native writer can run, else (None, why not)."""
    if task_files is None and not row_keys:
        return None, (
            "the writer cannot tell each task's input files from the plan (a shuffle, a union, or a source other "
            "than read_parquet)"
        )
    problem = backend.native_unsupported()
    if problem:
        return None, problem
    try:
        return backend.spark_output_path(output_root), ""
    except UnsupportedError as exc:
        if exc.reason != "native_writer":
            raise
        return None, str(exc)
