"""Default store locations: one per (dag_id, task_id, run_id, map_index), never shared.

The property test draws ids with the characters that made 0.1's locations collide
(``:``, ``+``, ``/``, ``%``, ``~``, unicode, upper case); the store tests open real
stores at the locations on local disk and on the S3 server, so two task instances
whose ids 0.1 spelled alike really get two stores.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook
from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.default_location import (
    default_location,
    legacy_location,
    legacy_owner,
    path_segment,
)
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
        locations = [default_location(base, *instance) for instance in batch]
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


def test_the_ids_0_1_spelled_alike_are_told_apart() -> None:
    pairs = [("a:b", "a_b"), ("x+y", "x_y"), ("a/b", "a_b"), ("Tenant", "tenant"), ("%41", "_41"), ("ü", "_")]
    for left, right in pairs:
        # (Tenant/tenant: one directory on a case-insensitive disk)
        assert legacy_location("/c", "d", "t", left).casefold() == legacy_location("/c", "d", "t", right).casefold()
        assert default_location("/c", "d", "t", left) != default_location("/c", "d", "t", right)
    run = "manual__2024-05-01T00:00:00+00:00"
    assert default_location("/c", "dag", "task", run).startswith("/c/dag/task/manual__2024-05-01T00_00_00_00_00~")
    assert default_location("/c", "dag", "task", run, 2) == default_location("/c", "dag", "task", run) + "/map_index=2"


TRICKY_RUNS = ["a:b", "a_b", "x+y", "x_y", "Tenant", "tenant", "%41", "A", "ü", "run/1", "run_1"]


def _one_store_each(base: str, options: dict[str, Any]) -> None:
    locations = {
        (run, map_index): default_location(base, "dag", "task", run, map_index)
        for run in TRICKY_RUNS
        for map_index in (-1, 0, 1)
    }
    for (run, map_index), location in locations.items():
        open_store(location, **options).begin_epoch(owner=f"{run}#{map_index}")
    for (run, map_index), location in locations.items():
        epochs = open_store(location, **options).list_epochs()
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


def test_a_store_at_the_0_1_location_is_resumed_by_its_own_task_instance_only(tmp_path: Path) -> None:
    config = _config(tmp_path / "checkpoints")
    run = "manual__2024-05-01T00:00:00+00:00"
    legacy = config.legacy_store_uri("dag", "task", run)
    assert legacy != config.default_store_uri("dag", "task", run)
    open_store(legacy).begin_epoch(owner=legacy_owner("dag", "task", run))  # as 0.1's operator did

    def located(run_id: str, map_index: int = -1) -> str:
        hook = CheckpointHook.for_task_instance(
            None, dag_id="dag", task_id="task", run_id=run_id, map_index=map_index, config=config
        )
        return hook.uri

    assert located(run) == legacy
    # 0.1 spelled this other run id the same way: its store is not this run's.
    other = "manual__2024-05-01T00_00_00_00_00"
    assert config.legacy_store_uri("dag", "task", other) == legacy
    assert located(other) == config.default_store_uri("dag", "task", other)
    # Mapped instances never resume 0.1's store: 0.1 put every instance into that one store.
    assert located(run, 0) == config.default_store_uri("dag", "task", run, 0)
    # An explicit checkpoint_uri is used as it is.
    explicit = CheckpointHook.for_task_instance(
        str(tmp_path / "mine"), dag_id="dag", task_id="task", run_id=run, config=config
    )
    assert explicit.uri == str(tmp_path / "mine")
    # Once the new location holds a store, it wins.
    open_store(config.default_store_uri("dag", "task", run)).begin_epoch(owner=legacy_owner("dag", "task", run))
    assert located(run) == config.default_store_uri("dag", "task", run)


def test_a_0_1_store_written_by_two_runs_is_not_adopted(tmp_path: Path) -> None:
    config = _config(tmp_path / "checkpoints")
    run, twin = "a:b", "a_b"
    legacy = config.legacy_store_uri("dag", "task", run)
    store = open_store(legacy)
    store.begin_epoch(owner=legacy_owner("dag", "task", run))
    store.begin_epoch(owner=legacy_owner("dag", "task", twin), takeover=True)
    for run_id in (run, twin):
        hook = CheckpointHook.for_task_instance(None, dag_id="dag", task_id="task", run_id=run_id, config=config)
        assert hook.uri == config.default_store_uri("dag", "task", run_id)
