"""Checking the package's errors by class and ``reason`` (airflow_ckpt_provider/store/errors.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_ckpt_provider.store.errors import CheckpointError


@contextlib.contextmanager
def raises_reason(
    cls: type[CheckpointError], reason: str, *, match: str | None = None
) -> Iterator[pytest.ExceptionInfo[Any]]:
    """Like ``pytest.raises(cls, match=match)``, and the error's ``reason`` must be ``reason``."""
    with pytest.raises(cls, match=match) as raised:
        yield raised
    assert raised.value.reason == reason, f"reason {raised.value.reason!r}, expected {reason!r}: {raised.value}"
