"""``CheckpointedJob`` from a venv that has only ``pyspark-client``, the pure Spark Connect client
(no JVM jars, no py4j, no ``pyspark.core``), against the suite's real Connect server.

A user on a managed Connect service installs ``pyspark-client`` and our package, nothing else: the
package must import and run without any classic-only module. The venv is real (made by ``uv`` or
``venv`` + ``pip`` from the package registry, with the versions of the suite's own venv); the job is
the user-UDF row-key job of the other Connect tests: a bad record fails the first run in its last
task, the rerun processes exactly the keys that were not sealed, the commit leaves each row once.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.spark.helpers import REPO_ROOT, FakeOperator, Target, assert_exactly_once, done_keys
from tests.spark.test_row_keys_progress import _scenario

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]  # the venv (pip without uv: about a minute)

JOB = Path(__file__).parent / "jobs" / "client_only_job.py"
#: What a Connect-only user installs: pyspark-client (its own requirements) and our package's.
CLIENT_PACKAGES = [
    "pyspark-client",
    "pandas",
    "pyarrow",
    "numpy",
    "grpcio",
    "grpcio-status",
    "googleapis-common-protos",
    "zstandard",
    "protobuf",
    "pyyaml",
    "boto3",
]


@pytest.fixture(scope="module")
def client_only_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real venv with pyspark-client and the package's requirements at this suite's versions; no pyspark."""
    venv = tmp_path_factory.mktemp("client-only") / "venv"
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in CLIENT_PACKAGES]
    python = venv / "bin" / "python"
    uv = shutil.which("uv")
    if uv and subprocess.run([uv, "--version"], capture_output=True, timeout=60, check=False).returncode != 0:
        uv = None  # e.g. a pyenv shim with no uv behind it: venv + pip instead
    if uv:
        subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, timeout=300)
        install = [uv, "pip", "install", "--quiet", "--python", str(python), *pins]
    else:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        install = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *pins]
    done = subprocess.run(install, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.util as u, pyspark.util as p; print(p.is_remote_only(), u.find_spec('py4j'))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")},
        check=True,
    )
    assert probe.stdout.split() == ["True", "None"], "a client-only install: no pyspark.core, no py4j"
    return str(python)


def _run_client(python: str, spec: dict[str, Any], tmp_path: Path, name: str) -> dict[str, Any]:
    report = tmp_path / f"{name}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYSPARK_PYTHON")}
    env["PYTHONPATH"] = str(REPO_ROOT)  # the package from this checkout, as the server's workers import it
    done = subprocess.run(
        [python, str(JOB), json.dumps({**spec, "report": str(report)})],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    result: dict[str, Any] = json.loads(report.read_text())
    assert result["remote_only"] is True
    assert result["classic_modules"] == [], "the client imported a classic-only module"
    return result


def test_a_client_only_venv_fails_in_user_code_resumes_and_commits_exactly_once(
    client_only_python: str, spark: Any, connect_server: str, local_target: Target, tmp_path: Path
) -> None:
    target = local_target
    scenario = _scenario(spark, tmp_path, "unique")  # computed on the suite's classic session (the oracle)
    operator = FakeOperator(target)
    spec: dict[str, Any] = {
        "url": connect_server,
        "store_uri": target.store_uri,
        "inputs": scenario.inputs,
        "output": target.output_uri,
        "key": "unique",
        "partitions": len(scenario.inputs),
    }

    epoch1 = operator.begin()
    first = _run_client(
        client_only_python,
        {**spec, "epoch": epoch1, "bad_event": scenario.bad_event, "fail_marker": str(scenario.marker)},
        tmp_path,
        "run1",
    )
    operator.end(epoch1, 1)
    assert "BadRecordError" in first.get("error", ""), first
    sealed = done_keys(operator.store)
    assert 0 < len(sealed) < len(scenario.all_keys), "the tasks before the bad record's task are sealed"

    scenario.marker.unlink()  # the bad record is fixed
    epoch2 = operator.begin()
    second = _run_client(client_only_python, {**spec, "epoch": epoch2}, tmp_path, "run2")
    operator.end(epoch2, 0)
    assert "error" not in second, second
    assert (second["session"], second["engine"]) == ("connect", "arrow")
    assert second["keys"] == len(scenario.all_keys - sealed), "the rerun processed exactly the keys not sealed"
    assert done_keys(operator.store) == scenario.all_keys
    result = operator.store.commit(output_roots=[target.output_uri])
    assert not result.unknown_files
    assert_exactly_once(target, scenario.inputs)
