"""What the Spark side needs from a session, whatever its kind: the ``SparkBackend`` protocol, the
``PlanNode`` protocol that :mod:`airflow_ckpt_provider.spark.plan` walks, and the scan facts a
backend returns (``InputFile``, ``FilePiece``; they live here so that the plan walkers import the
backend's types and never the other way round).

A classic session (Py4J, the JVM in this process) and a Spark Connect session (gRPC to a
server) reach the same facts by different means; everything that differs lives behind
these two protocols, so the rest of ``spark/`` never touches the JVM (``tests/test_project.py``
checks it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class InputFile:
    """An input file as Spark's scan sees it: ``path`` exactly as ``_metadata.file_path`` shows it."""

    path: str
    size: int
    #: Modification time in microseconds, as ``_metadata.file_modification_time`` holds it.
    mtime_us: int

    @property
    def identity(self) -> str:
        """What must be equal for two listings to name the same file content (see docs/row-keys.md)."""
        return f"{self.path}|{self.size}|{self.mtime_us}"

    def to_json(self) -> list[Any]:
        return [self.path, self.size, self.mtime_us]

    @classmethod
    def from_json(cls, item: Any) -> InputFile:
        path, size, mtime = item
        return cls(str(path), int(size), int(mtime))


@dataclass(frozen=True)
class FilePiece:
    """The bytes ``[start, start + length)`` of ``file`` that one scan task reads (Parquet: the row
    groups whose middle lies there)."""

    file: InputFile
    start: int
    length: int

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.length >= self.file.size


@dataclass(frozen=True)
class Partitioning:
    """One output partitioning of a plan node.

    ``kind``: ``"hash"``, ``"range"`` or ``"other"``; ``columns``: per partitioning expression, the
    attribute's name when the expression is a bare column, else None; ``num_partitions``: None if unknown.
    ``tokens``: the bare columns as a text plan prints them (``name#id``: the id tells one column from
    another of the same name); empty for the classic backend, which reads the partitioning itself.
    """

    kind: str
    columns: tuple[str | None, ...] = ()
    num_partitions: int | None = None
    tokens: tuple[str, ...] = ()


class PlanNode(Protocol):
    """A physical plan node as the walkers of :mod:`airflow_ckpt_provider.spark.plan` see it.

    ``name`` is Spark's class name of the node (``ProjectExec``, ``ShuffleExchangeExec``,
    ``FileSourceScanExec``, ...), whatever the backend read it from.
    """

    @property
    def name(self) -> str: ...

    @property
    def children(self) -> Sequence[PlanNode]: ...

    @property
    def output_names(self) -> frozenset[str]: ...

    @property
    def partitionings(self) -> tuple[Partitioning, ...]:
        """The node's output partitioning (several when Spark knows it by more than one: a collection)."""
        ...

    def describe(self) -> str:
        """A one-line text of the node with its arguments (a Python function's name shows there)."""
        ...

    def repartitions_by_num(self) -> bool:
        """An exchange that ``repartition(n, ...)`` asked for (adaptive execution never splits or merges it)."""
        ...

    def has_data_filters(self) -> bool:
        """A file scan that filters rows (not only whole files by partition values)."""
        ...

    def deterministic(self) -> bool:
        """A projection whose expressions are all deterministic."""
        ...


class FileCounter(Protocol):
    """Counts, from the executors, files a reader opened (a classic accumulator)."""

    def add(self, term: int) -> None: ...

    @property
    def value(self) -> int: ...


class SparkBackend(Protocol):
    """How the Spark side reaches one session: classic (Py4J) or Spark Connect. Chosen once per job."""

    #: ``"classic"`` or ``"connect"``.
    kind: str

    def default_parallelism(self) -> int:
        """The cluster's default task count (cores)."""
        ...

    def app_name(self) -> str:
        """The application's name (``spark.app.name``): the epoch owner is derived from it."""
        ...

    def python_daemon(self) -> str | None:
        """``spark.python.daemon.module`` of this session's executors (None: PySpark's own, or unknown)."""
        ...

    def plan(self, df: DataFrame) -> PlanNode | None:
        """``df``'s physical plan before adaptive re-planning, or None when it cannot be read."""
        ...

    def scan_layout(self, scan: PlanNode) -> tuple[tuple[str, ...], ...] | str:
        """The files each task of a Spark file scan reads, or why not (a split file, no per-task view)."""
        ...

    def scan_pieces(self, scan: PlanNode) -> tuple[tuple[FilePiece, ...], ...] | None:
        """Per task of a Spark file scan, the file pieces it reads; None where the backend cannot see them."""
        ...

    def input_files(self, df: DataFrame, scan: PlanNode) -> Sequence[InputFile] | None:
        """Every file ``df``'s plain file ``scan`` reads, as Spark's ``_metadata`` names them (None: unknown)."""
        ...

    def job_description(self, text: str) -> AbstractContextManager[None]:
        """Label the Spark jobs run inside the block (the UI shows it)."""
        ...

    def file_counter(self) -> FileCounter | None:
        """A counter the executors add to, or None where the backend has none."""
        ...

    def prepare_plan_tools(self) -> None:
        """Load what plan inspection uses (the package's jar on classic), before a source is planned."""
        ...

    def native_unsupported(self) -> str | None:
        """Why Spark's own writer (the commit-protocol jar) cannot run in this session, or None if it can."""
        ...

    def spark_output_path(self, output_root: str) -> str:
        """The output as Spark's Hadoop filesystems name it (UnsupportedError("native_writer"): why not)."""
        ...

    def native_job(self, token: str, description: str) -> NativeJobHandle:
        """The JVM side of one native write: its committed tasks, and a job group to cancel it by."""
        ...

    def check_server(self) -> None:
        """Raise :class:`UnsupportedError` (``server_package``) if the executors cannot run this package (Connect:
        probed once)."""
        ...

    def epoch_metadata(self) -> dict[str, str]:
        """What an epoch this job opens records about the session (never a secret)."""
        ...


class NativeJobHandle(Protocol):
    """One native write's committed-task queue (``CheckpointCommitProtocol.open(token)``) and job group."""

    def drain(self) -> str: ...

    def close(self) -> str: ...

    def job_tasks(self) -> int: ...

    def cancel(self) -> None: ...

    def scope(self) -> AbstractContextManager[None]:
        """Run the write's Spark job in this write's job group (the caller's group is put back after)."""
        ...


#: A constructor of backends by session (only ``session_backend`` picks one).
BackendFactory = Callable[[Any], SparkBackend]
