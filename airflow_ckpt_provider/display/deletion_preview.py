"""What ``clear()`` and ``discard_uncommitted()`` would delete, told before they run.

Both the command line and the UI plugin show this text in their confirmation, so a
person always reads what is about to go before saying yes. The preview reads the
store only (it never changes it) and raises the store's typed errors, so a store
that cannot be read is never cleared from the UI on a guess.

``epoch`` is the latest epoch number when the preview was taken: the UI sends it
back with the action and the action is refused if the store moved on meanwhile.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from airflow_ckpt_provider.display.units import human_bytes
from airflow_ckpt_provider.store import CheckpointStore, StoreContents


@dataclass(frozen=True)
class DeletionPreview:
    action: str  # "clear" or "discard"
    store_uri: str
    epoch: int | None
    checkpoints: int  # sealed checkpoints that will be deleted
    committed_checkpoints: int  # of those, committed (clear only; discard keeps them)
    unsealed_directories: int  # leftovers of failed attempts, deleted too
    keys: int  # done keys that will be forgotten (the next run reprocesses them)
    uncommitted_files: int  # output files of uncommitted sealed checkpoints, deleted
    uncommitted_bytes: int
    snapshots: int  # compacted key snapshots deleted (clear only)
    kept_checkpoints: int  # committed checkpoints kept (discard only)
    #: The latest epoch is open: the action ends it, fencing a submit that may still write to it.
    ends_open_epoch: bool = False
    #: The only places output files may be deleted (declared when epochs opened); empty and not
    #: declared when no epoch of the store declared one, whose output files are then kept.
    output_roots: tuple[str, ...] = ()
    output_roots_declared: bool = True
    #: Who declares no output root (the store was opened with none): every output file is kept.
    output_roots_undeclared_by: str | None = None

    @property
    def nothing_to_delete(self) -> bool:
        return not (self.checkpoints or self.unsealed_directories or self.snapshots or self.keys)

    @property
    def nothing_to_do(self) -> bool:
        """Nothing to delete and no open epoch to end: running the action would change nothing."""
        return self.nothing_to_delete and not self.ends_open_epoch

    def _ending(self) -> str:
        return (
            f" Ends the open epoch {self.epoch}: a submit still writing to it is fenced and fails."
            if self.ends_open_epoch
            else ""
        )

    def describe(self) -> str:
        """One paragraph a person can confirm."""
        if self.nothing_to_do:
            return f"Nothing to {self.action} in {self.store_uri}."
        if self.nothing_to_delete:
            return f"Nothing to delete in {self.store_uri}.{self._ending()}"
        if self.action == "clear":
            text = (
                f"Clear {self.store_uri}: delete all {self.checkpoints} checkpoint(s) "
                f"({self.committed_checkpoints} committed)"
            )
            if self.snapshots:
                text += f" and {self.snapshots} key snapshot(s)"
            text += f"; the next run reprocesses all {self.keys} key(s)."
        else:
            text = (
                f"Discard uncommitted work in {self.store_uri}: delete {self.checkpoints} uncommitted "
                f"checkpoint(s); their {self.keys} key(s) will be reprocessed by the next run. "
                f"{self.kept_checkpoints} committed checkpoint(s) are kept."
            )
        if self.unsealed_directories:
            text += f" Also {self.unsealed_directories} unsealed leftover(s) of failed attempts."
        if self.uncommitted_files and self.output_roots:
            text += (
                f" Output files of uncommitted checkpoints are deleted: {self.uncommitted_files} file(s), "
                f"{human_bytes(self.uncommitted_bytes)} (plus any partial files of failed attempts)."
            )
        text += self._where()
        text += " Committed output files are never deleted." + self._ending()
        return text

    def _where(self) -> str:
        if self.output_roots:
            return " Output files are deleted only under: " + ", ".join(self.output_roots) + "."
        if self.output_roots_undeclared_by:
            return (
                f" No output root is declared ({self.output_roots_undeclared_by}: none): no output file is "
                "deleted, only the store's own records."
            )
        if not self.output_roots_declared:
            return (
                " This store declares no output root (no epoch declares one): no output file is "
                "deleted, only the store's own records."
            )
        return " No output file is deleted (no output root is declared)."

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {
            "description": self.describe(),
            "nothing_to_delete": self.nothing_to_delete,
            "nothing_to_do": self.nothing_to_do,
        }


def preview_clear(contents: StoreContents) -> DeletionPreview:
    uncommitted = contents.uncommitted
    return DeletionPreview(
        action="clear",
        store_uri=contents.store_uri,
        epoch=contents.epoch,
        checkpoints=len(contents.checkpoints),
        committed_checkpoints=len(contents.checkpoints) - len(uncommitted),
        unsealed_directories=len(contents.unsealed_ids),
        keys=contents.keys_done,
        uncommitted_files=sum(c.num_files for c in uncommitted),
        uncommitted_bytes=sum(c.num_bytes for c in uncommitted),
        snapshots=len(contents.snapshots),
        kept_checkpoints=0,
        ends_open_epoch=contents.epoch_open,
        output_roots=contents.output_roots,
        output_roots_declared=contents.output_roots_declared,
        output_roots_undeclared_by=contents.output_roots_undeclared_by,
    )


def preview_discard(contents: StoreContents) -> DeletionPreview:
    uncommitted = contents.uncommitted
    return DeletionPreview(
        action="discard",
        store_uri=contents.store_uri,
        epoch=contents.epoch,
        checkpoints=len(uncommitted),
        committed_checkpoints=0,
        unsealed_directories=len(contents.unsealed_ids),
        keys=sum(c.num_keys for c in uncommitted if c.checkpoint_id in contents.valid_ids),
        uncommitted_files=sum(c.num_files for c in uncommitted),
        uncommitted_bytes=sum(c.num_bytes for c in uncommitted),
        snapshots=0,
        kept_checkpoints=len(contents.checkpoints) - len(uncommitted),
        ends_open_epoch=contents.epoch_open,
        output_roots=contents.output_roots,
        output_roots_declared=contents.output_roots_declared,
        output_roots_undeclared_by=contents.output_roots_undeclared_by,
    )


def preview(store: CheckpointStore, action: str) -> DeletionPreview:
    """The preview of ``action`` (``"clear"`` or ``"discard"``) on ``store``, read now."""
    contents = store.inspection.contents()
    return preview_clear(contents) if action == "clear" else preview_discard(contents)
