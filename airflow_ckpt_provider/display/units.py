"""Sizes as a person reads them: the same text in the command line's tables and on the Checkpoints pages."""

from __future__ import annotations

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(count: int | None) -> str:
    """``1536`` → ``"1.5 KiB"``; exact below 1 KiB so small stores show real numbers."""
    if count is None:
        return "-"
    value = float(count)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
