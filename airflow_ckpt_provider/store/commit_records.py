"""Reading the commit records (``commits/``): the newest, all of them, and the output they make authoritative."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.deletion_guard import canonical_uri
from airflow_ckpt_provider.store.layout import COMMIT_RE
from airflow_ckpt_provider.store.reprocess.records import retracted_paths
from airflow_ckpt_provider.store.rerun import committed_output


class CommitRecordReader:
    """Reads the commit records: the newest one is the authority on which checkpoints are committed."""

    def __init__(self, context: StoreContext) -> None:
        self._context = context
        self._blobs = context.blobs

    def _commit_record_keys(self) -> list[str]:
        """The commit records, oldest first. An empty one is a commit whose record upload was cut short (a
        server whose PUT is not atomic) and whose process died: it committed nothing, and the commit's retry
        takes its place (BlobStore.put)."""
        return sorted(i.key for i in self._blobs.list("commits/") if COMMIT_RE.search(i.key) and i.size)

    def newest_commit_record(self) -> dict[str, Any] | None:
        keys = self._commit_record_keys()
        return self._context.read_json(keys[-1]) if keys else None

    def commit_records(self) -> list[dict[str, Any]]:
        """Every commit record of this store, oldest first."""
        return list(self._context.map(self._context.read_json, self._commit_record_keys()))

    def committed_paths(self, records: Sequence[Mapping[str, Any]] | None = None) -> set[str]:
        """Every output path the commit records of this store make authoritative (canonical URIs): each
        record's files, minus what a later commit of the same job replaced (store/rerun.py) and what a
        reprocess retracted. ``records``: :meth:`commit_records` when the caller has read them."""
        if records is None:
            records = self.commit_records()
        committed = committed_output(records, canonical_uri)
        # A reprocess or rewind took these out of the committed output (docs/reprocess.md).
        return committed - {canonical_uri(p) for p in retracted_paths(self._blobs, self._context.map)}

    def commit_output_roots(self) -> list[str]:
        """The output roots the commits of this store were allowed to sweep. Each commit copies into
        its record the roots its guard allowed, which include every earlier commit record's: so the
        newest record holds them all (one read), and they outlive the epoch records retention prunes."""
        record = self.newest_commit_record()
        value = record.get("output_roots") if record else None
        return [str(r) for r in value if isinstance(r, str)] if isinstance(value, list) else []
