"""The store's public names stay importable from every path they had before the split into modules."""

from __future__ import annotations

import importlib

import pytest

from airflow_ckpt_provider.store import CheckpointStore


@pytest.mark.parametrize(
    "name",
    [
        "CheckpointStore",
        "KEY_COLUMN",
        "INLINE_MAX_KEYS",
        "INLINE_MAX_FILES",
        "new_checkpoint_id",
        "validate_checkpoint_id",
    ],
)
def test_names_of_the_former_store_module_still_import(name: str) -> None:
    module = importlib.import_module("airflow_ckpt_provider.store.store")
    assert getattr(module, name) is not None


def test_the_package_and_the_facade_module_export_the_same_store() -> None:
    from airflow_ckpt_provider.store.store import CheckpointStore as FromModule

    assert FromModule is CheckpointStore
