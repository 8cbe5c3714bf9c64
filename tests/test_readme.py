"""README.md and the pages of docs/ stay true: what they name exists in the code, and what users must know is in them.

The README is short (it sends readers to the docs site), so each check reads the README and every
page of ``docs/`` together (``DOCS``): a section may move from one to another and stay checked.
Checked:

* the README is at most 250 lines and starts with the two commands (demo, tests);

* every ``spark.ckpt.*`` conf named is one the job reads (``contract.ALL_CONFS``), and every
  one of those is named; the confs listed as "set by the operator" are exactly the ones it sets;
* every ``ckpt.*`` metric named is one the operators emit (``operators/metrics.py``), and every
  emitted metric is named;
* every ``airflow-ckpt ...`` command line in a code block parses with the real CLI parser, and
  every `` `airflow-ckpt NAME` `` in the text is a subcommand;
* every example command (``bash scripts/...``, ``.venv/bin/python ...``) names a file that exists,
  and every ``--flag`` it passes is in that program's ``--help``;
* every relative link exists (from the page's own folder), and every backticked repository path
  (from the repository root, or the end of one, as the pages write ``hooks/locator.py``);
* every ``from airflow_ckpt_provider... import ...`` in a Python block imports, without a
  deprecation warning (the pages show current paths);
* the table of ``[ckpt]`` options in ``docs/configuration.md`` is the one rendered from
  ``provider_info.CONFIG_OPTIONS`` (where Airflow and ``hooks/config.py`` take them from too).

To keep it green when you edit the docs: name metrics and confs in backticks exactly as the
code spells them; write CLI examples as ``airflow-ckpt SUBCOMMAND ...`` lines in a code block
(several on one line separated by `` | ``); a new conf or metric goes into ``contract.py`` /
``operators/metrics.py`` and a page together. That the site builds (links, anchors, the nav, the
docstrings' cross-references) is tests/test_docs.py.
"""

from __future__ import annotations

import ast
import importlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from airflow_ckpt_provider import contract
from airflow_ckpt_provider.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
README_PATH = ROOT / "README.md"
README = README_PATH.read_text()
#: The README and every page of the docs site, each by its path. docs/plans/ records what was proposed
#: before it was built, not what the code is now (the site build still checks its links).
PAGES = {
    path: path.read_text()
    for path in [README_PATH, *sorted((ROOT / "docs").rglob("*.md"))]
    if "plans" not in path.relative_to(ROOT).parts
}
DOCS = "\n\n".join(PAGES.values())
CONFIG_PAGE = ROOT / "docs" / "configuration.md"

CONF_RE = re.compile(r"spark\.ckpt\.[a-z_]+(?:\.[a-z_]+)*")
METRIC_RE = re.compile(r"(?<![\w.])ckpt\.[a-z_]+(?:\.[a-z_]+)*")
FENCE_RE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _code_blocks(language: str | None = None, text: str = DOCS) -> list[str]:
    return [body for lang, body in FENCE_RE.findall(text) if language is None or lang == language]


def _prose() -> str:
    return FENCE_RE.sub("", DOCS)


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    lines = README.splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move detail to a page of docs/"
    first_block = _code_blocks(text=README)[0]
    commands = [line.split("#", 1)[0].strip() for line in first_block.splitlines()]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"], first_block
    assert README.index("```") < README.index("\n## "), "the two commands come before the first section"
    assert "\n## Compatibility\n" in README


def _emitted_metrics() -> dict[str, str]:
    """Metric constants of operators/metrics.py (parsed, not imported): name -> metric."""
    tree = ast.parse((ROOT / "airflow_ckpt_provider/operators/metrics.py").read_text())
    found = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and node.value.value.startswith("ckpt.")
        ):
            found[node.targets[0].id] = node.value.value  # type: ignore[attr-defined]
    return found


def test_confs_named_are_the_confs_the_job_reads() -> None:
    named = set(CONF_RE.findall(DOCS))
    assert named - set(contract.ALL_CONFS) == set(), "the docs name confs no code reads"
    assert set(contract.ALL_CONFS) - named == set(), "confs the job reads are missing from the docs"


