"""The failpoints module: the in-process ``block`` kind that race tests use to order two threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from airflow_ckpt_provider import failpoints


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    failpoints.disable_all()
    yield
    failpoints.disable_all()


def test_a_blocked_hit_waits_for_release_and_no_longer() -> None:
    failpoints.enable("t.point", kind="block", seconds=30)
    passed = threading.Event()

    def hit() -> None:
        failpoints.failpoint("t.point")
        passed.set()

    thread = threading.Thread(target=hit)
    thread.start()
    while failpoints.hits("t.point") < 1:
        time.sleep(0.01)
    assert not passed.wait(0.3), "a block hit goes on only when released"
    started = time.monotonic()
    failpoints.release("t.point")
    thread.join(10)
    assert passed.is_set() and time.monotonic() - started < 5


def test_a_block_is_bounded_by_its_seconds_and_disable_all_releases_it() -> None:
    failpoints.enable("t.bounded", kind="block", seconds=0.2)
    started = time.monotonic()
    failpoints.failpoint("t.bounded")
    assert 0.15 < time.monotonic() - started < 5
    failpoints.enable("t.held", kind="block", seconds=60)
    thread = threading.Thread(target=lambda: failpoints.failpoint("t.held"))
    thread.start()
    while failpoints.hits("t.held") < 1:
        time.sleep(0.01)
    failpoints.disable_all()  # a test that ends never leaves a thread held
    thread.join(10)
    assert not thread.is_alive()


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown kind"):
        failpoints.enable("t.point", kind="hang")
