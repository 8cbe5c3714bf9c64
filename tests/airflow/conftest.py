"""Fixtures of the Airflow suite: one isolated, migrated Airflow per test session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.airflow.harness import AirflowHarness

DAGS_EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"


@pytest.fixture(scope="session")
def airflow_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowHarness]:
    """A fresh AIRFLOW_HOME with a migrated SQLite DB (``airflow db migrate`` runs once: ~8 s)."""
    harness = AirflowHarness.create(tmp_path_factory.mktemp("airflow_home"))
    print(f"\nairflow db migrate: {harness.migrate_seconds:.1f} s")
    yield harness
