#!/usr/bin/env bash
# One-time set-up on a fresh machine (Python 3.11 + Java 17): a virtualenv in .venv with
# the package in editable mode. `bash scripts/setup.sh` installs everything the tests and
# benchmarks need (the `test` extra); `bash scripts/setup.sh demo` only what the demo runs
# (Airflow, the Spark provider, PySpark); `bash scripts/setup.sh docs` only what the docs site
# needs (scripts/docs.sh). The browser of the UI tests is installed by scripts/test.sh.
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-test}" in
  demo) EXTRAS="airflow,spark" ;;
  test) EXTRAS="test" ;;
  docs) EXTRAS="docs" ;;
  *) echo "usage: bash scripts/setup.sh [test|demo|docs]" >&2; exit 2 ;;
esac

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required"' \
  || { echo "setup: Python 3.11 is required (set PYTHON=/path/to/python3.11)" >&2; exit 1; }
command -v java >/dev/null 2>&1 || { echo "setup: Java 17 is required for Spark (java not on PATH)" >&2; exit 1; }

if ! "$PY" -m uv --version >/dev/null 2>&1; then
  "$PY" -m pip install --quiet --disable-pip-version-check uv
fi
[ -x .venv/bin/python ] || "$PY" -m uv venv --quiet --python "$PY" .venv
"$PY" -m uv pip install --quiet --python .venv/bin/python -e ".[$EXTRAS]"
echo "setup: ready (.venv, extras: $EXTRAS)"
