"""What a checkpointed write did, and how the driver reports it to the operator.

When the store's circuit breaker trips on an executor, the store may be down for
the driver too, so the *degraded* flag travels through the job's own result: a
JSON file at ``spark.ckpt.result.path`` (if set) and, if ``spark.ckpt.result.line`` asks
for it, one stdout line ``CKPT_RESULT {json}`` that the operator reads from the
spark-submit log (:mod:`airflow_ckpt_provider.spark.job.result` decides when).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_ckpt_provider.contract import result_json
from airflow_ckpt_provider.spark.paths import arrow_filesystem, arrow_path, file_key


@dataclass(frozen=True)
class WriteTaskReport:
    """One write task attempt that finished (Spark keeps one per partition)."""

    partition: int
    attempt: int
    checkpoint_id: str | None
    rows: int
    files: int
    bytes: int
    keys: int
    sealed: bool
    degraded: bool
    seconds: float
    host: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WriteTaskReport:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class WriteSummary:
    """Totals of one ``write``/``write_parquet`` call.

    ``keys`` counts the distinct source keys this run processed (and checkpointed,
    when ``sealed_partitions == partitions``); ``degraded`` is True if any task ran
    with checkpointing off (the breaker tripped): pass it to the commit.
    """

    epoch: int
    output: str
    partitions: int
    sealed_partitions: int
    expected_partitions: int | None
    rows: int
    files: int
    bytes: int
    keys: int
    degraded: bool
    seconds: float
    shuffled: bool
    checkpoint_ids: tuple[str, ...] = field(default=(), repr=False)
    #: ``"spark"`` (Spark's own Parquet writer) or ``"arrow"`` (pyarrow in each task).
    engine: str = "arrow"

    @classmethod
    def from_reports(
        cls,
        reports: Iterable[WriteTaskReport],
        *,
        epoch: int,
        output: str,
        expected_partitions: int | None,
        seconds: float,
        shuffled: bool,
        driver_degraded: bool = False,
        engine: str = "arrow",
    ) -> WriteSummary:
        items = sorted(reports, key=lambda r: r.partition)
        return cls(
            epoch=epoch,
            output=output,
            partitions=len(items),
            sealed_partitions=sum(1 for r in items if r.sealed),
            expected_partitions=expected_partitions,
            rows=sum(r.rows for r in items),
            files=sum(r.files for r in items),
            bytes=sum(r.bytes for r in items),
            keys=sum(r.keys for r in items),
            degraded=driver_degraded or any(r.degraded for r in items),
            seconds=seconds,
            shuffled=shuffled,
            checkpoint_ids=tuple(r.checkpoint_id for r in items if r.checkpoint_id),
            engine=engine,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "output": self.output,
            "partitions": self.partitions,
            "sealed_partitions": self.sealed_partitions,
            "expected_partitions": self.expected_partitions,
            "rows": self.rows,
            "files": self.files,
            "bytes": self.bytes,
            "keys": self.keys,
            "degraded": self.degraded,
            "seconds": round(self.seconds, 3),
            "engine": self.engine,
            "shuffled": self.shuffled,
        }


def write_result_file(result: Mapping[str, Any], path: str, options: Mapping[str, Any]) -> None:
    """Write the job's result as JSON at ``path`` (local or ``s3://``, with the store's ``options``)."""
    text = result_json(result)
    uri = file_key(path)
    filesystem = arrow_filesystem(uri, options)
    target = arrow_path(uri)
    if uri.startswith("file://"):
        filesystem.create_dir(target.rsplit("/", 1)[0], recursive=True)
    with filesystem.open_output_stream(target) as out:
        out.write(text.encode())
