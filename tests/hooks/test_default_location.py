"""Default store locations: one per job (dag_id, task_id, logical date or run id, map_index).

Distinct jobs never share a location: the property test draws ids with the characters that make
naive spellings collide (``:``, ``+``, ``/``, ``%``, ``~``, unicode, upper case); the store tests
open real stores at the locations on local disk and on the S3 server. Runs of the same job (same
logical date, any run id) share one location.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.default_location import JobIdentity, default_location, path_segment
from airflow_ckpt_provider.hooks.locator import store_uri
from airflow_ckpt_provider.store import RetentionPolicy, open_store

#: Pieces of ids: safe characters, the unsafe ones, unicode (composed and decomposed), case.
ids = st.lists(
    st.sampled_from([*"aAbB09_-.:+/%~= ", "ü", "ß", "\u00e9", "e\u0301", "日", "..", "%2F"]), min_size=1, max_size=10
).map("".join)
map_indexes = st.integers(min_value=-1, max_value=3)
instances = st.tuples(ids, ids, ids, map_indexes)
SAFE_SEGMENT = re.compile(r"[A-Za-z0-9._~=-]+")


@settings(max_examples=300, deadline=None)
@given(st.lists(instances, min_size=2, max_size=6, unique=True))
def test_distinct_task_instances_never_share_a_location(batch: list[tuple[str, str, str, int]]) -> None:
    for base in ("/var/airflow/checkpoints", "s3://bucket/ckpt"):
        locations = [default_location(base, JobIdentity(d, t, r, None, m)) for d, t, r, m in batch]
        assert len(set(locations)) == len(batch), list(zip(batch, locations, strict=True))
        # Case-insensitive disks (macOS, Windows) must not merge two either.
        assert len({location.casefold() for location in locations}) == len(batch)
        for location in locations:
            segments = location.removeprefix(base + "/").split("/")
            assert all(SAFE_SEGMENT.fullmatch(segment) for segment in segments), location
            assert all(segment not in (".", "..") for segment in segments), location


@given(ids)
def test_a_segment_is_the_id_itself_when_the_id_is_plain(value: str) -> None:
    segment = path_segment(value)
    if re.fullmatch(r"[a-z0-9_-][a-z0-9._-]*", value):
        assert segment == value
    else:
        assert "~" in segment and len(segment) <= 80 + 13


def test_ids_spelled_alike_are_told_apart_and_dates_are_readable() -> None:
    pairs = [("a:b", "a_b"), ("x+y", "x_y"), ("a/b", "a_b"), ("Tenant", "tenant"), ("%41", "_41"), ("ü", "_")]
    for left, right in pairs:
        assert default_location("/c", JobIdentity("d", "t", left)) != default_location(
            "/c", JobIdentity("d", "t", right)
        )
    day = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    assert default_location("/c", JobIdentity("dag", "task", "any", day)) == "/c/dag/task/date=2024-05-01"
    at = dt.datetime(2024, 5, 1, 10, 30, 5, 123, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert JobIdentity("dag", "task", "r", at).segments()[2] == "date=2024-05-01T083005.000123Z"
    # Runs of one logical date share the job; mapped instances and runs without a date do not.
    assert JobIdentity("dag", "task", "scheduled__x", day).key() == JobIdentity("dag", "task", "manual__y", day).key()
    assert JobIdentity("dag", "task", "r", day, 2).key() == "dag/task/date=2024-05-01/map_index=2"
    no_date = JobIdentity("dag", "task", "manual__2024-05-01T00:00:00+00:00")
    assert default_location("/c", no_date).startswith("/c/dag/task/run=manual__2024-05-01T00_00_00_00_00~")


TRICKY_RUNS = ["a:b", "a_b", "x+y", "x_y", "Tenant", "tenant", "%41", "A", "ü", "run/1", "run_1"]


def _one_store_each(base: str, options: dict[str, Any]) -> None:
    locations = {
        (run, map_index): default_location(base, JobIdentity("dag", "task", run, None, map_index))
        for run in TRICKY_RUNS
        for map_index in (-1, 0, 1)
    }
    for (run, map_index), location in locations.items():
        open_store(location, **options).epochs.begin(owner=f"{run}#{map_index}")
    for (run, map_index), location in locations.items():
        epochs = open_store(location, **options).epochs.all()
        assert [(e.number, e.owner) for e in epochs] == [(1, f"{run}#{map_index}")], location


def test_each_task_instance_gets_its_own_store_on_local_disk(tmp_path: Path) -> None:
    _one_store_each(str(tmp_path / "checkpoints"), {})


@pytest.mark.s3
def test_each_task_instance_gets_its_own_store_on_s3(s3_bucket: str, s3_options: dict[str, Any]) -> None:
    _one_store_each(f"s3://{s3_bucket}/checkpoints", s3_options)


def _config(base: Path) -> CheckpointConfig:
    return CheckpointConfig(
        base_uri=str(base),
        aws_conn_id=None,
        retention_policy=RetentionPolicy.DELETE_AFTER_SUCCESS,
        breaker_max_failures=3,
        store_timeout_seconds=10.0,
    )


def test_a_task_instance_uses_a_named_store_else_the_jobs_default(tmp_path: Path) -> None:
    config = _config(tmp_path / "checkpoints")
    job = JobIdentity("dag", "task", "manual__1", dt.datetime(2024, 5, 1, tzinfo=dt.UTC))
    assert store_uri(None, job, config) == default_location(config.store_base, job)
    assert store_uri(" ", job, config) == f"{tmp_path}/checkpoints/dag/task/date=2024-05-01"
    assert store_uri(f" {tmp_path / 'mine'} ", job, config) == str(tmp_path / "mine")
