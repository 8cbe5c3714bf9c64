"""Spark's formatted physical plan (``explain(mode="formatted")``) parsed into :class:`PlanNode` s.

Over Spark Connect the plan is only available as text. The format (Spark 4.1, checked on
captured plans in tests/spark/data/plans/) is a tree of ``Name (id)`` lines followed by one
section per node::

    (9) Exchange
    Input [4]: [id#15L, v#16, g#17L, __ckpt_source_key#20L]
    Arguments: hashpartitioning(__ckpt_source_key#20L, 4), REPARTITION_BY_NUM, [plan_id=66]

Node names are mapped to Spark's class names (``Exchange`` -> ``ShuffleExchangeExec``), so the
walkers of :mod:`airflow_ckpt_provider.spark.plan` read both kinds of plan alike. Only some
nodes print their ``Output``; the others' is derived (their ``Input``, a map's result list,
an aggregate's ``Results``, a join's sides). The output partitioning is derived the way Spark
derives it for the nodes whose rule is simple; any other node gets an unknown partitioning.

The parser only ever proves less than Spark knows: an unknown node or a line it cannot read
means "not proven" to the walkers (one extra shuffle, never a wrong skip).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from airflow_ckpt_provider.spark.backend.base import Partitioning

_TREE_LINE = re.compile(r"^(?P<indent>[ :|+\-]*?)(?:[+:]- )?(?:\* )?(?P<text>[A-Za-z].*?) \((?P<id>\d+)\)\s*$")
_MARKER = re.compile(r"^([ :]*)[+:]- ")
_SECTION_HEAD = re.compile(r"^\((?P<id>\d+)\) (?P<text>.*?)\s*$")
_FIELD = re.compile(r"^(?P<key>[A-Za-z][A-Za-z ]*?)(?: \[\d+\])?\s*: ?(?P<value>.*)$")
_ATTRIBUTE = re.compile(r"^(?P<name>.+?)#\d+L?$")
_COUNT = re.compile(r"^\d+$")
_FILE_FORMATS = {"parquet", "orc", "csv", "json", "text", "avro", "binaryFile"}
#: Functions whose value changes between evaluations: a projection holding one is not deterministic.
_NONDETERMINISTIC: tuple[str, ...] = (
    *("rand(", "randn(", "random(", "uuid(", "shuffle(", "monotonically_increasing_id("),
    *("spark_partition_id(", "input_file_name(", "input_file_block_", "try_reflect(", "reflect("),
)
_RENAMES = {"Exchange": "ShuffleExchangeExec", "MapInArrow": "MapInArrowExec"}


def split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and parentheses, each part stripped."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index].strip())
            start = index + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


def attribute_names(listing: str) -> list[str | None]:
    """The column names of a printed attribute list ``[a#1, f(b#2) AS c#3L, ...]``; None for an expression."""
    body = listing.strip()
    if not (body.startswith("[") and body.endswith("]")):
        return []
    names: list[str | None] = []
    for item in split_top_level(body[1:-1]):
        target = item.rsplit(" AS ", 1)[-1]
        found = _ATTRIBUTE.match(target)
        names.append(found.group("name") if found and "(" not in found.group("name") else None)
    return names


def _class_name(text: str) -> str:
    words = text.split()
    if not words:
        return "UnknownExec"
    if words[0] == "Scan" and len(words) > 1 and words[1] in _FILE_FORMATS:
        return "FileSourceScanExec"
    return _RENAMES.get(words[0], f"{words[0]}Exec")


@dataclass
class TextPlanNode:
    """One node of a formatted plan; the facts the walkers ask for are derived once, when first asked."""

    text: str
    node_id: int
    children: list[TextPlanNode] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)

    @cached_property
    def name(self) -> str:
        return _class_name(self.text)

    # ------------------------------------------------------------------ outputs

    @cached_property
    def _output_attributes(self) -> list[str | None]:
        """The node's output columns in order (None: a column the text does not name)."""
        if "Output" in self.fields:
            return attribute_names(self.fields["Output"])
        name = self.name
        if name in ("MapInArrowExec", "MapInPandasExec"):
            parts = split_top_level(self.fields.get("Arguments", ""))
            return attribute_names(parts[1]) if len(parts) > 1 else []
        if "Results" in self.fields:
            return attribute_names(self.fields["Results"])
        if name.endswith("JoinExec"):
            join = self.fields.get("Join type", "")
            left = self.children[0]._output_attributes if self.children else []
            if join in ("LeftAnti", "LeftSemi") or join.startswith("ExistenceJoin"):
                return left
            return [a for child in self.children for a in child._output_attributes]
        if name == "UnionExec":
            return self.children[0]._output_attributes if self.children else []
        if "Input" in self.fields:
            return attribute_names(self.fields["Input"])
        if len(self.children) == 1:
            return self.children[0]._output_attributes
        return []

    @cached_property
    def output_names(self) -> frozenset[str]:
        return frozenset(a for a in self._output_attributes if a is not None)

    @cached_property
    def _output_tokens(self) -> frozenset[str]:
        """Output columns as printed (``name#id``) when they are bare attributes (same id: the same column)."""
        listing = self.fields.get("Output") or self.fields.get("Results") or ""
        body = listing.strip()[1:-1] if listing.strip().startswith("[") else ""
        return frozenset(item for item in split_top_level(body) if _ATTRIBUTE.match(item) and "(" not in item)

    # ------------------------------------------------------------------ partitioning

    @cached_property
    def partitionings(self) -> tuple[Partitioning, ...]:
        name = self.name
        if "Exchange" in name and name != "BroadcastExchangeExec":
            return (_exchange_partitioning(self.fields.get("Arguments", "")),)
        if name == "CoalesceExec":
            count = self.fields.get("Arguments", "").strip()
            return (Partitioning("other", (), int(count) if _COUNT.match(count) else None),)
        if name in ("ProjectExec", "HashAggregateExec", "SortAggregateExec", "ObjectHashAggregateExec"):
            return self._projected(self.children[0].partitionings if len(self.children) == 1 else ())
        if name in _PRESERVING and len(self.children) == 1:
            return self.children[0].partitionings
        if name.endswith("JoinExec") and len(self.children) == 2:
            return _join_partitionings(self)
        return (Partitioning("other"),)

    def _projected(self, below: tuple[Partitioning, ...]) -> tuple[Partitioning, ...]:
        """``below`` as far as every column it names passes this projection unchanged (same ``name#id``)."""
        kept = [p for p in below if p.kind != "other" and p.tokens and set(p.tokens) <= self._output_tokens]
        return tuple(kept) or (Partitioning("other"),)

    # ------------------------------------------------------------------ the rest of PlanNode

    def describe(self) -> str:
        return f"{self.text} {self.fields.get('Arguments', '')}".strip()

    def repartitions_by_num(self) -> bool:
        return "REPARTITION_BY_NUM" in self.fields.get("Arguments", "")

    def has_data_filters(self) -> bool:
        pushed = self.fields.get("PushedFilters", "").strip()
        return pushed not in ("", "[]")

    def deterministic(self) -> bool:
        text = self.fields.get("Output", "")
        return not any(marker in text for marker in _NONDETERMINISTIC)


