"""The job's machine-readable result: what each skip and write did, emitted after every write and at the end.

Emitted for whoever configured the job to receive it: the file at ``result_path`` (the submit
operator's, rewritten after every write, so a job that never calls ``finish()`` still reports), and
the stdout line ``CKPT_RESULT {json}`` only with ``result_line`` (the submit operator asks for it,
to read it from spark-submit's log), printed when the result changed since the line was last
printed: once for a job with one write. A library user's job (no operator) prints nothing;
``finish()`` and ``result()`` return the result.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from typing import Any

from airflow_ckpt_provider.contract import format_result_line
from airflow_ckpt_provider.spark.job import skip_audit
from airflow_ckpt_provider.spark.job.job_context import JobContext
from airflow_ckpt_provider.spark.row_source import DoneInput
from airflow_ckpt_provider.spark.summary import WriteSummary, write_result_file
from airflow_ckpt_provider.store import EpochStatus

log = logging.getLogger(__name__)


@dataclass
class JobResult:
    """What the operator reads back (``result_path``, ``CKPT_RESULT``) and passes to the commit (``degraded``)."""

    job: JobContext
    result_path: str | None
    #: Whether the job opened its epoch itself (then it also ends it).
    owns_epoch: bool
    #: Whether to print the ``CKPT_RESULT`` line (the operator reads the driver's stdout).
    result_line: bool = False
    #: What each skip_completed call skipped (in call order).
    skips: list[DoneInput] = field(default_factory=list)
    summaries: list[WriteSummary] = field(default_factory=list)
    finished: bool = False
    #: The last ``CKPT_RESULT`` line printed: the same result is not printed twice.
    printed: str | None = None

    @property
    def degraded(self) -> bool:
        """True if checkpointing was off anywhere in this job (an executor's or the driver's breaker)."""
        return self.job.store.degraded or any(s.degraded for s in self.summaries)

    def record_write(self, summary: WriteSummary) -> None:
        self.summaries.append(summary)
        self.emit()

    def as_dict(self) -> dict[str, Any]:
        summaries = self.summaries
        return {
            "store_uri": self.job.store.uri,
            "epoch": self.job.epoch,
            "session": self.job.backend.kind,
            "python_daemon": self.job.backend.python_daemon(),
            "degraded": self.degraded,
            "rows": sum(s.rows for s in summaries),
            "files": sum(s.files for s in summaries),
            "keys": sum(s.keys for s in summaries),
            "sealed_partitions": sum(s.sealed_partitions for s in summaries),
            "input": self.job.files.stats(),
            "input_audit": skip_audit.audit_summary(self.skips),
            "writes": [s.to_json() for s in summaries],
            "skipped": self.job.skipped,
            "rerun": None if self.job.rerun is None else self.job.rerun.to_json(),
        }

    def emit(self) -> None:
        """Write ``result_path`` (a failure to write it only warns), and print the result line if asked."""
        result = self.as_dict()
        if self.result_path:
            try:
                write_result_file(result, self.result_path, self.job.options)
            except OSError as exc:
                log.warning("could not write the job result to %s: %s", self.result_path, exc)
        if self.result_line:
            line = format_result_line(result)
            if line != self.printed:
                print(line, file=sys.stdout, flush=True)
                self.printed = line

    def finish(self, *, succeeded: bool) -> dict[str, Any]:
        """Emit the result where it was asked for; if the job opened its own epoch, record how it ended.
        Idempotent."""
        result = self.as_dict()
        if self.finished:
            return result
        self.finished = True
        self.emit()
        if self.owns_epoch:
            status = EpochStatus.SUCCEEDED if succeeded else EpochStatus.FAILED
            summary = {k: result[k] for k in ("rows", "keys", "degraded")}
            self.job.store.epochs.end(self.job.epoch, status=status, summary=summary)
        return result
