"""Which output roots a store is opened with: the DAG's, else ``[ckpt] trusted_output_roots``, else none.

The one decision behind every deletion the operators, the Checkpoints view and ``airflow-ckpt
--dag-id/--task-id`` make (docs/security.md, "The trust model"):

* the DAG declares ``output_roots`` (the task's own, its Spark task's): the store is opened with
  them; its records only narrow them;
* else ``[ckpt] trusted_output_roots`` is set: the store's recorded roots count where they lie
  under one of those, nothing else (a store whose records declare nothing gets nothing);
* else nothing is declared: every output file is kept (no orphan deleted, nothing retracted or
  restored), and the caller says so, naming the parameter to set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: The ``[ckpt]`` option that anchors deletions where a DAG declares no output roots.
CONFIGURED_ROOTS = "[ckpt] trusted_output_roots"


@dataclass(frozen=True)
class OutputAnchor:
    """The output roots a store is opened with, and who declares them (named in refusals)."""

    #: The roots the DAG (or a person) declares; ``()``: declared by nobody, keep every output file;
    #: None: not given (then ``configured`` bounds the store's records).
    trusted: tuple[str, ...] | None
    declared_by: str
    configured: tuple[str, ...] | None = None

    @classmethod
    def decide(cls, declared: Sequence[str] | None, declared_by: str, configured: Sequence[str]) -> OutputAnchor:
        """The DAG's ``declared`` roots if any, else the ``configured`` ones (``[ckpt]
        trusted_output_roots``, :attr:`CheckpointConfig.trusted_output_roots`), else none (keep output)."""
        if declared:
            return cls(tuple(declared), declared_by)
        if configured:
            return cls(None, CONFIGURED_ROOTS, tuple(configured))
        return cls((), declared_by)

    @property
    def keeps_output(self) -> bool:
        """Nothing is declared: no output file is deleted, moved or restored."""
        return self.trusted == ()

    def store_options(self) -> dict[str, Any]:
        """The ``open_store`` keyword arguments for this anchor."""
        return {
            "trusted_output_roots": self.trusted,
            "output_roots_declared_by": self.declared_by,
            "configured_output_roots": self.configured,
        }

    def warning(self, parameter: str) -> str:
        """What a task logs when it keeps output files: why, and what to set."""
        return (
            f"No output root is declared ({self.declared_by}: none), so output files are kept: no orphan is "
            f"deleted, nothing is retracted, and a re-run's output is not exactly-once. Set {parameter} (the "
            f"directories the job writes), or {CONFIGURED_ROOTS} (comma-separated URIs) for every DAG"
        )
