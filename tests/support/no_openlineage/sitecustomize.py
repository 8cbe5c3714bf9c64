"""Put this directory first on PYTHONPATH to run Python as if ``apache-airflow-providers-openlineage``
and the ``openlineage`` client were not installed: their modules fail to import as missing ones do,
and their distributions (entry points, provider metadata) are not found."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

HIDDEN_MODULES = ("airflow.providers.openlineage", "openlineage")
HIDDEN_DISTRIBUTIONS = ("apache-airflow-providers-openlineage", "openlineage-")


class _HideOpenLineage(MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: ModuleType | None = None) -> ModuleSpec | None:
        if any(fullname == name or fullname.startswith(name + ".") for name in HIDDEN_MODULES):
            raise ModuleNotFoundError(f"No module named {fullname!r} (hidden by tests/support/no_openlineage)")
        return None


def _visible(distribution: Any) -> bool:
    name = str(distribution.metadata["Name"] or "").lower().replace("_", "-")
    return not name.startswith(HIDDEN_DISTRIBUTIONS)


def _hide_distributions(metadata_module: Any) -> None:
    discover = metadata_module.Distribution.discover.__func__

    def visible_only(cls: Any, **kwargs: Any) -> Iterator[Any]:
        return (d for d in discover(cls, **kwargs) if _visible(d))

    metadata_module.Distribution.discover = classmethod(visible_only)


sys.meta_path.insert(0, _HideOpenLineage())
import importlib.metadata  # noqa: E402

_hide_distributions(importlib.metadata)
try:
    import importlib_metadata  # the backport Airflow uses
except ImportError:
    pass
else:
    _hide_distributions(importlib_metadata)
