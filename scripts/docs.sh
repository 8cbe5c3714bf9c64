#!/usr/bin/env bash
# Build the documentation site (mkdocs.yml, pages in docs/, the API reference from the docstrings)
# into site/ with --strict, as tests/test_docs.py does; `bash scripts/docs.sh serve` serves it with
# live reload at http://127.0.0.1:8000. Set-up (idempotent) installs the `docs` extra into .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh docs
# Material for MkDocs prints a banner about MkDocs 2.0 on every run; the build does not use it.
export NO_MKDOCS_2_WARNING=1
case "${1:-build}" in
  build) exec .venv/bin/mkdocs build --strict ;;
  serve) exec .venv/bin/mkdocs serve --strict ;;
  *) echo "usage: bash scripts/docs.sh [build|serve]" >&2; exit 2 ;;
esac