def test_confs_said_to_be_set_by_the_operator_are_the_ones_it_sets() -> None:
    sentence = re.search(r"set by the operator:(.*?)(?:yours to set|\n\n)", DOCS, re.DOTALL)
    assert sentence, "the docs should say which spark.ckpt.* confs the operator sets ('set by the operator: ...')"
    assert set(CONF_RE.findall(sentence.group(1))) == set(contract.OPERATOR_CONFS)


def test_metrics_named_are_the_metrics_emitted() -> None:
    emitted = _emitted_metrics()
    assert len(emitted) >= 10, emitted
    package = ROOT / "airflow_ckpt_provider"
    sources = "\n".join(p.read_text() for p in package.rglob("*.py") if p.name != "metrics.py")
    never_sent = [name for name in emitted if not re.search(rf"metrics\.{name}\b", sources)]
    assert never_sent == [], "metric constants no operator emits"
    named = set(METRIC_RE.findall(DOCS))
    assert named - set(emitted.values()) == set(), "the docs name metrics the code does not emit"
    assert set(emitted.values()) - named == set(), "emitted metrics missing from the docs"


def _cli_lines() -> list[str]:
    commands = []
    for block in _code_blocks():
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            if not line.startswith("airflow-ckpt "):
                continue
            for segment in line.split(" | "):
                segment = segment.strip()
                commands.append(segment if segment.startswith("airflow-ckpt ") else f"airflow-ckpt {segment}")
    return commands


def test_cli_examples_parse_with_the_real_parser() -> None:
    commands = _cli_lines()
    assert len(commands) >= 8, commands
    parser = build_parser()
    for command in commands:
        try:
            parser.parse_args(shlex.split(command)[1:])
        except SystemExit:
            pytest.fail(f"docs command does not parse: {command}")


def test_cli_examples_run_against_a_real_store(tmp_path: Path) -> None:
    """Each example, with its placeholders filled in (``URI``: a local store holding three
    checkpoints, ``ID``: one of them, any ``s3://`` URI: a local directory), does what it says:
    exit 0 or 1, never "bad input" (2) as an example with its arguments in the wrong order would."""
    from airflow_ckpt_provider.cli.main import main
    from tests.cli.sample_store import fill_store

    store_uri = (tmp_path / "store").as_uri()
    checkpoint_id = fill_store(store_uri, (tmp_path / "out").as_uri()).inspection.list_checkpoints()[0].checkpoint_id
    ran = 0
    for command in _cli_lines():
        argv = shlex.split(command)[1:]
        if "--dag-id" in argv:  # resolving a task instance needs an Airflow deployment: tests/cli covers it
            continue
        argv = [store_uri if a == "URI" else checkpoint_id if a == "ID" else a for a in argv]
        argv = [(tmp_path / "out").as_uri() if a.startswith("s3://lake") else a for a in argv]
        argv = [store_uri if a.startswith("s3://") else a for a in argv]
        out, err = io.StringIO(), io.StringIO()
        code = main(argv, out=out, err=err, stdin=io.StringIO(""))
        assert code in (0, 1), f"docs example {command!r} exited {code}: {err.getvalue()}"
        ran += 1
    assert ran >= 8


def test_subcommands_named_in_the_text_exist() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    names = set(subparsers.choices)  # type: ignore[arg-type]
    mentioned = set(re.findall(r"`airflow-ckpt ([a-z][a-z-]*)", _prose()))
    assert mentioned - names == set()
    assert {shlex.split(c)[1] for c in _cli_lines()} == names, "the docs show every subcommand in a code block"


def _example_commands() -> list[list[str]]:
    commands = []
    for block in _code_blocks("bash"):
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.split("  #", 1)[0].strip()
            if line.startswith(("bash ", ".venv/bin/python ")):
                commands.append(shlex.split(line))
    return commands


