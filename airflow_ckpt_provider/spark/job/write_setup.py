"""What a write settles on the driver before any task runs: its output root declared, the file packing pinned."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from airflow_ckpt_provider.spark.job.job_context import JobContext
from airflow_ckpt_provider.spark.temporary_conf import session_conf
from airflow_ckpt_provider.store.deletion_guard import parse_location
from airflow_ckpt_provider.store.errors import InvalidArgumentError, StoreUnavailableError

log = logging.getLogger(__name__)


def declare_output_root(job: JobContext, output_root: str) -> None:
    """Declare, on the driver and before any task writes, where this write puts its files: only
    there may commit, discard and clear ever delete (docs/design.md, section 7). Executors
    never declare. A store failure only degrades the run (its orphans are then kept); a root the
    operator's ``output_roots`` do not cover stops the write before it starts."""
    store = job.store
    if store.breaker.tripped:
        return
    try:
        store.epochs.declare_output_root(job.epoch, output_root)
    except (StoreUnavailableError, OSError) as exc:
        store.breaker.record_failure("declare_output_root", exc)
        log.warning("could not declare output root %s (%s): its orphans will be kept", output_root, exc)
        return
    except InvalidArgumentError as exc:
        if exc.reason != "output_root" or not _unbound(store.uri, output_root):
            raise
        # Output on another filesystem or bucket than the store, and no operator declared it: the store
        # records nothing there (docs/security.md), so only a commit given that root deletes its orphans.
        log.warning("not declaring output root %s: %s. Its orphans are kept", output_root, exc)
        return
    store.breaker.record_success()


@contextmanager
def pinned_file_packing(job: JobContext, min_tasks: int | None = None) -> Iterator[None]:
    """Keep Spark's packing of input files into tasks fixed from plan inspection to execution.

    The writer learns each task's input files from the plan; Spark packs files by
    ``spark.sql.files.minPartitionNum`` (default: the cluster's cores, which grow as
    executors register). Pinning it makes the executed plan pack as the inspected one.
    ``min_tasks`` (unique row keys' ``num_partitions``): read the input in at least that
    many tasks — each is a checkpoint, so smaller ones lose less to a failure.
    """
    spark = job.spark
    name = "spark.sql.files.minPartitionNum"
    if spark.conf.get(name, None):
        yield
        return
    try:
        cores = int(spark.conf.get("spark.sql.leafNodeDefaultParallelism", None) or 0)
        cores = cores or job.backend.default_parallelism()
    except Exception:
        yield
        return
    with session_conf(spark, name, str(max(cores, min_tasks or 0))):
        yield


def _unbound(store_uri: str, root: str) -> bool:
    """Whether ``root`` is in another scheme or bucket than the store (the store records no such root)."""
    store_root, found = parse_location(store_uri), parse_location(root)
    return store_root is not None and found is not None and not found.bound_to(store_root)
