"""duplicate_keys: the commit's overlap check, by sorting for one column of integers or strings, by counting
otherwise; both must give the same answer."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_ckpt_provider.store.keys import distinct_if_ascending, duplicate_keys, sorted_has_duplicates


def _table(*chunks: list[object], type: pa.DataType | None = None) -> pa.Table:
    return pa.table({"key": pa.chunked_array([pa.array(c, type) for c in chunks], type)})


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        (_table([1, 2], [3, 4], type=pa.int64()), None),
        (_table([1, 2], [3, 1], type=pa.int64()), (1, [{"key": 1}])),
        (_table([7, 7, 7], type=pa.int32()), (2, [{"key": 7}])),
        (_table(["b", "a"], ["c", "d"]), None),
        (_table(["b", "a"], ["c", "a"]), (1, [{"key": "a"}])),
        (_table(["x"], ["x"], type=pa.large_string()), (1, [{"key": "x"}])),
        (_table([1.5, 2.5, 1.5]), (1, [{"key": 1.5}])),
        (_table([], type=pa.int64()), None),
        (_table([5], type=pa.int64()), None),
        # Nulls are refused when keys are written; read back from a store they still count like any key.
        (_table([1, None], [None], type=pa.int64()), (1, [{"key": None}])),
        (_table(["a", None], [None], type=pa.string()), (1, [{"key": None}])),
    ],
)
def test_duplicates_are_found_in_every_key_type(table: pa.Table, expected: tuple[int, list[object]] | None) -> None:
    assert duplicate_keys(table) == expected


def test_struct_keys_compare_every_field() -> None:
    keys = pa.table({"key": pa.array([{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 1, "b": "x"}])})
    assert duplicate_keys(keys) == (1, [{"key.a": 1, "key.b": "x"}])
    assert duplicate_keys(keys.slice(0, 2)) is None


def test_many_keys_with_one_duplicate_at_the_ends() -> None:
    keys = pa.table({"key": pa.chunked_array([pa.array(range(500_000)), pa.array([499_999, -1])])})
    assert duplicate_keys(keys) == (1, [{"key": 499_999}])


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        (pa.chunked_array([["a", "b"], ["b", "c"]]), ["a", "b", "c"]),
        (pa.array([1, 1, 1, 2, 9], pa.int64()), [1, 2, 9]),
        (pa.array([b"a", b"ab"], pa.binary()), [b"a", b"ab"]),
        (pa.array([3], pa.int32()), [3]),
        (pa.array([], pa.string()), []),
        # Not in order, or no exact order: None (the caller hashes them).
        (pa.array(["b", "a", "c"]), None),
        (pa.array([1, None, 2], pa.int64()), None),
        (pa.array([-0.0, 0.0, 1.0]), None),
        (pa.array([{"a": 1}, {"a": 2}]), None),
    ],
)
def test_keys_in_ascending_order_are_made_distinct_by_comparing_neighbours(
    column: pa.Array | pa.ChunkedArray, expected: list[object] | None
) -> None:
    found = distinct_if_ascending(column)
    assert (found if found is None else found.to_pylist()) == expected
    if expected is not None:
        assert found is not None and found.to_pylist() == pc.unique(pa.chunked_array([column])).to_pylist()


def test_strictly_ascending_keys_are_returned_as_they_are() -> None:
    keys = pa.array([f"u{i:09d}" for i in range(1000)])
    assert distinct_if_ascending(keys) is keys
    assert sorted_has_duplicates(pa.chunked_array([keys])) is False
    assert sorted_has_duplicates(pa.chunked_array([keys, keys.slice(999)])) is True  # ends with a repeat
