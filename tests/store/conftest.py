"""One contract suite, two backends: every test taking ``backend`` runs on local disk and on S3.

The S3 runs use the real SeaweedFS server the suite starts (ckpt_testkit/seaweed.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.store import CheckpointStore, open_blobs, open_store
from airflow_ckpt_provider.store.blobs.base import BlobStore


@dataclass
class Backend:
    """A store root and an output root on one backend, plus raw access for tests."""

    name: str
    store_uri: str
    output_uri: str
    options: dict[str, Any] = field(default_factory=dict)

    def store(self, **extra: Any) -> CheckpointStore:
        return open_store(self.store_uri, **(self.options | extra))

    def store_blobs(self) -> BlobStore:
        return open_blobs(self.store_uri, **self.options)

    def output_blobs(self) -> BlobStore:
        return open_blobs(self.output_uri, **self.options)

    def write_output(self, name: str, data: bytes = b"data") -> str:
        blobs = self.output_blobs()
        blobs.put(name, data)
        return blobs.child_uri(name)

    def output_names(self) -> set[str]:
        return {info.key for info in self.output_blobs().list("")}

    def store_keys(self) -> set[str]:
        return {info.key for info in self.store_blobs().list("")}


def _local(tmp_path: Path) -> Backend:
    return Backend("local", f"file://{tmp_path}/store", f"file://{tmp_path}/out")


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "local":
        yield _local(tmp_path)
        return
    options = request.getfixturevalue("s3_options")
    bucket = request.getfixturevalue("s3_bucket")
    run = uuid.uuid4().hex[:8]
    yield Backend("s3", f"s3://{bucket}/ckpt/{run}", f"s3://{bucket}/out/{run}", dict(options))
