"""The docs site builds with ``mkdocs build --strict`` (mkdocs.yml), and that build fails on what rots docs.

``--strict`` turns every warning into a failure; mkdocs.yml makes a broken link, a broken anchor and a
page missing from the nav warnings, and scripts/docs_roles.py makes one of every docstring role
(``:class:`X```) that names an object the package does not have. The second test shows each of them
fails the build, on a copy of the repository with one of each put in.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What the site reads: the config, its hook and extension, the pages, the package (docstrings), and
# the repository files the pages link to.
SITE_INPUTS = ("mkdocs.yml", "docs", "scripts", "airflow_ckpt_provider", "bench/results", "dags_examples")


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    built = _build(ROOT, tmp_path / "site")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-6000:]
    site = tmp_path / "site"
    # The API reference is generated, and the docstrings' roles became links to what it renders.
    api = (site / "api" / "spark" / "index.html").read_text()
    assert 'id="airflow_ckpt_provider.spark.CheckpointedJob.skip_completed"' in api
    assert 'href="../errors/#airflow_ckpt_provider.store.errors.InvalidArgumentError"' in api
    # A page links a repository file outside docs/ by its repository path: the site holds a copy.
    assert (site / "bench" / "results" / "resume.png").is_file()


def test_a_broken_link_a_missing_page_or_a_stale_docstring_reference_fails_the_build(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    for name in SITE_INPUTS:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    concepts = copy / "docs" / "concepts.md"
    concepts.write_text(
        concepts.read_text()
        + "\n\nSee [the old page](no-such-page.md), [a section](design.md#no-such-section)"
        + " and [a result](../bench/results/no-such-result.md).\n"
    )
    (copy / "docs" / "orphan.md").write_text("# A page nobody added to the nav\n")
    job = copy / "airflow_ckpt_provider" / "spark" / "job" / "checkpointed_job.py"
    source = job.read_text()
    assert ":class:`EpochConflictError` if another owner's" in source
    job.write_text(
        source.replace(":class:`EpochConflictError` if another owner's", ":class:`EpochTakenError` if another owner's")
    )

    built = _build(copy, tmp_path / "site")
    output = built.stdout + built.stderr
    assert built.returncode != 0, output[-4000:]
    assert "Aborted with" in output and "in strict mode" in output, output[-4000:]
    assert "no-such-page.md" in output, "a link to a page that does not exist"
    assert "no-such-section" in output, "a link to an anchor that does not exist"
    assert "no-such-result.md" in output, "a link to a repository file that does not exist"
    assert "orphan.md" in output, "a page missing from the nav"
    assert "EpochTakenError" in output and "checkpointed_job.py" in output, (
        "a docstring naming a name the package lacks"
    )
