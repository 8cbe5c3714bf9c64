"""``spark/keys.py``: key columns and their canonical Arrow types (no Spark needed)."""

from __future__ import annotations

import pyarrow as pa

from airflow_ckpt_provider.spark.keys import distinct_keys, key_columns, normalize_key_type
from airflow_ckpt_provider.store.errors import InvalidArgumentError
from tests.support.errors import raises_reason


def test_key_types_are_canonical() -> None:
    assert normalize_key_type(pa.large_string()) == pa.string()
    struct = pa.struct([pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.large_string())])
    assert str(normalize_key_type(struct)) == "struct<a: int64, b: string>"
    assert key_columns("id") == ("id",) and key_columns(["a", "b"]) == ("a", "b")
    with raises_reason(InvalidArgumentError, "key_columns", match="names a column twice"):
        key_columns(["a", "a"])
    with raises_reason(InvalidArgumentError, "key_columns", match="non-empty list"):
        key_columns([])


def test_distinct_keys_handles_structs() -> None:
    keys = pa.array([{"a": 1, "b": "x"}, {"a": 1, "b": "x"}, {"a": 2, "b": "y"}])
    assert sorted(distinct_keys([keys, keys]).to_pylist(), key=str) == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
    assert sorted(distinct_keys([pa.array(["b", "a", "b"], pa.large_string())]).to_pylist()) == ["a", "b"]
