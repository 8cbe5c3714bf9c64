"""Modules that were renamed stay importable from their old paths, warn, and hand out the very same objects."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "airflow_ckpt_provider"

# old dotted path -> (new dotted path, a name users import from it)
MOVED = {
    "airflow_ckpt_provider.operators.spark": (
        "airflow_ckpt_provider.operators.spark_submit",
        "CheckpointedSparkSubmitOperator",
    ),
    "airflow_ckpt_provider.operators.handoff": ("airflow_ckpt_provider.contract", "Handoff"),
    "airflow_ckpt_provider.operators.target": ("airflow_ckpt_provider.hooks.store_location", "resolve_store_uri"),
    "airflow_ckpt_provider.cli.target": ("airflow_ckpt_provider.cli.store_selection", "StoreTarget"),
    "airflow_ckpt_provider.cli.preview": ("airflow_ckpt_provider.display.deletion_preview", "DeletionPreview"),
    "airflow_ckpt_provider.spark.confs": ("airflow_ckpt_provider.spark.job_settings", "settings_from_conf"),
    "airflow_ckpt_provider.spark.sessionconf": ("airflow_ckpt_provider.spark.temporary_conf", "session_conf"),
    "airflow_ckpt_provider.spark.inputs": ("airflow_ckpt_provider.spark.readers.file_inputs", "FileInputs"),
    "airflow_ckpt_provider.spark.reader": ("airflow_ckpt_provider.spark.readers.arrow", "plan_groups"),
    "airflow_ckpt_provider.spark.task": ("airflow_ckpt_provider.spark.writers.arrow_task", "WriterFn"),
    "airflow_ckpt_provider.spark.sink": ("airflow_ckpt_provider.spark.writers.arrow_parquet", "ParquetSink"),
    "airflow_ckpt_provider.spark.native": ("airflow_ckpt_provider.spark.writers.native", "jar_path"),
    "airflow_ckpt_provider.spark.context": ("airflow_ckpt_provider.spark.writers.context", "WriteContext"),
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_import_path_forwards_to_the_new_module_with_a_deprecation_warning(old: str) -> None:
    new, name = MOVED[old]
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        value = getattr(module, name)
    assert value is getattr(importlib.import_module(new), name)
    # No file is left at the old path: the forwarding module is the only thing there.
    assert not (PACKAGE.parent / (old.replace(".", "/") + ".py")).exists()


def test_from_import_of_the_old_operator_path_works_in_a_fresh_interpreter() -> None:
    """What README and DAGs written for earlier versions do: ``from ...operators.spark import ...``."""
    code = (
        "import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n"
        "    from airflow_ckpt_provider.operators.spark import CheckpointedSparkSubmitOperator\n"
        "except DeprecationWarning as exc:\n"
        "    print('warned:', exc)\n"
        "warnings.simplefilter('ignore', DeprecationWarning)\n"
        "from airflow_ckpt_provider.operators.spark import CheckpointedSparkSubmitOperator as Old\n"
        "from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator as New\n"
        "assert Old is New\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warned: airflow_ckpt_provider.operators.spark moved to airflow_ckpt_provider.operators.spark_submit" in (
        proc.stdout
    )


def test_the_renamed_write_task_report_keeps_its_old_name_with_a_warning() -> None:
    import airflow_ckpt_provider.spark as spark_side

    with pytest.warns(DeprecationWarning, match="WriteTaskReport"):
        old = spark_side.TaskReport
    assert old is spark_side.WriteTaskReport
