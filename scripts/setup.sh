#!/usr/bin/env bash
# One-time set-up on a fresh machine (Python 3.11 + Java 17): a virtualenv in .venv with
# the package in editable mode and everything the tests, demo and benchmarks need.
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required"' \
  || { echo "setup: Python 3.11 is required (set PYTHON=/path/to/python3.11)" >&2; exit 1; }
command -v java >/dev/null 2>&1 || { echo "setup: Java 17 is required for Spark (java not on PATH)" >&2; exit 1; }

if ! "$PY" -m uv --version >/dev/null 2>&1; then
  "$PY" -m pip install --quiet --disable-pip-version-check uv
fi
[ -x .venv/bin/python ] || "$PY" -m uv venv --quiet --python "$PY" .venv
"$PY" -m uv pip install --quiet --python .venv/bin/python -e ".[test]"

# Headless Chromium + driver for the UI browser test (Debian packages).
if [ "${CKPT_SKIP_BROWSER:-0}" != "1" ] && ! command -v chromedriver >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
      || echo "setup: could not install chromium; browser tests will be skipped" >&2
  else
    echo "setup: chromium-driver not found and apt-get unavailable; browser tests will be skipped" >&2
  fi
fi
echo "setup: ready (.venv)"
