"""Reading Spark's physical plan: are all rows of a key already in one partition?

A key is done when *one* checkpoint holds it, so every row of a key must reach
the same writer task. The writer hash-partitions on the hidden source-key column
unless this module proves, from the physical plan (before adaptive execution
re-plans it), that the rows are already grouped:

* the plan's output is hash-partitioned on exactly the hidden column (for example
  after :meth:`CheckpointedJob.co_partition`), or
* file keys: every path from the output to ``read_parquet``'s source passes no
  exchange and no union, and that source reads whole files per task (Spark's
  Parquet scan, when it splits no file, or the pyarrow reader) — narrow operators
  (project, filter, map, broadcast join of another table) never move a row to
  another partition.

Anything it cannot prove counts as not grouped (one extra shuffle, never a wrong
result). The walkers read the plan through the :class:`PlanNode` protocol; the
session's backend (:mod:`airflow_ckpt_provider.spark.backend`) builds it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

if TYPE_CHECKING:
    from airflow_ckpt_provider.spark.backend.base import InputFile, Partitioning, PlanNode, SparkBackend

log = logging.getLogger(__name__)

#: Name of the Python function that reads ``read_parquet``'s files; the plan shows it.
READER_MARKER = "_ckpt_read_parquet_source"


@dataclass(frozen=True)
class PlanShape:
    """``grouped``: all rows of each hidden key are in one partition.

    ``task_files``: when writer task *p* is exactly task *p* of the file source (no
    coalesce), the files each task reads: the writer then marks all of them done,
    even files whose rows were all filtered out, and needs no per-row key column.
    ``num_partitions``: writer tasks, or None if unknown.
    """

    grouped: bool
    num_partitions: int | None
    task_files: tuple[tuple[str, ...], ...] | None
    reason: str


def _hash_partitioned_on(partitionings: tuple[Partitioning, ...], column: str) -> bool:
    return any(p.kind == "hash" and p.columns == (column,) for p in partitionings)


def _num_partitions(partitionings: tuple[Partitioning, ...]) -> int | None:
    return partitionings[0].num_partitions if partitionings else None


def _scans_below(node: PlanNode) -> tuple[list[PlanNode], str]:
    """Every ``FileSourceScanExec`` under ``node``, or a problem if rows cross partitions on the way."""
    name = node.name
    if name == "FileSourceScanExec":
        return [node], ""
    if "Exchange" in name or name == "UnionExec" or "Cartesian" in name:
        return [], f"{name} under the source-key column moves rows between partitions"
    scans: list[PlanNode] = []
    for child in node.children:
        found, problem = _scans_below(child)
        if problem:
            return [], problem
        scans.extend(found)
    return scans, ""


def _file_source_paths(node: PlanNode, column: str, found: list[PlanNode | str]) -> tuple[bool, str]:
    """Walk the paths that carry ``column``: (coalesced on the way, problem); appends file sources to ``found``.

    A source is the name of a ``read_parquet`` reader function (pyarrow reader) or
    the ``FileSourceScanExec`` under the node that derives the column (Spark's reader).
    """
    if column not in node.output_names:
        return False, ""  # this subtree contributes no source keys (e.g. a broadcast dimension table)
    name = node.name
    if "MapInArrow" in name:
        text = node.describe()
        start = text.find(READER_MARKER)
        if start >= 0:
            end = start + len(READER_MARKER)
            while end < len(text) and (text[end].isalnum() or text[end] == "_"):
                end += 1
            found.append(text[start:end])
            return False, ""
    if "Exchange" in name:
        return False, f"{name} moves rows between partitions"
    if name == "UnionExec" or "Cartesian" in name:
        return False, f"{name} places one key's rows in several partitions"
    carriers = [c for c in node.children if column in c.output_names]
    if not carriers:
        # This node derives the column (from _metadata.file_path): its rows come from the scan below.
        scans, problem = _scans_below(node)
        if problem:
            return False, problem
        if len(scans) != 1:
            return False, f"{name} derives the source-key column from {len(scans)} file scans"
        found.append(scans[0])
        return False, ""
    coalesced = name == "CoalesceExec"
    for child in carriers:
        child_coalesced, problem = _file_source_paths(child, column, found)
        if problem:
            return False, problem
        coalesced = coalesced or child_coalesced
    return coalesced, ""


def native_layout(backend: SparkBackend, df: DataFrame, column: str) -> tuple[tuple[str, ...], ...] | str:
    """For a DataFrame that derives ``column`` from a Spark file scan: files per task, or why not."""
    plan = backend.plan(df)
    if plan is None:
        return "the physical plan is not available"
    found: list[PlanNode | str] = []
    try:
        _, problem = _file_source_paths(plan, column, found)
        if problem:
            return problem
        if len(found) != 1 or isinstance(found[0], str):
            return "no single Spark file scan under the source-key column"
        return backend.scan_layout(found[0])
    except Exception as exc:
        return f"plan inspection failed: {exc}"


def plan_shape(
    backend: SparkBackend,
    df: DataFrame,
    column: str,
    *,
    file_keyed: bool = False,
    reader_tasks: Mapping[str, tuple[tuple[str, ...], ...]] | None = None,
) -> PlanShape:
    """How ``df``'s rows are partitioned with respect to the hidden key ``column``.

    ``file_keyed``: ``column`` holds input files (from ``read_parquet``);
    ``reader_tasks``: the job's pyarrow readers (function name → files per task).
    """
    plan = backend.plan(df)
    if plan is None:
        return PlanShape(False, None, None, "the physical plan is not available")
    found: list[PlanNode | str] = []
    try:
        partitioning = plan.partitionings
        if _hash_partitioned_on(partitioning, column):
            return PlanShape(True, _num_partitions(partitioning), None, f"hash-partitioned on {column}")
        if not file_keyed:
            return PlanShape(False, None, None, f"not hash-partitioned on {column}")
        coalesced, problem = _file_source_paths(plan, column, found)
        if not problem and len(found) != 1:
            problem = f"{len(found)} file sources carry the source-key column"
        layout: tuple[tuple[str, ...], ...] | str = ()
        if not problem:
            source = found[0]
            if isinstance(source, str):
                layout = (reader_tasks or {}).get(source, f"unknown reader {source}")
            else:
                layout = backend.scan_layout(source)
            if isinstance(layout, str):
                problem = layout
    except Exception as exc:
        log.info("could not inspect the physical plan (%s); the writer will shuffle by key", exc)
        return PlanShape(False, None, None, f"plan inspection failed: {exc}")
    if problem:
        return PlanShape(False, None, None, problem)
    assert not isinstance(layout, str)
    if coalesced:
        return PlanShape(True, _num_partitions(partitioning), None, "whole files per task (coalesced)")
    return PlanShape(True, len(layout), layout, "whole files per task")


# ---------------------------------------------------------------------------------------------- row keys


@dataclass(frozen=True)
class RowLineage:
    """How the rows reaching a writer relate to where their source-key ``column`` was derived.

    ``moved``: why rows may have left the task that derived their key (an exchange, a
    union, ...), or "" if every row stayed in its task. ``coalesced``: tasks were merged
    (keys stay together, but writer task *p* is not source task *p*). ``scan``: the one
    Spark file scan the key was derived over, with no exchange in between, if there is one.
    """

    moved: str
    coalesced: bool
    scan: PlanNode | None
    #: The nearest exchange below the writer hash-partitions by ``column`` into this many
    #: partitions (a ``repartition(n, column)``, which adaptive execution never splits or merges).
    hashed: int | None = None


#: Physical nodes that neither drop, add nor move rows of a file scan (column selection, codegen glue).
_ROW_PRESERVING = {"ProjectExec", "ColumnarToRowExec", "InputAdapter", "WholeStageCodegenExec"}


def source_listing(backend: SparkBackend, df: DataFrame) -> tuple[InputFile, ...] | None:
    """Every file ``df`` reads, sorted, if ``df`` is exactly the rows of those files; else None.

    Exactly: a Spark file scan under deterministic projections only (no data filter, no
    join, no UDF), so that the same files with the same sizes and modification times
    mean the same input rows. A partition filter only selects files, so it is fine.
    The files and their identities come from Spark itself (``backend.input_files``).
    """
    plan = backend.plan(df)
    if plan is None:
        return None
    try:
        scan = _plain_scan(plan)
        if scan is None:
            return None
        listed = backend.input_files(df, scan)
        if listed is None:
            return None
        files = {file.path: file for file in listed}
    except Exception as exc:  # an internal API that moved must cost the input records, not the job
        log.info("could not list the input files of the row-key source (%s); resuming by keys only", exc)
        return None
    return tuple(files[p] for p in sorted(files))


def _plain_scan(node: PlanNode) -> PlanNode | None:
    name = node.name
    if name == "FileSourceScanExec":
        return None if node.has_data_filters() else node
    if name not in _ROW_PRESERVING:
        return None
    if name == "ProjectExec" and not node.deterministic():
        return None
    children = node.children
    return _plain_scan(children[0]) if len(children) == 1 else None


def row_key_lineage(backend: SparkBackend, df: DataFrame, column: str) -> RowLineage:
    """Walk from the writer's input down the paths that carry ``column`` to where it was derived."""
    plan = backend.plan(df)
    if plan is None:
        return RowLineage("the physical plan is not available", False, None)
    try:
        return _lineage(plan, column)
    except Exception as exc:
        log.info("could not inspect the physical plan (%s); the writer will shuffle by key", exc)
        return RowLineage(f"plan inspection failed: {exc}", False, None)


def _lineage(node: PlanNode, column: str) -> RowLineage:
    name = node.name
    if "Exchange" in name:
        if _repartitions_by(node, column):
            return RowLineage("", False, None, _num_partitions(node.partitionings))
        return RowLineage(f"{name} moves rows between partitions", False, None)
    if name == "UnionExec" or "Cartesian" in name:
        return RowLineage(f"{name} places one key's rows in several partitions", False, None)
    carriers = [c for c in node.children if column in c.output_names]
    if len(carriers) > 1:
        return RowLineage(f"{name} combines {len(carriers)} inputs that carry the source key", False, None)
    if not carriers:
        scans, problem = _scans_below(node)
        return RowLineage("", False, scans[0] if not problem and len(scans) == 1 else None)
    below = _lineage(carriers[0], column)
    if below.moved:
        return below
    return RowLineage("", below.coalesced or name == "CoalesceExec", below.scan, below.hashed)


def _repartitions_by(exchange: PlanNode, column: str) -> bool:
    """A shuffle by exactly ``column`` into a fixed number of partitions (``repartition(n, column)``).

    Other shuffles on the column (a join's or an aggregation's) may be split or merged by
    adaptive execution at run time, which could split a key's rows between tasks.
    """
    if exchange.name != "ShuffleExchangeExec" or not _hash_partitioned_on(exchange.partitionings, column):
        return False
    return exchange.repartitions_by_num()


def clustered_on(backend: SparkBackend, df: DataFrame, columns: tuple[str, ...]) -> bool:
    """True if Spark's plan already puts all rows with equal ``columns`` in one partition.

    That is a hash or range partitioning on a non-empty subset of ``columns`` (for example
    after ``groupBy(key)`` or ``repartition(key)``): equal keys have equal values in it.
    """
    plan = backend.plan(df)
    if plan is None:
        return False
    try:
        return _partitioned_within(plan.partitionings, set(columns))
    except Exception as exc:
        log.info("could not read the output partitioning (%s)", exc)
        return False


def _partitioned_within(partitionings: tuple[Partitioning, ...], columns: set[str]) -> bool:
    return any(
        p.kind in ("hash", "range") and bool(p.columns) and all(c is not None and c in columns for c in p.columns)
        for p in partitionings
    )
