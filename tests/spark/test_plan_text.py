"""The formatted-plan parser (Spark Connect's only view of the physical plan), on plans captured from
PySpark 4.1.3 (tests/spark/data/plans/). No Spark: the walkers of ``spark/plan.py`` read these parsed
plans exactly as they read the classic JVM plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_ckpt_provider.spark import plan
from airflow_ckpt_provider.spark.backend.plan_text import TextPlanNode, attribute_names, parse_plan, walk
from airflow_ckpt_provider.spark.keys import SOURCE_FILE_COLUMN, SOURCE_KEY_COLUMN

PLANS = Path(__file__).parent / "data" / "plans"


def _plan(name: str) -> TextPlanNode:
    root = parse_plan((PLANS / f"{name}.txt").read_text())
    assert root is not None
    return root


def test_the_tree_and_the_node_sections_are_read() -> None:
    root = _plan("skip_nonunique_udf")
    names = [node.name for node in walk(root)]
    # The adaptive wrapper is dropped (its initial plan is what the walkers read, as on classic).
    assert names == [
        "ProjectExec",
        "BatchEvalPythonExec",
        "ShuffleExchangeExec",
        "BroadcastHashJoinExec",
        "ProjectExec",
        "FilterExec",
        "FileSourceScanExec",
        "BroadcastExchangeExec",
        "FilterExec",
        "MapInArrowExec",
        "RangeExec",
    ]
    exchange = walk(root)[2]
    assert exchange.repartitions_by_num()
    assert SOURCE_KEY_COLUMN in exchange.output_names  # from its Input: an exchange prints no Output
    join = walk(root)[3]
    assert "__ckpt_done_key" not in join.output_names  # a left anti join outputs its left side only


def test_attribute_lists_name_bare_columns_and_aliases() -> None:
    guarded = "CASE WHEN isnull(id#15L) THEN cast(raise_error(x, map(keys: [a], values: [b]), NullType) as bigint)"
    listing = f"[id#15L, v#16, {guarded} ELSE id#15L END AS __ckpt_source_key#20L, count(1)#7L]"
    assert attribute_names(listing) == ["id", "v", SOURCE_KEY_COLUMN, None]


def test_skip_completeds_exchange_is_proven_through_the_users_udf() -> None:
    """unique=False: rows were repartitioned by the key into 4 and stayed in their task since."""
    root = _plan("skip_nonunique_udf")
    lineage = plan._lineage(root, SOURCE_KEY_COLUMN)
    assert (lineage.moved, lineage.hashed) == ("", 4)
    assert plan._hash_partitioned_on(root.partitionings, SOURCE_KEY_COLUMN)


def test_a_sort_merge_anti_join_before_the_repartition_is_not_the_repartition() -> None:
    lineage = plan._lineage(_plan("skip_nonunique_merge"), SOURCE_KEY_COLUMN)
    assert lineage.moved  # the nearest exchange is the join's (adaptive execution may split it)


@pytest.mark.parametrize(
    ("name", "moved", "coalesced"),
    [
        ("skip_unique_udf", "", False),
        ("skip_unique_filter_udf", "", False),
        ("skip_unique_broadcast_join", "", False),
        ("skip_unique_coalesce", "", True),
        ("skip_unique_repartition4", "ShuffleExchangeExec moves rows between partitions", False),
        ("skip_unique_union", "UnionExec places one key's rows in several partitions", False),
        ("skip_unique_groupby", "ShuffleExchangeExec moves rows between partitions", False),
    ],
)
def test_unique_keys_stay_in_their_task_only_through_narrow_steps(name: str, moved: str, coalesced: bool) -> None:
    lineage = plan._lineage(_plan(name), SOURCE_KEY_COLUMN)
    assert (lineage.moved, lineage.coalesced) == (moved, coalesced)
    if not moved:
        assert lineage.scan is not None and lineage.scan.name == "FileSourceScanExec"


def test_grouping_by_the_key_is_seen_as_clustered() -> None:
    root = _plan("skip_unique_groupby")
    assert plan._partitioned_within(root.partitionings, {SOURCE_KEY_COLUMN})
    assert not plan._partitioned_within(_plan("skip_unique_udf").partitionings, {SOURCE_KEY_COLUMN})


@pytest.mark.parametrize(
    ("name", "coalesced"),
    [("pyarrow_reader_narrow_udf", False), ("pyarrow_reader_mapinpandas", False), ("pyarrow_reader_coalesce", True)],
)
def test_the_pyarrow_reader_is_found_under_narrow_steps(name: str, coalesced: bool) -> None:
    found: list[object] = []
    assert plan._file_source_paths(_plan(name), SOURCE_FILE_COLUMN, found) == (coalesced, "")
    assert found == ["_ckpt_read_parquet_source_r0"]


def test_only_an_unfiltered_scan_is_a_plain_scan() -> None:
    assert plan._plain_scan(_plan("plain_scan")) is not None
    assert plan._plain_scan(_plan("plain_scan_filter")) is None
    assert plan._plain_scan(_plan("skip_unique_udf")) is None


def test_text_that_is_not_a_plan_proves_nothing() -> None:
    assert parse_plan("== Parsed Logical Plan ==\nsomething") is None
    assert parse_plan("== Physical Plan ==\n???\n") is None
