"""Griffe extension of the docs site (mkdocs.yml): the docstrings' Sphinx roles become cross-references.

The package's docstrings name other objects as Sphinx does (``:class:`EpochConflictError```,
``:meth:`write_parquet```, ``:mod:`.result```, ``:data:`~airflow_ckpt_provider.contract.CONF_EPOCH```).
mkdocstrings renders Markdown and knows no roles, so a renamed or deleted name would go on being
printed as if it existed. This extension resolves every role of every docstring of the package
(not only of the objects a page renders) the way Sphinx's Python domain looks names up: the object
itself, then each enclosing scope, then the name as written, then any object of the package whose
path ends with it. A name found nowhere is logged as a warning, which fails ``mkdocs build
--strict``; a name found becomes a link where the site renders its target, plain code elsewhere.
"""

from __future__ import annotations

import builtins
import html
import logging
import re
from collections.abc import Iterator
from typing import Any

import griffe

PACKAGE = "airflow_ckpt_provider"
ROLE = re.compile(r":(?:py:)?(class|func|meth|mod|data|attr|exc|obj|const):`(~?)([^`<>\s]+)`")

# A logger under "mkdocs": MkDocs counts its warnings, and --strict fails on them.
log = logging.getLogger("mkdocs.plugins.docs_roles")


def _walk(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)  # type: ignore[arg-type]


class SphinxRoles(griffe.Extension):
    """Resolve the Sphinx roles of the package's docstrings once the package is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.path != PACKAGE:
            return
        objects = list(_walk(pkg))
        # Every name the package defines or imports, by the path it is reachable at -> its canonical path.
        known: dict[str, str] = {}
        for obj in objects:
            known[obj.path] = obj.path
            for name, member in obj.members.items():
                if member.is_alias:
                    known[f"{obj.path}.{name}"] = member.target_path  # type: ignore[union-attr]
        for obj in objects:
            if obj.docstring is not None and ROLE.search(obj.docstring.value):
                obj.docstring.value = ROLE.sub(lambda match, o=obj: self._link(o, match, known), obj.docstring.value)

    def _link(self, obj: griffe.Object, match: re.Match[str], known: dict[str, str]) -> str:
        _role, short, name = match.groups()
        display = name.lstrip(".").rsplit(".", 1)[-1] if short else name.lstrip(".")
        if hasattr(builtins, name):
            return f"`{display}`"
        target = self._resolve(obj, name.lstrip("."), known)
        if target is None:
            where = obj.filepath if isinstance(obj.filepath, str) else getattr(obj, "relative_filepath", obj.path)
            log.warning(
                "%s (%s:%s): %s names %r, which the package does not have",
                obj.path,
                where,
                obj.lineno,
                match.group(0),
                name,
            )
            return f"`{display}`"
        return f'<autoref identifier="{html.escape(target)}" optional><code>{html.escape(display)}</code></autoref>'

    @staticmethod
    def _resolve(obj: griffe.Object, name: str, known: dict[str, str]) -> str | None:
        scope: griffe.Object | None = obj
        while scope is not None:
            found = known.get(f"{scope.path}.{name}")
            if found is not None:
                return found
            scope = scope.parent
        if name in known:
            return known[name]
        suffix = f".{name}"
        matches = sorted({target for path, target in known.items() if path.endswith(suffix)})
        return matches[0] if matches else None
