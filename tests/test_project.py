"""Project-wide rules: lint, types, and the layering DESIGN.md requires."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "airflow_ckpt_provider"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_clean() -> None:
    proc = _run("ruff", "check", "airflow_ckpt_provider", "tests", "bench", "dags_examples", "scripts")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_clean() -> None:
    proc = _run("mypy")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        ("store", r"airflow|pyspark"),
        ("spark", r"airflow"),
        ("hooks", r"pyspark"),
        ("operators", r"pyspark"),
        ("sensors", r"pyspark"),
        ("triggers", r"pyspark"),
        ("plugins", r"pyspark"),
    ],
)
def test_layering(layer: str, forbidden: str) -> None:
    pattern = re.compile(rf"^\s*(from|import)\s+({forbidden})(\.|\s|$)", re.MULTILINE)
    offenders = [
        str(path.relative_to(ROOT))
        for path in (PACKAGE / layer).rglob("*.py")
        if pattern.search(path.read_text())
    ]
    assert offenders == []


def test_store_imports_without_airflow_or_spark() -> None:
    code = (
        "import sys; import airflow_ckpt_provider.store, airflow_ckpt_provider.failpoints; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark')]; "
        "assert not bad, bad"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
