#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite: store, Spark, Airflow, UI, CLI, fault injection.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k contract`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test

# Debian packages of the integration tests, installed once on a fresh machine (as root, with apt-get):
# * headless Chromium + driver for the UI browser tests; CKPT_SKIP_BROWSER=1 skips them (those tests are
#   then skipped);
# * PostgreSQL and Redis for the distributed deployment test (tests/dags_examples/test_deployment.py: the
#   metadata DB and the Celery broker; the test starts its own servers on free ports and data directories,
#   never a system service); CKPT_SKIP_DEPLOYMENT=1 skips the install and that test (without it a missing
#   server fails the test, so CI cannot skip it unseen).
packages=()
if [ "${CKPT_SKIP_BROWSER:-0}" != "1" ] && ! command -v chromedriver >/dev/null 2>&1; then
  packages+=(chromium chromium-driver)
fi
if [ "${CKPT_SKIP_DEPLOYMENT:-0}" != "1" ]; then
  command -v redis-server >/dev/null 2>&1 || packages+=(redis-server)
  ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || packages+=(postgresql)
fi
if [ "${#packages[@]}" -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null) \
      || echo "test.sh: could not install ${packages[*]}; the tests needing them will fail or be skipped" >&2
  else
    echo "test.sh: ${packages[*]} not installed and apt-get unavailable; the tests needing them will fail or be skipped" >&2
  fi
fi

export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
export PATH="$PWD/.venv/bin:$PATH"
# Every JVM of the suite (spark-submit drivers, local sessions, the standalone cluster) is short-lived
# and handles tiny data: the C1 JIT alone and the serial GC cut their CPU by about 30 % (one
# spark-submit test: 25 s of CPU instead of 35-39 s), and a class-data-sharing archive of Spark's
# classes (ckpt_testkit/jvm_archive.py, dumped once per venv: about 45 s of CPU) another 3-4 s of
# each JVM's start. Tests only; deployments keep Spark's defaults. A JAVA_TOOL_OPTIONS of your own
# is used as it is.
if [ -z "${JAVA_TOOL_OPTIONS:-}" ]; then
  jvm_flags="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
  JAVA_TOOL_OPTIONS="$jvm_flags $(.venv/bin/python -m ckpt_testkit.jvm_archive "$jvm_flags")"
fi
export JAVA_TOOL_OPTIONS
mkdir -p test-output
set +e
# Integration tests drive Spark, SeaweedFS, Airflow and Chromium on a 2-core machine: a failed
# test is run once more and reported as rerun (a deterministic failure still fails the suite).
# Two pytest workers (pytest-xdist), a test file per worker at a time (--dist loadfile: a module's
# fixtures, such as a DAG run, an api-server or a Spark cluster, start once): most of a DAG test is
# waiting on a subprocess, a retry delay or a poll, which the other worker fills.
# The longest files start first (tests/conftest.py LONGEST_FILES, kept in collection order by
# --no-loadscope-reorder): otherwise xdist starts the files with most tests first and a long cluster
# file ran last, alone.
# CKPT_TEST_WORKERS=0 runs everything in one process.
workers="${CKPT_TEST_WORKERS:-2}"
parallel=()
if [ "$workers" != "0" ]; then
  parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
fi
# A test that timed out is not rerun: a hang would cost its timeout twice.
.venv/bin/python -m pytest -p no:cacheprovider -ra --durations=25 --reruns 1 --reruns-delay 2 --rerun-except "from pytest-timeout" "${parallel[@]}" "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no tests" >&2
fi
exit "$status"
