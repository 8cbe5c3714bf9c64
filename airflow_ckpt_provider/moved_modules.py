"""Old import paths of modules that were renamed keep working, with a ``DeprecationWarning``.

A package registers its moved modules in its ``__init__``; each old dotted name becomes
a small forwarding module in ``sys.modules`` (no file at the old path), which imports
the new module only when one of its names is used. The map of old and new names is in
``docs/design.md`` ("Module layout").
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from collections.abc import Mapping
from typing import Any


class MovedModule(types.ModuleType):
    """Stands at an old import path and forwards every attribute to the module's new path."""

    def __init__(self, name: str, target: str) -> None:
        super().__init__(name, f"Deprecated: this module moved to {target}.")
        self.moved_to = target

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):  # the import system probes dunders; they are not forwarded
            raise AttributeError(attr)
        warnings.warn(
            f"{self.__name__} moved to {self.moved_to}: import {attr} from {self.moved_to}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(self.moved_to), attr)

    def __dir__(self) -> list[str]:
        return dir(importlib.import_module(self.moved_to))


def register_moved_modules(package: str, moves: Mapping[str, str]) -> None:
    """Make ``{package}.{old}`` importable for each ``old: new_dotted_path`` of ``moves``."""
    parent = sys.modules[package]
    for old, new in moves.items():
        name = f"{package}.{old}"
        if name not in sys.modules:
            sys.modules[name] = MovedModule(name, new)
        setattr(parent, old, sys.modules[name])
