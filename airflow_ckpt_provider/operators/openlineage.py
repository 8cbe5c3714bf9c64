"""OpenLineage facets of the commit: which output became authoritative, what was skipped and deleted.

Imported only from ``CheckpointCommitOperator.get_openlineage_facets_on_complete``, i.e.
only when ``apache-airflow-providers-openlineage`` (extra ``openlineage``) is installed
and its listener asks; without it nothing here is imported (docs/airflow.md, "OpenLineage").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from airflow.providers.openlineage.extractors import OperatorLineage
from attrs import define, field
from openlineage.client.event_v2 import Dataset
from openlineage.client.facet_v2 import RunFacet

#: Key of the run facet in the events (``run.facets.checkpointCommit``).
FACET_NAME = "checkpointCommit"
SCHEMA_URL = "https://pypi.org/project/airflow-ckpt-provider/#openlineage-checkpointcommit"


@define
class CheckpointCommitRunFacet(RunFacet):
    """What one commit task made authoritative (``committed``), left alone (``skipped``) and
    deleted (``deleted``), summed over its stores; ``stores`` has each store's own counts."""

    committed: dict[str, Any] = field(factory=dict)
    skipped: dict[str, Any] = field(factory=dict)
    deleted: dict[str, Any] = field(factory=dict)
    stores: list[dict[str, Any]] = field(factory=list)

    @staticmethod
    def _get_schema() -> str:
        return SCHEMA_URL


def dataset_of(root: str) -> Dataset:
    """An output root as an OpenLineage dataset (the spec's naming: ``s3://bucket`` + key prefix,
    ``file`` + absolute path)."""
    parts = urlsplit(root)
    if parts.scheme in ("s3", "s3a", "s3n"):
        return Dataset(namespace=f"s3://{parts.netloc}", name=parts.path.strip("/"))
    if parts.scheme in ("", "file"):
        return Dataset(namespace="file", name=parts.path.rstrip("/") or "/")
    return Dataset(namespace=f"{parts.scheme}://{parts.netloc}", name=parts.path.rstrip("/") or "/")


def _total(summaries: Sequence[Mapping[str, Any]], name: str) -> int:
    return sum(int(s.get(name) or 0) for s in summaries)


def commit_lineage(summaries: Sequence[Mapping[str, Any]]) -> OperatorLineage:  # type: ignore[type-arg]
    """The lineage of one commit task from its per-store summaries (one per mapped instance)."""
    roots: dict[str, None] = {}
    for summary in summaries:
        roots.update(dict.fromkeys(summary.get("output_roots") or ()))
    facet = CheckpointCommitRunFacet(
        committed={
            "files": _total(summaries, "files_committed"),
            "rows": _total(summaries, "rows_committed"),
            "checkpoints": _total(summaries, "checkpoints_committed"),
        },
        skipped={
            "keys_skipped_on_resume": _total(summaries, "keys_skipped_on_resume"),
            "unknown_files_kept": _total(summaries, "unknown_files"),
            "unprovable_files_kept": _total(summaries, "kept_unprovable"),
            "already_committed_stores": sum(1 for s in summaries if s.get("already_committed")),
        },
        deleted={
            "orphan_files": _total(summaries, "orphans_deleted"),
            "bytes_freed": _total(summaries, "bytes_freed"),
            "uploads_aborted": _total(summaries, "uploads_aborted"),
            "checkpoints_removed_by_retention": _total(summaries, "checkpoints_removed_by_retention"),
        },
        stores=[_store_entry(s) for s in summaries],
    )
    return OperatorLineage(outputs=[dataset_of(root) for root in roots], run_facets={FACET_NAME: facet})


def _store_entry(summary: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("checkpoint_uri", "map_index", "epoch", "files_committed", "rows_committed", "orphans_deleted")
    return {key: summary.get(key) for key in keys}
