"""What a request of the Checkpoints view spends its deadline on (plugins/flow.py): its store call only.

In-process on real local stores, no API server. What runs before the store call (the access
checks, the metadata-DB reads: here a pause longer than the deadline) never counts against the
page's deadline; a store call that outlasts it answers 503 (``StoreUnavailableError``, reason ``deadline``); and a fresh
process's first store call loads nothing that the app has not loaded already, so a cold API server's
first page answers within its deadline like any other (plugins/store_access.py, ``warm_up``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.locator import TaskStoreRef
from airflow_ckpt_provider.plugins.flow import StoreRequest
from airflow_ckpt_provider.store import EpochStatus, RetentionPolicy
from airflow_ckpt_provider.store.errors import StoreUnavailableError
from tests.cli.sample_store import fill_store
from tests.support.airflow_harness import ROOT
from tests.support.errors import raises_reason


def _page_request(uri: str, deadline_seconds: float) -> StoreRequest:
    config = dataclasses.replace(CheckpointConfig.load(), ui_store_deadline_seconds=deadline_seconds)
    ref = TaskStoreRef("dag", "task", "run", uri, None, "success", "default location")
    return StoreRequest(user=None, ref=ref, context={}, edit=False, config=config)


def test_the_deadline_covers_the_store_call_only(tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    fill_store(uri, (tmp_path / "out").as_uri())
    request = _page_request(uri, 1.0)

    async def page() -> int | None:
        await asyncio.sleep(1.5)  # the access checks and DB reads of a request, longer than its deadline
        return (await request.run(lambda store: store.inspection.progress().keys_done)).value

    assert asyncio.run(page()) == 150

    async def hanging_page() -> None:
        try:
            await request.run(lambda store: time.sleep(2))
        finally:
            await asyncio.sleep(1.5)  # the late call ends (and frees its slot) on this loop

    with raises_reason(StoreUnavailableError, "deadline", match="within 1 s"):
        asyncio.run(hanging_page())


#: A fresh process builds the app as the API server does, then reads a task page's store and a
#: reprocess history: the modules its first store call imports are printed as JSON.
_FIRST_READ = """
import json, sys
from airflow_ckpt_provider.plugins.app import create_app
from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.locator import TaskStoreRef
from airflow_ckpt_provider.plugins.store_access import open_for_view
from airflow_ckpt_provider.plugins.store_calls import Deadline
from airflow_ckpt_provider.plugins.task_view import build_task_store_view

create_app()
before = set(sys.modules)
for uri in sys.argv[1:]:
    ref = TaskStoreRef("dag", "task", "run", uri, None, "success", "default location")
    store, _ = open_for_view(ref, Deadline.after(300), CheckpointConfig.load())
    try:
        build_task_store_view(store)
        [record.to_json() for record in store.reprocessing.records()]
    finally:
        store.close()
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_a_fresh_apps_first_store_call_loads_nothing(tmp_path: Path) -> None:
    page, history = (tmp_path / "page").as_uri(), (tmp_path / "history").as_uri()
    fill_store(page, (tmp_path / "out-page").as_uri())
    store = fill_store(history, (tmp_path / "out-history").as_uri())
    epoch = store.epochs.current()
    assert epoch is not None
    store.epochs.end(epoch.number, status=EpochStatus.SUCCEEDED)
    store.commit([(tmp_path / "out-history").as_uri()])
    store.housekeeping.cleanup(RetentionPolicy.RETAIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({"PYTHONPATH": str(ROOT), "AIRFLOW_HOME": str(tmp_path / "airflow")})
    proc = subprocess.run(
        [sys.executable, "-c", _FIRST_READ, page, history], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [m for m in loaded if m.split(".")[0] in ("pyarrow", "boto3", "botocore", "airflow")] == []
