"""A PySpark worker daemon that makes each Python task cheaper: ``spark.python.daemon.module``.

Every Python task of a Spark job (our key readers, skip and writer tasks, and the user's own
UDFs) runs in a worker forked from PySpark's daemon, and with PySpark 4.1 on Python 3.11 each
task pays two fixed costs that have nothing to do with its rows (measured on tiny tasks: about
1 CPU-second per checkpointed run of 8 Python tasks, more than half of the workers' CPU):

* the worker calls ``importlib.invalidate_caches()`` before every task, and on Python < 3.12
  that re-reads the directory of every zip archive on ``sys.path``: PySpark puts its own
  ``pyspark.zip`` (1,300 files) there, 60-170 ms per task. CPython fixed it in 3.12
  (gh-103200: invalidation only marks the cache stale); Spark's master too (SPARK-54744: only
  when new files arrived);
* the daemon runs ``gc.collect()`` after every task of a reused worker, which scans every object
  the worker imported (pandas and pyarrow alone are about 60,000), 30-120 ms per task.

This module imports what the workers would import anyway (pyarrow, pandas, PySpark's Arrow
serializers, this package), freezes it out of the garbage collector's reach (``gc.freeze()``,
the pre-fork server recipe: forked workers share it and their collections skip it), and on
Python < 3.12 re-reads a zip archive's directory only when the archive changed on disk (its
size, modification time or inode), which is what the 3.12 fix amounts to for archives that are
not rewritten in place. Then it runs PySpark's own daemon. Nothing else changes.

``CheckpointedSparkSubmitOperator`` sets it unless the submit's ``conf`` names a daemon module;
a session you build yourself takes it as
``.config("spark.python.daemon.module", "airflow_ckpt_provider.spark.worker_daemon")``, and
``pyspark.daemon`` turns it off. The package must be installed where executors run Python,
as for every checkpointed job.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import zipimport
from collections.abc import Callable
from typing import Any

#: Modules Python tasks import: preloaded before the fork, then frozen.
PRELOAD = (
    "pyspark.worker",
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.parquet",
    "pandas",
    "pyspark.sql.pandas.serializers",
    "pyspark.sql.pandas.types",
    "airflow_ckpt_provider.spark",
    "airflow_ckpt_provider.spark.writers.arrow_task",
    "airflow_ckpt_provider.store",
    "boto3",
)

_GUARD_ATTRIBUTE = "_ckpt_archive_signature"


def _archive_signature(path: str) -> tuple[int, int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size, status.st_ino


def install_zip_guard() -> bool:
    """On Python < 3.12, ``zipimporter.invalidate_caches`` re-reads an archive's directory only when
    the archive changed on disk since this importer last read it. Returns whether it was installed."""
    if sys.version_info >= (3, 12):
        return False
    original: Callable[[Any], None] = zipimport.zipimporter.invalidate_caches
    if getattr(original, "_ckpt_guard", False):
        return True

    def invalidate_caches(self: Any) -> None:
        signature = _archive_signature(self.archive)
        if signature is not None and getattr(self, _GUARD_ATTRIBUTE, None) == signature:
            return
        original(self)
        setattr(self, _GUARD_ATTRIBUTE, signature)

    invalidate_caches._ckpt_guard = True  # type: ignore[attr-defined]
    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]
    return True


def preload_and_freeze() -> list[str]:
    """Import :data:`PRELOAD` (those installed) and freeze every object alive. Returns what was imported."""
    loaded = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # not installed, or broken here: the task that needs it will say so, not the daemon
            continue
        loaded.append(name)
    gc.collect()
    gc.freeze()
    return loaded


def main() -> None:
    install_zip_guard()
    preload_and_freeze()
    importlib.invalidate_caches()  # the guard records each archive now: forked workers do not re-read it
    from pyspark import daemon  # reads the worker module from sys.argv, as `python -m pyspark.daemon` does

    daemon.manager()


if __name__ == "__main__":
    main()