def test_example_commands_exist_and_take_the_flags_shown() -> None:
    commands = _example_commands()
    assert any(c[:2] == ["bash", "scripts/test.sh"] for c in commands), commands
    for argv in commands:
        if argv[0] == "bash":
            assert (ROOT / argv[1]).is_file(), argv
            continue
        if argv[1] == "-m":
            program = [sys.executable, "-m", argv[2]]
            assert (ROOT / (argv[2].replace(".", "/") + ".py")).is_file(), argv
            flags = argv[3:]
        else:
            program = [sys.executable, argv[1]]
            assert (ROOT / argv[1]).is_file(), argv
            flags = argv[2:]
        shown = [f for f in flags if f.startswith("--")]
        if not shown:
            continue
        proc = subprocess.run([*program, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        missing = [f for f in shown if f not in proc.stdout]
        assert missing == [], f"{' '.join(argv)}: not in --help: {missing}"


REPOSITORY_FILES = [
    p.relative_to(ROOT).as_posix()
    for top in ("airflow_ckpt_provider", "ckpt_testkit", "tests", "bench", "dags_examples", "scripts", "docs")
    for p in (ROOT / top).rglob("*")
    if p.is_file()
]


def test_relative_links_and_paths_exist() -> None:
    """A backticked path is the repository's (``scripts/demo.sh``) or the end of one, as the pages
    name a module inside its package (``hooks/locator.py``, ``backend/classic.py``)."""
    missing, checked = set(), 0
    for page, text in PAGES.items():
        prose = FENCE_RE.sub("", text)
        links = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", prose)
        paths = re.findall(r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|md|sh|txt|png|jar|java|toml|json|yml))`", prose)
        for link in (t for t in links if "://" not in t and "{" not in t):
            checked += 1
            if not (page.parent / link).exists():
                missing.add(f"{page.relative_to(ROOT)}: link {link}")
        for path in (t for t in paths if "{" not in t and not t.startswith("x/")):
            checked += 1
            if not (ROOT / path).exists() and not any(f.endswith(f"/{path}") for f in REPOSITORY_FILES):
                missing.add(f"{page.relative_to(ROOT)}: path {path}")
    assert checked > 100, "few links found: the extraction broke"
    assert sorted(missing) == []


IMPORT_RE = re.compile(r"^from (airflow_ckpt_provider[\w.]*) import \(?([^)]*?)\)?$", re.MULTILINE | re.DOTALL)


def _imports(block: str) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of each ``from airflow_ckpt_provider... import`` of a Python block. A block that
    is not Python (a signature listing such as docs/store-api.md's) still has its import lines read."""
    try:
        tree = ast.parse(block)
    except SyntaxError:
        return [
            (module, re.findall(r"\b([A-Za-z_]\w*)\b(?=\s*(?:,|$))", names.replace("\n", " ")))
            for module, names in IMPORT_RE.findall(block)
        ]
    return [
        (str(node.module), [a.name for a in node.names])
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("airflow_ckpt_provider")
    ]


def test_python_examples_import_from_current_paths() -> None:
    imports = [found for block in _code_blocks("python") for found in _imports(block)]
    assert imports, "no imports found in the docs' Python blocks"
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for module, names in imports:
            loaded = importlib.import_module(str(module))
            for name in names:
                assert hasattr(loaded, name), f"{module} has no {name}"


def test_the_config_table_is_rendered_from_the_one_definition_of_the_options(tmp_path: Path) -> None:
    from airflow_ckpt_provider.hooks.config import CheckpointConfig
    from airflow_ckpt_provider.provider_info import CONFIG_OPTIONS, config_table_markdown, get_provider_info

    rendered = config_table_markdown()
    assert rendered in CONFIG_PAGE.read_text(), (
        "docs/configuration.md's [ckpt] table differs from provider_info.CONFIG_OPTIONS; paste the output of: "
        ".venv/bin/python -c 'from airflow_ckpt_provider.provider_info import config_table_markdown as t; print(t())'"
    )
    declared = get_provider_info()["config"]["ckpt"]["options"]
    assert list(declared) == [option.name for option in CONFIG_OPTIONS]
    # Every typed field of the hook's config is an option, and a deployment that sets none gets the declared default.
    assert set(CheckpointConfig.__dataclass_fields__) == set(declared)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env["AIRFLOW_HOME"] = str(tmp_path)
    show = (
        "import dataclasses, json; from airflow_ckpt_provider.hooks.config import CheckpointConfig as C; "
        "print(json.dumps({k: str(getattr(v, 'value', v)) for k, v in dataclasses.asdict(C.load()).items()}))"
    )
    done = subprocess.run([sys.executable, "-c", show], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    parse = {"integer": int, "float": float, "boolean": lambda v: v == "True", "string": str}
    for option in CONFIG_OPTIONS:
        value = parse[option.type](option.default)
        expected = {"aws_conn_id": value or None, "trusted_output_roots": ()}.get(option.name, value)
        assert loaded[option.name] == str(expected), option.name
