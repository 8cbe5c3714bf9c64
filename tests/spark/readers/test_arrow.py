"""``spark/readers/arrow.py``: how whole files are packed into reader tasks (no Spark needed)."""

from __future__ import annotations

from airflow_ckpt_provider.spark.readers.arrow import SourceFile, plan_groups


def test_file_groups_never_split_a_file_and_keep_order() -> None:
    files = [SourceFile(i, f"/f{i}", size) for i, size in enumerate([50, 10, 10, 10, 200, 5, 5])]
    groups = plan_groups(files, max_bytes=100, min_groups=4)
    assert [f.index for g in groups for f in g] == list(range(7))
    assert all(sum(f.size for f in g) <= 100 or len(g) == 1 for g in groups)
    assert plan_groups([], max_bytes=100, min_groups=4) == []
