"""Project-wide rules: lint, types, the layering of docs/design.md (section 2.1), typed errors, citations."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "airflow_ckpt_provider"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_clean() -> None:
    proc = _run("ruff", "check", "airflow_ckpt_provider", "ckpt_testkit", "tests", "bench", "dags_examples", "scripts")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_clean() -> None:
    proc = _run("mypy")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        ("store", r"airflow|pyspark"),
        ("contract.py", r"airflow|pyspark"),
        ("display", r"airflow|pyspark"),
        # Inside the package: downward only, or sideways through a module both sides import.
        ("store", r"airflow_ckpt_provider\.(spark|hooks|operators|sensors|triggers|plugins|cli|display)"),
        ("spark", r"airflow_ckpt_provider\.(hooks|operators|sensors|triggers|plugins|cli|display)"),
        ("hooks", r"airflow_ckpt_provider\.(operators|sensors|triggers|plugins|cli)"),
        ("triggers", r"airflow_ckpt_provider\.(operators|sensors|plugins|cli)"),
        ("sensors", r"airflow_ckpt_provider\.(operators|plugins|cli)"),
        ("operators/commit.py", r"airflow_ckpt_provider\.operators\.spark_submit"),
        ("operators/clear.py", r"airflow_ckpt_provider\.operators\.spark_submit"),
        ("plugins", r"airflow_ckpt_provider\.(cli|operators|sensors)"),
        ("cli", r"airflow_ckpt_provider\.(plugins|operators|sensors)"),
        ("display", r"airflow_ckpt_provider\.(cli|plugins|hooks|operators|spark)"),
        ("spark", r"airflow"),
        ("hooks", r"pyspark"),
        ("operators", r"pyspark"),
        ("sensors", r"pyspark"),
        ("triggers", r"pyspark"),
        ("plugins", r"pyspark"),
        ("cli", r"pyspark"),
        # TaskFlow runs the Spark client in the worker, through the Spark provider's session: it imports
        # airflow_ckpt_provider.spark (lazily), never pyspark itself; nothing else on the Airflow side imports it.
        ("taskflow", r"pyspark"),
        ("operators", r"airflow_ckpt_provider\.(taskflow|spark)"),
        ("hooks", r"airflow_ckpt_provider\.(taskflow|spark)"),
        ("sensors", r"airflow_ckpt_provider\.(taskflow|spark)"),
        ("triggers", r"airflow_ckpt_provider\.(taskflow|spark)"),
        ("plugins", r"airflow_ckpt_provider\.(taskflow|spark)"),
        ("cli", r"airflow_ckpt_provider\.(taskflow|spark)"),
        ("spark", r"airflow_ckpt_provider\.taskflow"),
    ],
)
def test_layering(layer: str, forbidden: str) -> None:
    pattern = re.compile(rf"^\s*(from|import)\s+({forbidden})(\.|\s|$)", re.MULTILINE)
    where = PACKAGE / layer
    paths = [where] if where.is_file() else list(where.rglob("*.py"))
    assert paths, f"no module at {where}"
    offenders = [str(path.relative_to(ROOT)) for path in paths if pattern.search(path.read_text())]
    assert offenders == []


def test_the_jvm_is_touched_only_by_the_classic_backend() -> None:
    """Py4J (``sparkContext``, ``_jvm``, ``_jdf``, accumulators) only in ``spark/backend/classic.py``: the rest
    of ``spark/`` goes through the session's backend, so it also runs on Spark Connect (docs/design.md, D10)."""
    pattern = re.compile(r"sparkContext|_jvm\b|_jsc\b|_jdf\b|_gateway\b|\.accumulator\(")
    allowed = PACKAGE / "spark" / "backend" / "classic.py"
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((PACKAGE / "spark").rglob("*.py"))
        if path != allowed
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []


def test_no_private_airflow_imports() -> None:
    """Only Airflow's public interface (``airflow._*`` and ``airflow.sdk._*`` change without notice)."""
    pattern = re.compile(r"^\s*(from|import)\s+airflow(\.sdk)?\._", re.MULTILINE)
    offenders = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


UNTYPED = {"Exception", "RuntimeError", "ValueError", "TypeError", "KeyError", "OSError", "LookupError"}
TYPED_ERROR_LAYERS = (
    "store",
    "spark",
    "operators",
    "taskflow",
    "hooks",
    "sensors",
    "triggers",
    "plugins",
    "cli",
    "display",
)


def test_user_facing_errors_are_typed() -> None:
    """Every error a user can meet is a ``CheckpointError`` subclass that says what to do. A builtin
    exception is raised only by guards that cannot be reached, marked ``pragma: no cover``."""
    offenders = []
    files = [PACKAGE / "contract.py", *(p for layer in TYPED_ERROR_LAYERS for p in (PACKAGE / layer).rglob("*.py"))]
    for path in files:
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            if not (isinstance(node.exc.func, ast.Name) and node.exc.func.id in UNTYPED):
                continue
            if any("pragma: no cover" in line for line in lines[max(0, node.lineno - 3) : node.lineno]):
                continue
            offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} raises {node.exc.func.id}")
    assert offenders == []


