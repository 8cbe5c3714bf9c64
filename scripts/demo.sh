#!/usr/bin/env bash
# Set up (idempotent; only what the demo runs: Airflow, the Spark provider, PySpark), then run
# example DAG 1 end to end on the embedded default (local store, Spark local[*], Airflow on
# SQLite): a try that fails on a bad record, the record corrected in an Airflow Variable,
# Airflow's retry that skips the finished part, the commit, and a printed summary.
# Extra arguments go to scripts/demo.py (e.g. --events 500000 --fail-partition 6).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
export PATH="$PWD/.venv/bin:$PATH"
exec .venv/bin/python scripts/demo.py "$@"
