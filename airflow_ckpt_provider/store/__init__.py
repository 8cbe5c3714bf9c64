"""The engine-agnostic checkpoint store. Imports neither Airflow nor Spark.

See ``docs/store-api.md`` for the contract, the layout and the invariants.
"""

from airflow_ckpt_provider.store.errors import (
    CheckpointError,
    CorruptCheckpointError,
    EpochConflictError,
    IncompleteRunError,
    InvalidArgumentError,
    NotFoundError,
    RefusedError,
    StoreUnavailableError,
    UnsupportedError,
)
from airflow_ckpt_provider.store.input_audit import SkipAudit
from airflow_ckpt_provider.store.model import (
    Checkpoint,
    CheckpointStatus,
    ClearResult,
    CommitResult,
    ConsistencyReport,
    Epoch,
    EpochStatus,
    FileMetadata,
    KeySource,
    Progress,
    RetentionPolicy,
    StoreContents,
    UnknownFiles,
)
from airflow_ckpt_provider.store.opener import open_blobs, open_store, public_options, secret_options
from airflow_ckpt_provider.store.reprocess.model import REPROCESS_FAILPOINTS, ReprocessRecord, Selection
from airflow_ckpt_provider.store.reprocess.plan import PlannedFile, ReprocessPlan, ReprocessResult
from airflow_ckpt_provider.store.store import KEY_COLUMN, CheckpointStore, new_checkpoint_id

__all__ = [
    "KEY_COLUMN",
    "REPROCESS_FAILPOINTS",
    "Checkpoint",
    "CheckpointError",
    "CheckpointStatus",
    "CheckpointStore",
    "ClearResult",
    "CommitResult",
    "ConsistencyReport",
    "CorruptCheckpointError",
    "Epoch",
    "EpochConflictError",
    "EpochStatus",
    "FileMetadata",
    "IncompleteRunError",
    "InvalidArgumentError",
    "KeySource",
    "NotFoundError",
    "PlannedFile",
    "Progress",
    "RefusedError",
    "ReprocessPlan",
    "ReprocessRecord",
    "ReprocessResult",
    "RetentionPolicy",
    "Selection",
    "SkipAudit",
    "StoreContents",
    "StoreUnavailableError",
    "UnknownFiles",
    "UnsupportedError",
    "new_checkpoint_id",
    "open_blobs",
    "open_store",
    "public_options",
    "secret_options",
]
