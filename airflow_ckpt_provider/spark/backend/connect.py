"""The Spark Connect backend: the same facts as the classic backend, over gRPC, without the JVM.

What Connect gives instead of Py4J (docs/design.md, D10):

* the physical plan as text (``df._explain_string(mode="formatted")``: one AnalyzePlan RPC,
  no job), parsed by :mod:`.plan_text` into :class:`~.base.PlanNode` s; Spark's per-task file
  packing is not visible, so file keys go through the pyarrow reader (whole files per task,
  our own groups) and row-key checkpoints record keys, not file pieces;
* the cluster's cores from ``spark.sql.leafNodeDefaultParallelism`` or
  ``spark.default.parallelism``, else from the slices Spark plans for ``spark.range(1)``;
* job tags (``addTag``) instead of job descriptions; no accumulators (the reader's file
  count comes from the file-keyed writer's reports instead).

Spark's own (JVM) writer needs the commit-protocol class in the server's JVM and its
committed-task queue in the driver's: it stays classic-only (:class:`UnsupportedError` (``native_writer``)).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame

from airflow_ckpt_provider.spark.backend.base import FileCounter, FilePiece, InputFile, NativeJobHandle, PlanNode
from airflow_ckpt_provider.spark.backend.plan_text import parse_plan
from airflow_ckpt_provider.store.errors import UnsupportedError

log = logging.getLogger(__name__)

#: Why Spark's own writer is not used over Spark Connect (the log and the typed error say it).
NATIVE_UNSUPPORTED = (
    "Spark Connect: Spark's own writer needs the commit protocol in the server's JVM and its committed-task "
    "queue in this process (classic PySpark only); the Arrow writer keeps every guarantee"
)
_SPLITS = re.compile(r"splits=Some\((\d+)\)")
#: Sessions whose server was probed (``check_server``), by session id: one probe per session.
_PROBED: set[str] = set()
_PROBED_LOCK = threading.Lock()


class ConnectBackend:
    """A Spark Connect session (``pyspark.sql.connect``): no JVM in this process."""

    kind = "connect"

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._parallelism: int | None = None

    # ------------------------------------------------------------------ session facts

    def default_parallelism(self) -> int:
        if self._parallelism is None:
            self._parallelism = self._read_parallelism()
        return self._parallelism

    def _read_parallelism(self) -> int:
        for name in ("spark.sql.leafNodeDefaultParallelism", "spark.default.parallelism"):
            try:
                value = self.spark.conf.get(name, None)
            except Exception:
                value = None
            if value and str(value).isdigit() and int(value) > 0:
                return int(value)
        try:
            found = _SPLITS.search(self.spark.range(1)._explain_string(mode="formatted"))
        except Exception as exc:
            log.info("could not read the server's default parallelism (%s); assuming 2", exc)
            return 2
        return int(found.group(1)) if found else 2

    def python_daemon(self) -> str | None:
        return None  # the server's executors: not readable from a client

    def app_name(self) -> str:
        try:
            name = self.spark.conf.get("spark.app.name", None)
        except Exception:
            name = None
        return str(name or "spark-connect")

    def server(self) -> str:
        """``host:port`` of the server (never the token or user id: it goes into the epoch's metadata)."""
        try:
            builder = self.spark.client._builder
            return f"{builder.host}:{builder._port}"
        except Exception:
            return "unknown"

    def epoch_metadata(self) -> dict[str, str]:
        return {"spark_session": "connect", "spark_server": self.server()}

    # ------------------------------------------------------------------ plans

    def plan(self, df: DataFrame) -> PlanNode | None:
        try:
            text = df._explain_string(mode="formatted")  # type: ignore[attr-defined]
        except Exception as exc:
            log.info("could not read the plan over Spark Connect (%s); the writer will shuffle by key", exc)
            return None
        return parse_plan(text)

    def scan_layout(self, scan: PlanNode) -> tuple[tuple[str, ...], ...] | str:
        return "Spark Connect does not show which files each task of Spark's scan reads"

    def scan_pieces(self, scan: PlanNode) -> tuple[tuple[FilePiece, ...], ...] | None:
        return None

    def input_files(self, df: DataFrame, scan: PlanNode) -> list[InputFile] | None:
        """One small job: the distinct ``_metadata`` of ``df``'s rows (Parquet footers, no column data).

        Spark's own values, so ``row_source.without_files`` (evaluated on the server) and the listing
        digest match them exactly; never computed on the client (another mtime precision would let
        done files pass). A file without rows is not listed: it holds no key either.
        """
        rows = (
            df.selectExpr(
                "_metadata.file_path AS path",
                "_metadata.file_size AS size",
                "unix_micros(_metadata.file_modification_time) AS mtime",
            )
            .distinct()
            .collect()
        )
        return [InputFile(str(r["path"]), int(r["size"]), int(r["mtime"])) for r in rows]

    @contextmanager
    def job_description(self, text: str) -> Iterator[None]:
        # A tag is what Connect offers instead of a description (the server's UI and event log list it;
        # ``interruptTag`` cancels by it). Tags cannot hold commas; a suffix keeps two writes apart.
        tag = f"{text.replace(',', ';')} [{uuid.uuid4().hex[:8]}]"
        self.spark.addTag(tag)
        try:
            yield
        finally:
            self.spark.removeTag(tag)

    def file_counter(self) -> FileCounter | None:
        return None

    def prepare_plan_tools(self) -> None:
        return None

    # ------------------------------------------------------------------ Spark's own writer: classic only

    def native_unsupported(self) -> str | None:
        return NATIVE_UNSUPPORTED

    def spark_output_path(self, output_root: str) -> str:
        raise UnsupportedError(NATIVE_UNSUPPORTED, reason="native_writer")

    def native_job(self, token: str, description: str) -> NativeJobHandle:
        raise UnsupportedError(NATIVE_UNSUPPORTED, reason="native_writer")

    # ------------------------------------------------------------------ the server's Python

    def check_server(self) -> None:
        """Raise :class:`UnsupportedError` (``server_package``) unless the server's Python workers run this
        package's version
        (same Python minor version: closures are pickled). One tiny job per session, before anything is written."""
        session_id = str(getattr(self.spark, "session_id", ""))
        with _PROBED_LOCK:
            if session_id and session_id in _PROBED:
                return
        from airflow_ckpt_provider import __version__

        try:
            rows = self.spark.range(0, 1, 1, 1).mapInArrow(_probe, "pkg string, py string").collect()
        except Exception as exc:
            text = str(exc)
            if "ModuleNotFoundError" in text or "No module named" in text:
                raise UnsupportedError(
                    "the Spark Connect server's Python cannot import airflow_ckpt_provider: install the same "
                    f"version ({__version__}) on the server (its Spark workers' Python), then run the job again. "
                    "Nothing was written",
                    reason="server_package",
                ) from exc
            raise
        server_pkg, server_py = str(rows[0]["pkg"]), str(rows[0]["py"])
        client_py = ".".join(str(v) for v in sys.version_info[:2])
        if server_pkg != __version__ or server_py != client_py:
            raise UnsupportedError(
                f"the Spark Connect server runs airflow_ckpt_provider {server_pkg} on Python {server_py}, this "
                f"client {__version__} on Python {client_py}: install the same package version on the same "
                "Python minor version on both sides. Nothing was written",
                reason="server_package",
            )
        with _PROBED_LOCK:
            if session_id:
                _PROBED.add(session_id)


def _probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Runs on the server's Python worker: which package version and Python it has."""
    import sys as server_sys

    from airflow_ckpt_provider import __version__ as server_version

    for _ in batches:
        pass
    py = ".".join(str(v) for v in server_sys.version_info[:2])
    yield pa.RecordBatch.from_pydict({"pkg": [server_version], "py": [py]})
