#!/usr/bin/env bash
# Build the native writer's commit protocol (airflow_ckpt_provider/spark/jvm/airflow-ckpt-spark.jar)
# from its Java source against the installed pyspark's jars. Needs a JDK 17 (javac); the jar is
# committed, so machines with only a JRE use the committed one.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
command -v javac >/dev/null 2>&1 || { echo "build_jar: javac not found; keeping the committed jar" >&2; exit 0; }
JARS=$("$PY" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
SRC=airflow_ckpt_provider/spark/jvm/src
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
javac --release 17 -nowarn -cp "$JARS/*" -d "$OUT" $(find "$SRC" -name '*.java')
# Fixed timestamps so the jar is byte-identical when the source did not change.
find "$OUT" -exec touch -d '2026-01-01T00:00:00Z' {} +
(cd "$OUT" && jar --create --date=2026-01-01T00:00:00Z --file airflow-ckpt-spark.jar $(find . -name '*.class' | sort))
cp "$OUT/airflow-ckpt-spark.jar" airflow_ckpt_provider/spark/jvm/airflow-ckpt-spark.jar
echo "build_jar: airflow_ckpt_provider/spark/jvm/airflow-ckpt-spark.jar"
