"""The worker daemon (``spark.python.daemon.module``, airflow_ckpt_provider/spark/worker_daemon.py): the
suite's shared session runs every Python task through it, so every Spark test exercises it; these check
what it changes, and that an archive that changed is still read again."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from airflow_ckpt_provider.contract import CONF_PYTHON_DAEMON, WORKER_DAEMON_MODULE

pytestmark = pytest.mark.spark

GUARD = textwrap.dedent(
    """
    import importlib, sys, zipfile
    archive = sys.argv[1]

    def write(*modules):
        with zipfile.ZipFile(archive, "w") as z:
            for name in modules:
                z.writestr(f"{name}.py", f"NAME = {name!r}\\n")

    write("first_mod")
    sys.path.insert(0, archive)
    import first_mod
    from airflow_ckpt_provider.spark import worker_daemon
    print("installed", worker_daemon.install_zip_guard())
    importer = sys.path_importer_cache[archive]
    importlib.invalidate_caches()
    files = importer._files
    importlib.invalidate_caches()
    print("re-read unchanged", importer._files is not files)
    write("first_mod", "second_mod")  # the archive changes on disk: the next invalidation reads it
    importlib.invalidate_caches()
    import second_mod
    print("new module", second_mod.NAME)
    """
)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the guard is for Python < 3.12 (fixed in CPython 3.12)")
def test_an_unchanged_archive_is_not_read_again_and_a_changed_one_is(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", GUARD, str(tmp_path / "mods.zip")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["installed True", "re-read unchanged False", "new module second_mod"]


def test_python_tasks_run_in_the_daemon_with_their_imports_frozen(spark: SparkSession) -> None:
    """Without the daemon module, a worker has nothing frozen and re-reads pyspark.zip before every task."""
    assert spark.sparkContext.getConf().get(CONF_PYTHON_DAEMON) == WORKER_DAEMON_MODULE

    def probe(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        import gc
        import zipimport

        for _ in batches:
            pass
        guarded = getattr(zipimport.zipimporter.invalidate_caches, "_ckpt_guard", False)
        yield pa.RecordBatch.from_pydict({"frozen": [gc.get_freeze_count()], "guarded": [guarded]})

    rows = spark.range(4, numPartitions=2).mapInArrow(probe, "frozen long, guarded boolean").collect()
    assert len(rows) == 2
    assert all(row.frozen > 50_000 for row in rows), rows  # pyarrow, pandas, pyspark's serializers, ours
    assert all(row.guarded == (sys.version_info < (3, 12)) for row in rows), rows
