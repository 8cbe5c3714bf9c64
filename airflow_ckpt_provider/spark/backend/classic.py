"""The classic backend: everything of ``spark/`` that touches the JVM through Py4J lives here.

The physical plan is read from the JVM (``queryExecution().executedPlan()``), wrapped in
:class:`JvmPlanNode` for the walkers of :mod:`airflow_ckpt_provider.spark.plan`; Spark's
per-task file packing comes from the scan's input RDD (or the package jar's ``ScanPieces``
in one call); the native writer's commit protocol, job groups and Hadoop filesystems are
reached the same way.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pyspark.sql import DataFrame, SparkSession

from airflow_ckpt_provider.contract import CONF_PYTHON_DAEMON
from airflow_ckpt_provider.spark.backend.base import FileCounter, FilePiece, InputFile, Partitioning
from airflow_ckpt_provider.spark.writers.native import PROTOCOL_CLASS, jar_path
from airflow_ckpt_provider.store.errors import UnsupportedError

log = logging.getLogger(__name__)

#: The package jar's class that describes a scan's file pieces in one call (jvm/src/.../ScanPieces.java).
_SCAN_PIECES_CLASS = "io.airflowckpt.spark.ScanPieces"
_STRING = "java.lang.String"


def _seq(scala_seq: Any) -> list[Any]:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]


def _name(node: Any) -> str:
    return str(node.getClass().getSimpleName())


def _partitionings(partitioning: Any) -> tuple[Partitioning, ...]:
    name = _name(partitioning)
    if name == "PartitioningCollection":
        return tuple(p for child in _seq(partitioning.partitionings()) for p in _partitionings(child))
    if "HashPartitioning" in name:
        kind, expressions = "hash", _seq(partitioning.expressions())
    elif name == "RangePartitioning":
        kind, expressions = "range", [order.child() for order in _seq(partitioning.ordering())]
    else:
        return (Partitioning("other", (), _num_partitions(partitioning)),)
    columns = tuple(str(e.name()) if _name(e) == "AttributeReference" else None for e in expressions)
    return (Partitioning(kind, columns, _num_partitions(partitioning)),)


def _num_partitions(partitioning: Any) -> int | None:
    try:
        count = int(partitioning.numPartitions())
    except Exception:
        return None
    return count if count > 0 else None


class JvmPlanNode:
    """A JVM ``SparkPlan`` node; each fact is read through Py4J once, when first asked."""

    def __init__(self, java: Any) -> None:
        self.java = java

    @cached_property
    def name(self) -> str:
        return _name(self.java)

    @cached_property
    def children(self) -> tuple[JvmPlanNode, ...]:
        return tuple(JvmPlanNode(c) for c in _seq(self.java.children()))

    @cached_property
    def output_names(self) -> frozenset[str]:
        # The node's schema (built from its output attributes) as JSON: one round trip, where reading each
        # attribute's name took two per column.
        return frozenset(field["name"] for field in json.loads(str(self.java.schema().json()))["fields"])

    @cached_property
    def partitionings(self) -> tuple[Partitioning, ...]:
        return _partitionings(self.java.outputPartitioning())

    def describe(self) -> str:
        return str(self.java.simpleString(5))

    def repartitions_by_num(self) -> bool:
        try:
            return str(self.java.shuffleOrigin().toString()) == "REPARTITION_BY_NUM"
        except Exception:
            return False

    def has_data_filters(self) -> bool:
        return len(_seq(self.java.dataFilters())) > 0

    def deterministic(self) -> bool:
        return all(e.deterministic() for e in _seq(self.java.projectList()))


def physical_plan(df: DataFrame) -> JvmPlanNode | None:
    """The JVM physical plan with its exchanges (before adaptive re-planning), or None."""
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        return None
    try:
        plan = jdf.queryExecution().executedPlan()
        if _name(plan) == "AdaptiveSparkPlanExec":
            plan = plan.initialPlan()
        return JvmPlanNode(plan)
    except Exception as exc:  # a py4j surprise must cost a shuffle, not the job
        log.info("could not read the physical plan (%s); the writer will shuffle by key", exc)
        return None


def scan_layout(scan: Any) -> tuple[tuple[str, ...], ...] | str:
    """The files each task of a Spark file scan reads, or a problem if Spark splits a file across tasks."""
    tasks: list[tuple[str, ...]] = []
    for partition in scan.inputRDD().partitions():
        files = []
        for piece in partition.files():
            path = str(piece.filePath().toString())
            if int(piece.start()) != 0 or int(piece.length()) != int(piece.fileSize()):
                return (
                    f"Spark splits {path} ({int(piece.fileSize())} bytes) across tasks; raise "
                    "spark.sql.files.maxPartitionBytes above the largest input file"
                )
            files.append(path)
        tasks.append(tuple(files))
    return tuple(tasks)


def _metadata_extractors(spark_jvm: Any) -> Any:
    formats = spark_jvm.org.apache.spark.sql.execution.datasources
    return getattr(formats, "FileFormat$").__getattr__("MODULE$").BASE_METADATA_EXTRACTORS()


def scan_files(scan: Any, spark_jvm: Any, gateway: Any | None = None) -> tuple[tuple[FilePiece, ...], ...]:
    """Per task of a Spark file scan (a JVM node): the file pieces it reads.

    Values come from Spark's own ``_metadata`` extractors, so a filter on ``_metadata``
    compares exactly what the scan will see. With ``gateway`` (the session's Py4J gateway)
    and the package's jar loaded, the JVM describes the scan in one call; otherwise each
    piece is read through Py4J (five round trips a piece: 1.5 s for 320 files).
    """
    described = _scan_files_in_jvm(scan, spark_jvm, gateway) if gateway is not None else None
    if described is not None:
        return described
    extract = _metadata_extractors(spark_jvm)
    path_of, size_of, mtime_of = (extract.apply(n) for n in ("file_path", "file_size", "file_modification_time"))
    tasks: list[tuple[FilePiece, ...]] = []
    for partition in scan.inputRDD().partitions():
        pieces = []
        for piece in partition.files():
            file = InputFile(str(path_of.apply(piece)), int(size_of.apply(piece)), int(mtime_of.apply(piece)))
            pieces.append(FilePiece(file, int(piece.start()), int(piece.length())))
        tasks.append(tuple(pieces))
    return tuple(tasks)


class _JarHandles:
    """Reflection handles of the package jar's static methods, looked up once per Py4J gateway and driver
    thread (Python threads are pinned to JVM threads, whose class loaders may differ). A lookup is a dozen
    Py4J round trips (each resolves a package or class name): 0.1-0.2 s of a row-key write's driver on a
    slow machine, where the call itself is three."""

    def __init__(self) -> None:
        self._handles: dict[tuple[int, int, str], tuple[Any, Any, Any]] = {}

    def static_method(self, spark_jvm: Any, gateway: Any, class_name: str, method: str, parameter: str) -> Any:
        """(the ``java.lang.reflect.Method``, the JVM's ``Object`` class); raises what the lookup raised."""
        key = (id(gateway), threading.get_ident(), f"{class_name}.{method}({parameter})")
        found = self._handles.get(key)
        if found is not None and found[0] is gateway:
            return found[1], found[2]
        loader = spark_jvm.java.lang.Thread.currentThread().getContextClassLoader()
        cls = spark_jvm.java.lang.Class.forName(class_name, True, loader)
        classes = gateway.new_array(spark_jvm.java.lang.Class, 1)
        classes[0] = spark_jvm.java.lang.Class.forName(parameter)
        handle = cls.getMethod(method, classes)
        object_class = spark_jvm.java.lang.Object
        self._handles[key] = (gateway, handle, object_class)  # the gateway kept: its id is never reused
        return handle, object_class

    def invoke(self, spark_jvm: Any, gateway: Any, class_name: str, method: str, parameter: str, arg: Any) -> Any:
        handle, object_class = self.static_method(spark_jvm, gateway, class_name, method, parameter)
        args = gateway.new_array(object_class, 1)
        args[0] = arg
        return handle.invoke(None, args)


_JAR = _JarHandles()


def _scan_files_in_jvm(scan: Any, spark_jvm: Any, gateway: Any) -> tuple[tuple[FilePiece, ...], ...] | None:
    """``scan_files`` by one call to the package jar's ``ScanPieces.describe``; None when the jar is not
    loaded in this session (the caller walks the pieces itself)."""
    try:
        _JAR.static_method(spark_jvm, gateway, _SCAN_PIECES_CLASS, "describe", "java.lang.Object")
    except Exception:
        return None
    text = str(_JAR.invoke(spark_jvm, gateway, _SCAN_PIECES_CLASS, "describe", "java.lang.Object", scan))
    *records, footer = text.split("\u0000")
    tasks: list[list[FilePiece]] = [[] for _ in range(int(footer.removeprefix("tasks=")))]
    for record in records:
        task, path, size, mtime, start, length = record.split("\u0001")
        tasks[int(task)].append(FilePiece(InputFile(path, int(size), int(mtime)), int(start), int(length)))
    return tuple(tuple(pieces) for pieces in tasks)


def _protocol_loadable(spark: SparkSession) -> bool:
    """Whether this thread's class loader sees the protocol class (it sees a jar added at run time)."""
    try:
        _JAR.static_method(spark.sparkContext._jvm, spark.sparkContext._gateway, PROTOCOL_CLASS, "open", _STRING)
        return True
    except Exception:
        return False


def protocol_available(spark: SparkSession) -> str | None:
    """None if the commit protocol can be used by this thread's session, else why not.

    Adds the package's jar to the session when the class is not on the classpath
    (``ADD JAR`` reaches the calling thread's class loader and the executors).
    """
    if getattr(spark.sparkContext, "_jvm", None) is None:
        return "Spark Connect has no JVM access"
    if _protocol_loadable(spark):
        return None
    if Path(jar_path()).is_file():
        try:
            spark.sparkContext._jsc.addJar(jar_path())  # executors
            spark.sql(f"ADD JAR '{jar_path()}'")  # the driver's session class loader
        except Exception as exc:
            log.info("could not add %s to the session: %s", jar_path(), exc)
        if _protocol_loadable(spark):
            return None
    return f"the class {PROTOCOL_CLASS} cannot be loaded (add {jar_path()} to spark.jars)"


class _NativeJob:
    """One native write's JVM handles: ``CheckpointCommitProtocol.open(token)`` and its job group."""

    def __init__(self, spark: SparkSession, token: str, description: str) -> None:
        self._spark = spark
        self._group = f"ckpt-native-{token}"
        self._description = description
        self._commits = self._open(token)

    def _open(self, token: str) -> Any:
        context = self._spark.sparkContext
        return _JAR.invoke(context._jvm, context._gateway, PROTOCOL_CLASS, "open", _STRING, token)

    def drain(self) -> str:
        return str(self._commits.drain())

    def close(self) -> str:
        return str(self._commits.close())

    def job_tasks(self) -> int:
        return int(self._commits.jobTasks())

    def cancel(self) -> None:
        self._spark.sparkContext.cancelJobGroup(self._group)

    @contextmanager
    def scope(self) -> Iterator[None]:
        sc = self._spark.sparkContext
        group_properties = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
        previous = {name: sc.getLocalProperty(name) for name in group_properties}
        sc.setJobGroup(self._group, self._description, True)
        try:
            yield
        finally:
            for name, value in previous.items():  # the caller's job group, if it had one
                sc.setLocalProperty(name, value)  # type: ignore[arg-type]


class ClassicBackend:
    """A classic PySpark session: the JVM is in this process, reached through Py4J."""

    kind = "classic"

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def default_parallelism(self) -> int:
        return int(self.spark.sparkContext.defaultParallelism)

    def app_name(self) -> str:
        return str(self.spark.sparkContext.appName)

    def python_daemon(self) -> str | None:
        # A core conf: the session's SQL conf (spark.conf) does not hold it. The context's live conf, one
        # key: getConf() copies every conf entry over Py4J (three calls each; a few hundred per job result).
        daemon = self.spark.sparkContext._conf.get(CONF_PYTHON_DAEMON, None)
        return None if daemon is None else str(daemon)

    def plan(self, df: DataFrame) -> JvmPlanNode | None:
        return physical_plan(df)

    def scan_layout(self, scan: Any) -> tuple[tuple[str, ...], ...] | str:
        return scan_layout(scan.java)

    def scan_pieces(self, scan: Any) -> tuple[tuple[FilePiece, ...], ...] | None:
        context = self.spark.sparkContext
        return scan_files(scan.java, context._jvm, context._gateway)

    def input_files(self, df: DataFrame, scan: Any) -> list[InputFile] | None:
        pieces = self.scan_pieces(scan)
        return None if pieces is None else [piece.file for task in pieces for piece in task]

    @contextmanager
    def job_description(self, text: str) -> Iterator[None]:
        self.spark.sparkContext.setJobDescription(text)
        try:
            yield
        finally:
            self.spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]

    def file_counter(self) -> FileCounter | None:
        # A Spark accumulator: executors add to it, the driver reads ``value``.
        counter: FileCounter = self.spark.sparkContext.accumulator(0)
        return counter

    def prepare_plan_tools(self) -> None:
        # The package's jar lists a source's files in one JVM call (Spark's writer adds it anyway).
        protocol_available(self.spark)

    def native_unsupported(self) -> str | None:
        return protocol_available(self.spark)

    def spark_output_path(self, output_root: str) -> str:
        parsed = urlparse(output_root)
        scheme = parsed.scheme.lower()
        if scheme == "file":
            return output_root
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        conf = self.spark.sparkContext._jsc.hadoopConfiguration()
        candidates = ["s3a", "s3"] if scheme == "s3" else [scheme]
        for candidate in candidates:
            try:
                jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(candidate, conf)
            except Exception:
                continue
            return f"{candidate}://{parsed.netloc}{parsed.path}"
        raise UnsupportedError(
            f"Spark has no Hadoop filesystem for {scheme}:// here (no {'/'.join(candidates)} connector)",
            reason="native_writer",
        )

    def native_job(self, token: str, description: str) -> _NativeJob:
        return _NativeJob(self.spark, token, description)

    def check_server(self) -> None:
        return None  # the executors run what the driver ships (``--py-files`` or the installed wheel)

    def epoch_metadata(self) -> dict[str, str]:
        return {}