#: Unary nodes whose output partitioning is their child's (rows never leave their partition).
_PRESERVING = {
    "FilterExec",
    "SortExec",
    "ColumnarToRowExec",
    "RowToColumnarExec",
    "BatchEvalPythonExec",
    "ArrowEvalPythonExec",
    "MapInArrowExec",
    "MapInPandasExec",
    "InputAdapterExec",
    "WholeStageCodegenExec",
}


def _exchange_partitioning(arguments: str) -> Partitioning:
    found = re.match(r"^(?P<kind>hashpartitioning|rangepartitioning)\((?P<body>.*)\)\s*(,|$)", arguments)
    if found:
        parts = split_top_level(found.group("body"))
        count = parts[-1] if parts else ""
        columns: list[str | None] = []
        tokens: list[str] = []
        for part in parts[:-1]:
            expression = part.split(" ")[0] if found.group("kind") == "rangepartitioning" else part
            attribute = _ATTRIBUTE.match(expression)
            bare = attribute is not None and "(" not in expression
            columns.append(attribute.group("name") if attribute and bare else None)
            if bare:
                tokens.append(expression)
        kind = "hash" if found.group("kind") == "hashpartitioning" else "range"
        return Partitioning(kind, tuple(columns), int(count) if _COUNT.match(count) else None, tuple(tokens))
    other = re.match(r"^\w+Partitioning\((\d+)\)", arguments)
    if other:
        return Partitioning("other", (), int(other.group(1)))
    return Partitioning("other", (), 1 if arguments.startswith("SinglePartition") else None)


def _join_partitionings(node: TextPlanNode) -> tuple[Partitioning, ...]:
    left, right = node.children
    join = node.fields.get("Join type", "")
    if node.name.startswith("Broadcast"):
        streamed = right if "BuildLeft" in node.text else left
        return streamed.partitionings
    if join == "Inner":
        return left.partitionings + right.partitionings
    if join in ("LeftOuter", "LeftAnti", "LeftSemi"):
        return left.partitionings
    if join == "RightOuter":
        return right.partitionings
    return (Partitioning("other"),)


def parse_plan(text: str) -> TextPlanNode | None:
    """The root of the physical plan printed in ``text`` (an adaptive plan: its initial plan), or None."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("== Physical Plan =="))
    except StopIteration:
        return None
    nodes: dict[int, TextPlanNode] = {}
    stack: list[tuple[int, TextPlanNode]] = []
    root: TextPlanNode | None = None
    index = start + 1
    while index < len(lines) and lines[index].strip():
        line = lines[index]
        index += 1
        found = _TREE_LINE.match(line)
        if not found:
            return None
        marker = _MARKER.match(line)
        depth = len(marker.group(1)) // 3 + 1 if marker else 0
        node = TextPlanNode(found.group("text").strip(), int(found.group("id")))
        nodes[node.node_id] = node
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            stack[-1][1].children.append(node)
        elif root is None:
            root = node
        else:
            return None
        stack.append((depth, node))
    current: TextPlanNode | None = None
    for line in lines[index:]:
        head = _SECTION_HEAD.match(line)
        if head:
            current = nodes.get(int(head.group("id")))
            continue
        field_line = _FIELD.match(line)
        if current is not None and field_line:
            current.fields.setdefault(field_line.group("key"), field_line.group("value"))
    if root is not None and root.name == "AdaptiveSparkPlanExec" and len(root.children) == 1:
        root = root.children[0]
    return root


def walk(node: TextPlanNode) -> Sequence[TextPlanNode]:
    """``node`` and every node under it, depth first (for tests and logs)."""
    found = [node]
    for child in node.children:
        found.extend(walk(child))
    return found
