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
result). Only classic PySpark exposes the plan; with Spark Connect the writer
always shuffles.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame

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


def _seq(scala_seq: Any) -> list[Any]:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]


def _name(node: Any) -> str:
    return str(node.getClass().getSimpleName())


def _output_names(node: Any) -> set[str]:
    return {str(a.name()) for a in _seq(node.output())}


def physical_plan(df: DataFrame) -> Any | None:
    """The JVM physical plan with its exchanges (before adaptive re-planning), or None (Spark Connect)."""
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        return None
    try:
        plan = jdf.queryExecution().executedPlan()
        if _name(plan) == "AdaptiveSparkPlanExec":
            plan = plan.initialPlan()
        return plan
    except Exception as exc:  # a py4j surprise must cost a shuffle, not the job
        log.info("could not read the physical plan (%s); the writer will shuffle by key", exc)
        return None


def _hash_partitioned_on(partitioning: Any, column: str) -> bool:
    name = _name(partitioning)
    if name == "PartitioningCollection":
        return any(_hash_partitioned_on(p, column) for p in _seq(partitioning.partitionings()))
    if "HashPartitioning" not in name:
        return False
    expressions = _seq(partitioning.expressions())
    return (
        len(expressions) == 1 and _name(expressions[0]) == "AttributeReference" and str(expressions[0].name()) == column
    )


def _num_partitions(partitioning: Any) -> int | None:
    try:
        count = int(partitioning.numPartitions())
    except Exception:
        return None
    return count if count > 0 else None


def _scans_below(node: Any) -> tuple[list[Any], str]:
    """Every ``FileSourceScanExec`` under ``node``, or a problem if rows cross partitions on the way."""
    name = _name(node)
    if name == "FileSourceScanExec":
        return [node], ""
    if "Exchange" in name or name == "UnionExec" or "Cartesian" in name:
        return [], f"{name} under the source-key column moves rows between partitions"
    scans: list[Any] = []
    for child in _seq(node.children()):
        found, problem = _scans_below(child)
        if problem:
            return [], problem
        scans.extend(found)
    return scans, ""


def _file_source_paths(node: Any, column: str, found: list[Any]) -> tuple[bool, str]:
    """Walk the paths that carry ``column``: (coalesced on the way, problem); appends file sources to ``found``.

    A source is the name of a ``read_parquet`` reader function (pyarrow reader) or
    the ``FileSourceScanExec`` under the node that derives the column (Spark's reader).
    """
    if column not in _output_names(node):
        return False, ""  # this subtree contributes no source keys (e.g. a broadcast dimension table)
    name = _name(node)
    if "MapInArrow" in name:
        text = str(node.simpleString(5))
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
    children = _seq(node.children())
    carriers = [c for c in children if column in _output_names(c)]
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


def native_layout(df: DataFrame, column: str) -> tuple[tuple[str, ...], ...] | str:
    """For a DataFrame that derives ``column`` from a Spark file scan: files per task, or why not."""
    plan = physical_plan(df)
    if plan is None:
        return "the physical plan is not available"
    found: list[Any] = []
    try:
        _, problem = _file_source_paths(plan, column, found)
        if problem:
            return problem
        if len(found) != 1 or isinstance(found[0], str):
            return "no single Spark file scan under the source-key column"
        return scan_layout(found[0])
    except Exception as exc:
        return f"plan inspection failed: {exc}"


def plan_shape(
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
    plan = physical_plan(df)
    if plan is None:
        return PlanShape(False, None, None, "the physical plan is not available")
    found: list[Any] = []
    try:
        partitioning = plan.outputPartitioning()
        if _hash_partitioned_on(partitioning, column):
            return PlanShape(True, _num_partitions(partitioning), None, f"hash-partitioned on {column}")
        if not file_keyed:
            return PlanShape(False, None, None, f"not hash-partitioned on {column}")
        coalesced, problem = _file_source_paths(plan, column, found)
        if not problem and len(found) != 1:
            problem = f"{len(found)} file sources carry the source-key column"
        layout: tuple[tuple[str, ...], ...] | str = ()
        if not problem:
            if isinstance(found[0], str):
                layout = (reader_tasks or {}).get(found[0], f"unknown reader {found[0]}")
            else:
                layout = scan_layout(found[0])
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
