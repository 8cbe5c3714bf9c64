"""What one task-instance page reads from a store: a bounded amount, each record at most once.

In-process on a real local store (the view model the endpoint renders); the blob layer
counts its requests, so the test sees every read the page makes.
"""

from __future__ import annotations

from pathlib import Path

from airflow_ckpt_provider.plugins.task_view import build_task_store_view, summary_of
from airflow_ckpt_provider.store import open_store
from tests.cli.sample_store import fill_store

CHECKPOINTS = 150


def test_a_task_page_reads_each_manifest_at_most_once(tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    fill_store(uri, (tmp_path / "out").as_uri(), partitions=CHECKPOINTS, keys_per_partition=2)
    store = open_store(uri)
    before = store.blobs.request_count
    view = build_task_store_view(store)
    requests = store.blobs.request_count - before
    assert view.checkpoint_count == CHECKPOINTS and view.progress["keys_done"] == 2 * CHECKPOINTS
    print(f"\ntask page on {CHECKPOINTS} checkpoints: {requests} store requests")
    assert requests <= CHECKPOINTS + 40, requests


def test_the_dag_summary_reads_each_manifest_at_most_once(tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    fill_store(uri, (tmp_path / "out").as_uri(), partitions=CHECKPOINTS, keys_per_partition=2)
    store = open_store(uri)
    before = store.blobs.request_count
    summary = summary_of(store)
    assert summary["keys_done"] == 2 * CHECKPOINTS
    assert store.blobs.request_count - before <= CHECKPOINTS + 20
