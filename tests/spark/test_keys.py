"""``spark/keys.py``: key columns and their canonical Arrow types (no Spark needed)."""

from __future__ import annotations

import pyarrow as pa

from airflow_ckpt_provider.spark.keys import distinct_keys, key_columns, normalize_key_type, repeated_key_example
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


def test_a_repeated_key_example_is_one_key_met_twice_shortened() -> None:
    assert repeated_key_example(pa.array([3, 1, 3])) == ", e.g. 3"
    assert repeated_key_example(pa.chunked_array([["a", "b"], ["b"]])) == ", e.g. 'b'"  # across chunks
    composite = pa.array([{"a": 1, "b": "x"}, {"a": 1, "b": "x"}])
    assert repeated_key_example(composite) == ", e.g. {'a': 1, 'b': 'x'}"
    long = repeated_key_example(pa.array(["k" * 4000] * 2))
    assert long == ", e.g. '" + "k" * 76 + "..." and len(long) == len(", e.g. ") + 80
    assert repeated_key_example(pa.array([1, 2])) == ""  # nothing repeats: no example
