"""Reading Spark's physical plan: are all rows of a key already in one partition?

A key is done when *one* checkpoint holds it, so every row of a key must reach
the same writer task. The writer hash-partitions on the hidden source-key column
unless this module proves, from the physical plan (before adaptive execution
re-plans it), that the rows are already grouped:

* the plan's output is hash-partitioned on exactly the hidden column (for example
  after :meth:`CheckpointedJob.co_partition`), or
* file keys: every path from the output to ``read_parquet``'s source passes no
  exchange and no union — each task of that source reads whole files, and
  narrow operators (project, filter, map, broadcast join of another table) never
  move a row to another partition.

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

    ``identity``: partition *p* is exactly task *p* of the file source (no coalesce):
    the writer may then mark every file of that task done, even files whose rows
    were all filtered out. ``num_partitions``: writer tasks, or None if unknown.
    """

    grouped: bool
    identity: bool
    num_partitions: int | None
    file_source: str | None
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


def _file_source_paths(node: Any, column: str, found: list[str]) -> tuple[bool, str]:
    """Walk the paths that carry ``column``: (coalesced on the way, problem); appends file sources to ``found``."""
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
    if not children:
        return False, f"{name} produces the source-key column without read_parquet"
    coalesced = name == "CoalesceExec"
    for child in children:
        child_coalesced, problem = _file_source_paths(child, column, found)
        if problem:
            return False, problem
        coalesced = coalesced or child_coalesced
    return coalesced, ""


def plan_shape(df: DataFrame, column: str, *, file_sources: Mapping[str, int] | None = None) -> PlanShape:
    """How ``df``'s rows are partitioned with respect to the hidden key ``column``.

    ``file_sources``: the job's ``read_parquet`` sources (function name → task count).
    """
    plan = physical_plan(df)
    if plan is None:
        return PlanShape(False, False, None, None, "the physical plan is not available")
    found: list[str] = []
    try:
        partitioning = plan.outputPartitioning()
        if _hash_partitioned_on(partitioning, column):
            return PlanShape(True, False, _num_partitions(partitioning), None, f"hash-partitioned on {column}")
        if not file_sources:
            return PlanShape(False, False, None, None, f"not hash-partitioned on {column}")
        coalesced, problem = _file_source_paths(plan, column, found)
    except Exception as exc:
        log.info("could not inspect the physical plan (%s); the writer will shuffle by key", exc)
        return PlanShape(False, False, None, None, f"plan inspection failed: {exc}")
    if problem:
        return PlanShape(False, False, None, None, problem)
    if len(found) != 1 or found[0] not in file_sources:
        return PlanShape(False, False, None, None, f"file sources in the plan: {found}")
    source = found[0]
    if coalesced:
        return PlanShape(True, False, _num_partitions(partitioning), source, "whole files per task (coalesced)")
    return PlanShape(True, True, file_sources[source], source, "whole files per task")
