"""Reading the output files each checkpoint recorded (inline in its manifest, else from its file parts), and
which recorded output files are gone."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence

from airflow_ckpt_provider.store.blobs.base import BlobNotFoundError
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.errors import CheckpointError, CorruptCheckpointError
from airflow_ckpt_provider.store.layout import attempt_prefix
from airflow_ckpt_provider.store.model import Checkpoint, FileMetadata


class FileReader:
    """Reads the output files of sealed checkpoints, on the context's threads."""

    def __init__(self, context: StoreContext) -> None:
        self._context = context
        self._blobs = context.blobs

    def files_of(self, checkpoints: Sequence[Checkpoint]) -> list[FileMetadata]:
        """The output files of ``checkpoints`` (inline in the manifest, else from its file parts)."""
        return [f for files in self._files_per_checkpoint(checkpoints) for f in files]

    def files_by_checkpoint(self, checkpoints: Sequence[Checkpoint]) -> dict[str, list[FileMetadata]]:
        """The output files of each of ``checkpoints``, by id (one pass for all of them)."""
        ordered = list(checkpoints)
        return {c.checkpoint_id: files for c, files in zip(ordered, self._files_per_checkpoint(ordered), strict=True)}

    def _files_per_checkpoint(self, checkpoints: Sequence[Checkpoint]) -> list[list[FileMetadata]]:
        """Each checkpoint's files, in order. Inline lists are copied here; only the checkpoints whose files
        are in parts are read, on the context's threads (a commit of 100,000 compacted checkpoints spent 2 s
        starting a thread pass per checkpoint for files it already held)."""

        def load(checkpoint: Checkpoint) -> list[FileMetadata]:
            files: list[FileMetadata] = []
            for part in checkpoint.file_parts:
                key = attempt_prefix(checkpoint.checkpoint_id) + part
                try:
                    data, _ = self._blobs.get(key)
                except BlobNotFoundError:
                    raise CorruptCheckpointError(
                        f"{self._blobs.child_uri(key)} is named by its manifest but missing; nothing was "
                        "changed. Run `airflow-ckpt check`",
                        reason="corrupt",
                    ) from None
                try:
                    files.extend(FileMetadata.from_json(item) for item in json.loads(data))
                except (ValueError, KeyError, TypeError) as exc:
                    raise CorruptCheckpointError(
                        f"{self._blobs.child_uri(key)} is corrupt ({exc!r})", reason="corrupt"
                    ) from exc
            return files

        ordered = list(checkpoints)
        out: list[list[FileMetadata]] = [list(c.inline_files or ()) for c in ordered]
        in_parts = [i for i, c in enumerate(ordered) if c.inline_files is None]
        for index, files in zip(in_parts, self._context.map(load, [ordered[i] for i in in_parts]), strict=True):
            out[index] = files
        return out

    def missing_outputs(self, paths: Iterable[str]) -> set[str]:
        """The output paths (canonical URIs) that do not exist, listing each output directory once (not one
        request per file). A directory that cannot be listed (unreachable, not a location the store can
        open) counts as holding its paths: only what is known to be gone is missing. Reads only."""
        by_dir: dict[str, set[str]] = defaultdict(set)
        for path in paths:
            by_dir[path.rsplit("/", 1)[0]].add(path)
        missing: set[str] = set()
        for directory, wanted in by_dir.items():
            try:
                blobs = self._context.output_store(directory)
                present = {blobs.child_uri(i.key) for i in blobs.list("") if "/" not in i.key}
            except CheckpointError:
                continue
            missing |= wanted - present
        return missing
