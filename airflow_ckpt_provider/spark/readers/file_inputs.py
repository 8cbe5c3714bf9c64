"""File-level resume: which input files are pending, and reading them so that every file is read whole by one task.

The key of an input file is its normalized URI (``paths.file_key``). Reading goes
through Spark's own Parquet scan when the physical plan proves it splits no
file across tasks, and through pyarrow on the executors otherwise (for example
``s3://`` when Spark has no S3 connector). Either way the rows carry their file
in the hidden column ``__ckpt_source_file``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from airflow_ckpt_provider.spark.backend import SparkBackend
from airflow_ckpt_provider.spark.keys import SOURCE_FILE_COLUMN
from airflow_ckpt_provider.spark.paths import arrow_filesystem, arrow_path, file_key, is_s3
from airflow_ckpt_provider.spark.plan import READER_MARKER, native_layout
from airflow_ckpt_provider.spark.readers.arrow import FileSourceSpec, SourceFile, make_reader, plan_groups
from airflow_ckpt_provider.spark.temporary_conf import session_conf
from airflow_ckpt_provider.store.errors import InvalidArgumentError, UnsupportedError

log = logging.getLogger(__name__)

READERS = ("auto", "spark", "pyarrow")


class FileInputs:
    """One job's input files: the pending selection, the readers, and what they were handed."""

    def __init__(self, spark: SparkSession, backend: SparkBackend, options: Mapping[str, Any]) -> None:
        self.spark = spark
        self.backend = backend
        self._options = options
        #: File keys by index: the values of the pyarrow reader's int file column.
        self.registry: list[str] = []
        self._index: dict[str, int] = {}
        #: pyarrow readers: function name (as the plan shows it) -> files each task reads.
        self.reader_tasks: dict[str, tuple[tuple[str, ...], ...]] = {}
        self._listed: set[str] = set()
        self._pending: set[str] = set()
        self._bytes_pending = 0
        # Files the pyarrow reader opened (Spark's scan reads exactly the pending files it is given).
        self._opened = backend.file_counter()
        # Without a counter (Spark Connect): the input files of the file-keyed write tasks that reported.
        self._reported_reads = 0

    def select_pending(self, paths: Iterable[str], done: set[str]) -> list[str]:
        """``paths`` whose key is not in ``done``, in order, duplicates dropped."""
        paths = list(paths)
        pending: list[str] = []
        seen: set[str] = set()
        for path in paths:
            key = file_key(path)
            if key in done or key in seen:
                continue
            seen.add(key)
            pending.append(path)
        self._listed.update(file_key(p) for p in paths)
        self._pending.update(file_key(p) for p in pending)
        log.info("%d of %d input files pending (%d done)", len(pending), len(paths), len(paths) - len(pending))
        return pending

    def stats(self) -> dict[str, int]:
        try:
            opened = int(self._opened.value) if self._opened is not None else self._reported_reads
        except Exception:
            opened = 0
        return {
            "files_listed": len(self._listed),
            "files_skipped": len(self._listed - self._pending),
            "files_pending": len(self._pending),
            "bytes_pending": self._bytes_pending,
            "pyarrow_files_read": opened,
        }

    def record_task_reads(self, files: int) -> None:
        """``files`` input files were read by write tasks that reported (counted only where the backend has
        no counter of its own: there ``pyarrow_files_read`` means "files read by tasks that reported")."""
        if self._opened is None:
            self._reported_reads += files

    def check_reader(self, reader: str) -> None:
        """Refuse, before anything is read, a reader the session cannot run."""
        if reader == "spark" and self.backend.kind == "connect":
            raise UnsupportedError(
                "read_parquet(reader='spark') needs Spark's per-task file packing, which Spark Connect does not "
                "show: use reader='auto' (the pyarrow reader, whole files per task). Nothing was read or written",
                reason="connect_unsupported",
            )

    def read_parquet(
        self,
        paths: Sequence[str],
        todo: Sequence[str],
        *,
        schema: StructType | None,
        reader: str,
        max_partition_bytes: int | None,
        min_partitions: int | None,
        batch_rows: int,
    ) -> DataFrame:
        """Read ``todo`` (the pending files among ``paths``) whole per task; see ``CheckpointedJob.read_parquet``."""
        if reader not in READERS:
            raise InvalidArgumentError(f"reader={reader!r}: use one of {list(READERS)}", reason="option")
        if not todo:
            if schema is None and not paths:
                raise InvalidArgumentError(
                    "read_parquet got no input files and no schema: pass schema=StructType(...)",
                    reason="unreadable_input",
                )
            spark_schema = schema or from_arrow_schema(self._read_arrow_schema(paths[0]))
            hidden = StructField(SOURCE_FILE_COLUMN, StringType(), True)
            return self.spark.createDataFrame([], StructType([*spark_schema.fields, hidden]))
        sizes = self._file_sizes(todo)
        self._bytes_pending += sum(sizes)
        if reader != "pyarrow" and self.backend.kind == "classic":
            native = self._spark_parquet(todo, schema)
            if native is not None:
                return native
            if reader == "spark":
                raise InvalidArgumentError(
                    "Spark cannot read these files whole, one task per file group (see the log)",
                    reason="unreadable_input",
                )
        return self._pyarrow_parquet(todo, sizes, schema, max_partition_bytes, min_partitions, batch_rows)

    def _register(self, path: str) -> int:
        key = file_key(path)
        index = self._index.get(key)
        if index is None:
            index = self._index[key] = len(self.registry)
            self.registry.append(key)
        return index

    def _file_sizes(self, paths: Sequence[str]) -> list[int]:
        """Sizes of the input files (one batched listing call per filesystem)."""
        by_fs: dict[bool, list[int]] = {}
        for position, path in enumerate(paths):
            by_fs.setdefault(is_s3(path), []).append(position)
        sizes = [0] * len(paths)
        for _s3, positions in by_fs.items():
            filesystem = arrow_filesystem(paths[positions[0]], self._options)
            infos = filesystem.get_file_info([arrow_path(paths[p]) for p in positions])
            for position, info in zip(positions, infos, strict=False):
                if info.size is None:
                    raise InvalidArgumentError(
                        f"input file {paths[position]} does not exist or is not a file", reason="unreadable_input"
                    )
                sizes[position] = int(info.size)
        return sizes

    def _read_arrow_schema(self, path: str) -> pa.Schema:
        filesystem = arrow_filesystem(path, self._options)
        try:
            with filesystem.open_input_file(arrow_path(path)) as handle:
                return pq.read_schema(handle)
        except (OSError, pa.ArrowInvalid) as exc:
            raise InvalidArgumentError(
                f"cannot read the Parquet schema of {path}: {exc}", reason="unreadable_input"
            ) from exc

    @contextmanager
    def _driver_listing(self, todo: Sequence[str]) -> Iterator[None]:
        """Local files: let the driver stat them instead of a Spark job (Spark runs one above 32 paths).

        For explicit local files a stat is microseconds; the listing job costs a few
        hundred milliseconds, a visible share of a small resumed run. Remote paths
        keep Spark's parallel listing.
        """
        name = "spark.sql.sources.parallelPartitionDiscovery.threshold"
        current = int(str(self.spark.conf.get(name, "32") or 32))
        if len(todo) <= current or len(todo) > 10_000 or not all(file_key(p).startswith("file://") for p in todo):
            yield
            return
        with session_conf(self.spark, name, str(len(todo) + 1)):
            yield

    def _spark_parquet(self, todo: Sequence[str], schema: StructType | None) -> DataFrame | None:
        """Spark's Parquet scan tagged with ``_metadata.file_path``, if it reads every file whole."""
        try:
            source = self.spark.read.schema(schema) if schema is not None else self.spark.read
            with self._driver_listing(todo):
                df = source.parquet(*todo).withColumn(SOURCE_FILE_COLUMN, F.col("_metadata.file_path"))
        except Exception as exc:  # e.g. no Hadoop filesystem for s3://: pyarrow reads it instead
            log.info("Spark cannot read the input (%s); reading it with pyarrow", str(exc).splitlines()[0])
            return None
        layout = native_layout(self.backend, df, SOURCE_FILE_COLUMN)
        if isinstance(layout, str):
            log.info("reading the input with pyarrow instead of Spark's scan: %s", layout)
            return None
        return df

    def _pyarrow_parquet(
        self,
        todo: Sequence[str],
        sizes: Sequence[int],
        schema: StructType | None,
        max_partition_bytes: int | None,
        min_partitions: int | None,
        batch_rows: int,
    ) -> DataFrame:
        spark_schema = schema or from_arrow_schema(self._read_arrow_schema(todo[0]))
        out_schema = StructType([*spark_schema.fields, StructField(SOURCE_FILE_COLUMN, IntegerType(), True)])
        files = [SourceFile(self._register(p), p, size) for p, size in zip(todo, sizes, strict=True)]
        conf_max = int(str(self.spark.conf.get("spark.sql.files.maxPartitionBytes", "134217728")).rstrip("b"))
        groups = plan_groups(
            files,
            max_bytes=max_partition_bytes or conf_max,
            min_groups=min_partitions or 2 * self.backend.default_parallelism(),
        )
        name = f"{READER_MARKER}_r{len(self.reader_tasks)}"
        self.reader_tasks[name] = tuple(tuple(f.uri for f in g) for g in groups)
        spec = FileSourceSpec(
            groups=tuple(groups),
            schema=to_arrow_schema(spark_schema),
            fs_options=self._options,
            batch_rows=batch_rows,
        )
        input_files = self._opened

        def on_file(size: int) -> None:
            if input_files is not None:
                input_files.add(1)

        function = make_reader(spec, name, on_file)
        return self.spark.range(0, len(groups), 1, len(groups)).mapInArrow(function, out_schema)
