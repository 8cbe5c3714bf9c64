"""``WriteContext``: what a per-partition writer gets from the checkpointed task it runs in.

A writer (``CheckpointedJob.write(df, writer_fn, key=...)``) receives the task's
Arrow batches and this context. It must call :meth:`WriteContext.record_intent`
*before* creating each output file (as Hudi's markers): the commit can then delete
the file if this attempt never becomes valid, and the task deletes it if it fails.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from airflow_ckpt_provider.spark.paths import arrow_filesystem, arrow_path
from airflow_ckpt_provider.store import CheckpointStore
from airflow_ckpt_provider.store.errors import InvalidArgumentError

log = logging.getLogger(__name__)


class WriteContext:
    """One task attempt's identity and output helpers. Not thread-safe (one per task)."""

    def __init__(
        self,
        *,
        store: CheckpointStore,
        checkpoint_id: str,
        epoch: int,
        partition_id: int,
        attempt_number: int,
        output_root: str,
        fs_options: Mapping[str, Any],
    ) -> None:
        self.store = store
        self.checkpoint_id = checkpoint_id
        self.epoch = epoch
        self.partition_id = partition_id
        self.attempt_number = attempt_number
        #: Normalized output directory URI (``file:///abs`` or ``s3://bucket/prefix``), no trailing slash.
        self.output_root = output_root
        self._fs_options = fs_options
        self._filesystem: pafs.FileSystem | None = None
        self._intents: list[str] = []
        self._file_counter = 0

    @property
    def filesystem(self) -> pafs.FileSystem:
        """The Arrow filesystem of the output root (local or S3 with the store's options)."""
        if self._filesystem is None:
            self._filesystem = arrow_filesystem(self.output_root, self._fs_options)
        return self._filesystem

    @property
    def intents(self) -> tuple[str, ...]:
        """Every output URI this attempt announced, in order."""
        return tuple(self._intents)

    def new_file_uri(self, extension: str = "parquet", subdir: str = "") -> str:
        """A URI under the output root that no other attempt can produce.

        ``part-{partition:05d}-e{epoch}-{checkpoint_id}-c{n:03d}.{extension}``: the
        checkpoint id is a fresh UUID per attempt, so retries, speculative copies
        and zombies never overwrite each other (docs/design.md, invariant 2).
        """
        name = (
            f"part-{self.partition_id:05d}-e{self.epoch}-{self.checkpoint_id}-c{self._file_counter:03d}"
            f".{extension.lstrip('.')}"
        )
        self._file_counter += 1
        directory = f"{self.output_root}/{subdir.strip('/')}" if subdir.strip("/") else self.output_root
        return f"{directory}/{name}"

    def record_intent(self, uri: str) -> None:
        """Announce ``uri`` before creating it. Call once per file, before the first byte is written."""
        if not uri.startswith(self.output_root + "/"):
            raise InvalidArgumentError(
                f"{uri!r} is not under the output root {self.output_root!r}: a writer creates files only under "
                "the root it was given (ctx.new_file_uri() names one)",
                reason="path_outside_root",
            )
        self._intents.append(uri)
        self.store.record_intent(self.checkpoint_id, [uri], epoch=self.epoch)

    def open_output_stream(self, uri: str) -> pa.NativeFile:
        """Record the intent for ``uri``, then open it for writing (direct write: no rename)."""
        self.record_intent(uri)
        path = arrow_path(uri)
        if uri.startswith("file://"):
            self.filesystem.create_dir(path.rsplit("/", 1)[0], recursive=True)
        return self.filesystem.open_output_stream(path)

    def delete_outputs(self, uris: list[str], *, attempts: int = 4, backoff_seconds: float = 0.2) -> list[str]:
        """Delete ``uris`` (best effort, retried); returns the ones that could not be deleted.

        Object stores can briefly fail or lag after a write, so each file is retried
        with growing pauses (docs/design.md, section 5). What stays is swept by
        the commit, which knows these files from their intent records.
        """
        remaining = list(dict.fromkeys(uris))
        for attempt in range(attempts):
            failed = []
            for uri in remaining:
                try:
                    self.filesystem.delete_file(arrow_path(uri))
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    if "does not exist" in str(exc) or "NoSuchKey" in str(exc):
                        continue
                    failed.append(uri)
                    log.info("could not delete %s (attempt %d): %s", uri, attempt + 1, exc)
            remaining = failed
            if not remaining:
                return []
            time.sleep(backoff_seconds * (2**attempt))
        log.warning(
            "left %d output files of failed attempt %s for the commit to delete", len(remaining), self.checkpoint_id
        )
        return remaining
