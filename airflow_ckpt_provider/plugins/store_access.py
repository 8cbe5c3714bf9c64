"""Opening a task's store for the Checkpoints view: its operator's connection, the view's deadline.

Credentials come from the connection the operator names (or ``[ckpt] aws_conn_id``); a named
connection that cannot be read is an error (hooks/connections.py), never the API server's own
AWS identity. Every request the store makes, to itself or to an output location, is refused
once the page's deadline has passed, and each one is bounded by the deadline too.
"""

from __future__ import annotations

from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook
from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.locator import TaskStoreRef, task_instance_anchor
from airflow_ckpt_provider.plugins.problems import secret_values
from airflow_ckpt_provider.plugins.store_calls import Deadline, DeadlineBlobStore
from airflow_ckpt_provider.store import CheckpointStore, open_store
from airflow_ckpt_provider.store.blobs.base import BlobStore


def open_for_view(
    ref: TaskStoreRef, deadline: Deadline, config: CheckpointConfig, *, retries: int = 0
) -> tuple[CheckpointStore, list[str]]:
    """The store of ``ref``, its requests bounded by ``deadline``; and the secret values to scrub.

    Raises the hook's :class:`StoreUnavailableError` (``connection``) (connection not defined or unreadable).
    """
    hook = CheckpointHook(checkpoint_uri=ref.uri, aws_conn_id=ref.aws_conn_id, config=config)
    options = dict(hook.store_options)
    if ref.uri.startswith(("s3://", "s3a://")):
        # One request never outlives the page, retries included: each attempt may wait for the connection
        # and then for the answer, so together they fit in the deadline (an action's too).
        per_attempt = deadline.seconds / (2 * (retries + 1))
        options["timeout_seconds"] = max(0.5, min(float(options.get("timeout_seconds") or 10), per_attempt))
        options["max_attempts"] = retries

    def bounded(blobs: BlobStore) -> BlobStore:
        return DeadlineBlobStore(blobs, deadline)

    # Deletions, moves and restores stay inside the roots the DAG declares, else [ckpt] trusted_output_roots,
    # else none: output files are kept (docs/security.md, "The trust model").
    anchor = task_instance_anchor(ref.dag_id, ref.task_id, ref.output_roots, config.trusted_output_roots)
    store = open_store(ref.uri, wrap_blobs=bounded, **anchor.store_options(), **options)
    return store, secret_values(options)


def warm_up() -> None:
    """Load now, with the app, what the process's first store call would otherwise load under its
    page's deadline: pyarrow's dataset layer, which ``pyarrow.parquet.read_table`` imports on first use
    (pandas and numpy with it: about 320 modules, 3 s of CPU, so a cold API server's first page missed
    its 5 s deadline on a loaded machine), and where the Amazon provider is installed the S3 backend and
    the provider's AWS hook (boto3, botocore: about 270 modules, 2 s)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"key": ["warm-up"]}), sink)
    pq.read_table(pa.BufferReader(sink.getvalue()))
    try:
        import airflow.providers.amazon.aws.hooks.base_aws  # noqa: F401

        import airflow_ckpt_provider.store.blobs.s3  # noqa: F401
    except ImportError:  # no Amazon provider, no boto3: no s3:// store can be opened anyway
        pass