def test_errors_are_few_with_a_documented_reason_each() -> None:
    """The package's errors are a few classes, each saying what the caller should do, with no builtin
    bases; every raise names a ``reason`` that docs/errors.md lists in its class's row."""
    from airflow_ckpt_provider.store import errors

    public = {n for n, c in vars(errors).items() if isinstance(c, type) and issubclass(c, errors.CheckpointError)}
    assert 8 <= len(public) <= 12, sorted(public)
    assert all(c.__bases__ in ((Exception,), (errors.CheckpointError,)) for c in map(vars(errors).get, public))
    rows = {
        m.group(1): set(re.findall(r"`(\w+)`", m.group(2)))
        for m in re.finditer(r"^\| `(\w+)` \|[^|]*\|(.*)\|$", (ROOT / "docs" / "errors.md").read_text(), re.M)
    }
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id == "CheckpointError":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} raises the base class")
            if node.func.id not in rows:
                continue
            reason = next((k.value for k in node.keywords if k.arg == "reason"), None)
            if reason is None:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.id} without a reason")
            elif isinstance(reason, ast.Constant) and reason.value not in rows[node.func.id]:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.id} reason {reason.value!r}")
    assert offenders == [], "raise with a reason docs/errors.md lists for the class"


# Documents a reader of the repository does not have: the design notes and seeds it started from,
# numbered scenarios of the issue tracker. Cite docs/ (e.g. "docs/design.md, invariant 3") instead.
OUTSIDE_CITATION = re.compile(
    r"DESIGN\.md|DESIGN invariant|\b[Ss]eeds? 0\d\d\b|\bScenario \d|\bthe issue\b|\bissue \d+\b"
    r"|shared/(DESIGN|seeds|STYLE)"
)


def test_code_and_docs_cite_only_what_the_repository_holds() -> None:
    roots = ["airflow_ckpt_provider", "ckpt_testkit", "tests", "bench", "dags_examples", "scripts", "docs"]
    files = [ROOT / "README.md"]
    for root in roots:
        files += [p for p in (ROOT / root).rglob("*") if p.suffix in (".py", ".md", ".java", ".sh", ".html")]
    skip = {Path(__file__).resolve()}
    offenders = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in files
        if path.resolve() not in skip and "bench/results" not in str(path)
        for match in OUTSIDE_CITATION.finditer(path.read_text())
    ]
    assert offenders == []


def test_every_store_deletion_passes_the_deletion_guard() -> None:
    """Only the blob layer and store/deletion.py (which asks the DeletionGuard before each call)
    delete objects or abort uploads: no other store module can reach past the store root and the
    declared output roots (docs/design.md, invariant 10)."""
    allowed = {PACKAGE / "store" / "deletion.py"}
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((PACKAGE / "store").rglob("*.py"))
        if path not in allowed and "blobs" not in path.relative_to(PACKAGE / "store").parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\.(delete_many|abort_upload)\(", line)
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


def test_committed_jar_is_built_from_the_committed_source(tmp_path: Path) -> None:
    """The native writer's jar must match its Java source (rebuild with scripts/build_jar.sh after a change)."""
    jar = ROOT / "airflow_ckpt_provider" / "spark" / "jvm" / "airflow-ckpt-spark.jar"
    with zipfile.ZipFile(jar) as archive:
        committed = {n: archive.read(n) for n in archive.namelist() if n.endswith(".class")}
        manifest = archive.read("META-INF/MANIFEST.MF").decode()
    assert committed, "the jar holds no classes"
    javac = shutil.which("javac")
    if javac is None:
        pytest.skip("no javac here: the committed jar is used as is")
    version = subprocess.run([javac, "-version"], capture_output=True, text=True, check=True).stdout.split()[-1]
    if f"Created-By: {version}" not in manifest:
        pytest.skip(f"the jar was built by another JDK than javac {version}; class files may differ byte-wise")
    env = {**os.environ, "PY": sys.executable}
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "airflow_ckpt_provider" / "spark" / "jvm", copy / "airflow_ckpt_provider/spark/jvm")
    shutil.copytree(ROOT / "scripts", copy / "scripts")
    subprocess.run(["bash", "scripts/build_jar.sh"], cwd=copy, env=env, check=True, capture_output=True)
    with zipfile.ZipFile(copy / "airflow_ckpt_provider/spark/jvm/airflow-ckpt-spark.jar") as archive:
        rebuilt = {n: archive.read(n) for n in archive.namelist() if n.endswith(".class")}
    assert rebuilt == committed, "the committed jar is stale: run scripts/build_jar.sh and commit the jar"


def test_the_demo_installs_only_what_it_runs_and_the_browser_comes_with_the_tests() -> None:
    """The demo's set-up installs Airflow, the Spark provider and PySpark, never the test extras
    or a browser; the Chromium install of the UI tests lives in scripts/test.sh (so .ci/run has it)."""
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    demo = (ROOT / "scripts" / "demo.sh").read_text()
    tests = (ROOT / "scripts" / "test.sh").read_text()
    assert "apt-get" not in setup and "chromium" not in setup.replace("scripts/test.sh", "")
    assert "bash scripts/setup.sh demo" in demo
    assert 'demo) EXTRAS="airflow,spark"' in setup
    assert "bash scripts/setup.sh test" in tests and "apt-get install" in tests and "chromium-driver" in tests


def test_the_longest_files_listed_for_the_workers_exist() -> None:
    """tests/conftest.py starts these files first; a renamed file would silently lose its place."""
    from tests.conftest import LONGEST_FILES

    missing = [name for name in LONGEST_FILES if not (ROOT / name).is_file()]
    assert not missing, missing
    assert len(set(LONGEST_FILES)) == len(LONGEST_FILES), "a file listed twice"
