"""Human-readable output of the command-line tool: aligned tables and sizes.

Kept apart from the commands so that ``--json`` and the tables stay two views of
one result, and so that a change of layout never touches what a command does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TextIO

from airflow_ckpt_provider.display.units import human_bytes

__all__ = ["cell", "fields", "human_bytes", "section", "table"]


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO) -> None:
    """Print a left-aligned table; numbers are right-aligned so digits line up."""
    raw_rows = [list(row) for row in rows]
    text_rows = [[cell(v) for v in row] for row in raw_rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(value))
    numeric = [
        bool(raw_rows) and all(isinstance(r[i], int | float) and not isinstance(r[i], bool) for r in raw_rows)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str], align_numbers: bool) -> str:
        parts = []
        for i, value in enumerate(values):
            if align_numbers and numeric[i]:
                parts.append(value.rjust(widths[i]))
            else:
                parts.append(value.ljust(widths[i]))
        return "  ".join(parts).rstrip()

    out.write(line(list(headers), False) + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for row in text_rows:
        out.write(line(row, True) + "\n")
    if not text_rows:
        out.write("(none)\n")


def fields(pairs: Mapping[str, Any], out: TextIO) -> None:
    """Print ``name: value`` lines with the names aligned."""
    width = max((len(k) for k in pairs), default=0)
    for name, value in pairs.items():
        out.write(f"{(name + ':').ljust(width + 1)} {cell(value)}\n")


def section(title: str, pairs: Mapping[str, Any], out: TextIO, shown: Any = cell) -> None:
    """Print ``title:`` and then an indented ``name: value`` line per pair, sorted by name."""
    out.write(f"{title}:\n")
    for name, value in sorted(pairs.items()):
        out.write(f"  {name}: {shown(value)}\n")
