"""Where each record lives under a store root, and which checkpoint ids are safe to use there.

The layout (docs/store-api.md, "Layout"):

```
epochs/{n:08d}.json                 epoch record (create-if-absent: fencing)
epochs/{n:08d}.end.json             how the epoch ended
epochs/{n:08d}.expected.json        expected partition count
epochs/{n:08d}.degraded-{hex}.json  degraded markers
epochs/{n:08d}.output-{hash}.json   an output root the Spark driver declared before a write
epochs/{n:08d}.skip-audit-{source}.json  what a run found when it checked its skipped input (store/input_audit.py)
epochs/{n:08d}.delete_after_success.json  delete_after_success followed epoch n's commit: its keys count no more
checkpoints/{id}/manifest.json      written last: the checkpoint is visible iff it exists
attempts/{id}/intents/, keys/, files/   what the task attempt wrote before it (manifest format 2)
checkpoints/{id}/intents/, keys/, files/  the same, in stores written before format 2
commits/{n:08d}.json, commits/{n:08d}.done.json
snapshots/{n:08d}/manifest.json, keys.parquet
```
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Sequence

from airflow_ckpt_provider.store.errors import InvalidArgumentError

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
EPOCH_RE = re.compile(r"^(\d{8})\.json$")
EPOCH_END_RE = re.compile(r"^(\d{8})\.end\.json$")
EPOCH_EXPECTED_RE = re.compile(r"^(\d{8})\.expected\.json$")
DEGRADED_RE = re.compile(r"^(\d{8})\.degraded-[0-9a-f]+\.json$")
#: An output root the Spark driver declared for epoch n before a write (docs/design.md, section 7).
OUTPUT_DECLARATION_RE = re.compile(r"^(\d{8})\.output-[0-9a-f]{16}\.json$")
#: What the run of epoch n found when it checked the input a shortcut skipped (store/input_audit.py).
SKIP_AUDIT_RE = re.compile(r"^(\d{8})\.skip-audit-[0-9A-Za-z_-]{1,64}\.json$")
#: The commit of epoch n was followed by ``delete_after_success``, written before the cleanup deletes anything.
KEYS_DELETED_RE = re.compile(r"^(\d{8})\.delete_after_success\.json$")
COMMIT_RE = re.compile(r"^commits/\d{8}\.json$")
_HIDDEN_PREFIXES = ("_", ".")
#: Sealing manifests.
CHECKPOINTS = "checkpoints/"
#: A task attempt's intents, key parts and file parts. Kept apart from the
#: manifests so that readers of the state list only sealed checkpoints: a big job's failed
#: attempts leave a directory each here, which only the commit and cleanup need to see
#: (docs/store-api.md, "Layout").
ATTEMPTS = "attempts/"


def new_checkpoint_id() -> str:
    """A fresh, unique checkpoint id (UUID4). Each task attempt must use its own."""
    return str(uuid.uuid4())


def validate_checkpoint_id(checkpoint_id: str) -> str:
    """Return ``checkpoint_id`` if it is a safe id, else raise :class:`InvalidArgumentError` (``checkpoint_id``)."""
    if not isinstance(checkpoint_id, str) or not _ID_RE.match(checkpoint_id) or ".." in checkpoint_id:
        raise InvalidArgumentError(
            f"{checkpoint_id!r} is not a checkpoint id: ids are 1-128 characters of letters, digits, "
            "'_', '-', '.', with no '/' or '..'; use new_checkpoint_id() to make one",
            reason="checkpoint_id",
        )
    return checkpoint_id


def epoch_key(number: int, suffix: str = ".json") -> str:
    return f"epochs/{number:08d}{suffix}"


def keys_deleted_key(epoch: int) -> str:
    """Where a ``delete_after_success`` cleanup records, before it deletes anything, that the keys of the
    commit of ``epoch`` no longer count (store/retention.py)."""
    return epoch_key(epoch, ".delete_after_success.json")


def skip_audit_key(epoch: int, source: str) -> str:
    """Where the run of ``epoch`` records the audit of one row source's skipped input."""
    return epoch_key(epoch, f".skip-audit-{source}.json")


def output_declaration_key(epoch: int, root: str) -> str:
    """Where the driver's declaration of output root ``root`` (canonical URI) for ``epoch`` lives."""
    digest = hashlib.sha256(root.encode()).hexdigest()[:16]
    return epoch_key(epoch, f".output-{digest}.json")


def manifest_key(checkpoint_id: str) -> str:
    return f"{CHECKPOINTS}{checkpoint_id}/manifest.json"


def attempt_prefix(checkpoint_id: str) -> str:
    """Where an attempt writes its intents, key parts and file parts (the parts its manifest names)."""
    return f"{ATTEMPTS}{checkpoint_id}/"


def checkpoint_prefixes(checkpoint_id: str) -> tuple[str, str]:
    """Every prefix a checkpoint's records are under: its attempt's, and its manifest's."""
    return attempt_prefix(checkpoint_id), f"{CHECKPOINTS}{checkpoint_id}/"


def checkpoint_id_of(key: str) -> str | None:
    """The checkpoint id of a record under ``checkpoints/`` or ``attempts/`` (None for anything else)."""
    parts = key.split("/")
    if len(parts) >= 3 and parts[0] + "/" in (CHECKPOINTS, ATTEMPTS) and parts[1]:
        return parts[1]
    return None


def commit_key(epoch: int) -> str:
    return f"commits/{epoch:08d}.json"


def commit_done_key(epoch: int) -> str:
    return f"commits/{epoch:08d}.done.json"


def snapshot_prefix(number: int) -> str:
    return f"snapshots/{number:08d}/"


def hidden(key: str) -> bool:
    """Whether an output listing entry is hidden (``_SUCCESS``, ``.crc``...): never reported as unknown."""
    return any(part.startswith(_HIDDEN_PREFIXES) for part in key.split("/"))


def under_root(path: str, roots: Sequence[str]) -> bool:
    return any(path.startswith(root.rstrip("/") + "/") for root in roots)
