"""Every example DAG documents, beside it, what its environment must provide.

The docstring of each ``dags_examples/*.py`` has an ``Environment`` section naming every
environment variable the file reads, every Airflow connection and Variable it uses, and the
Spark connection its submit operators default to; a new ``os.environ`` read or connection
without a line there fails this test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"
DAG_FILES = sorted(EXAMPLES.glob("ckpt_*.py"))


def _needs(tree: ast.Module) -> set[str]:
    """Names the file reads from its environment: env vars, connection ids, Variable names."""
    needs: set[str] = set()
    submits_with_default_conn = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            first = node.args[0] if node.args else None
            if func in ("os.environ.get", "os.getenv") and isinstance(first, ast.Constant):
                needs.add(str(first.value))
            is_submit = func.endswith(("CheckpointedSparkSubmitOperator", "CheckpointedSparkSubmitOperator.partial"))
            if is_submit and not any(k.arg == "conn_id" for k in node.keywords):
                submits_with_default_conn = True
            for keyword in node.keywords:
                if keyword.arg in ("conn_id", "aws_conn_id") and isinstance(keyword.value, ast.Constant):
                    needs.add(str(keyword.value.value))
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            names = {ast.unparse(t) for t in node.targets}
            if names & {"AWS_CONN_ID", "CORRECTIONS_VARIABLE"}:
                needs.add(str(node.value.value))
    if submits_with_default_conn:
        needs.add("spark_default")
    return needs


@pytest.mark.parametrize("path", DAG_FILES, ids=[p.stem for p in DAG_FILES])
def test_each_example_dag_documents_its_environment(path: Path) -> None:
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree) or ""
    assert "Environment" in doc, f"{path.name}: no Environment section in its docstring"
    section = doc[doc.index("Environment") :]
    missing = sorted(name for name in _needs(tree) if name not in section)
    assert not missing, f"{path.name} reads {missing} but its Environment section does not say so"
