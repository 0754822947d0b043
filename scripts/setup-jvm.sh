#!/usr/bin/env bash
# Resolves headrace's JVM pieces (jvm/pom.xml) from Maven Central into jvm/lib/ once.
# A second run is a no-op unless a pom or the Java sources changed (the Makefile's stamp).
# Exit status 3: Maven or Maven Central is unavailable (callers may fall back).
set -euo pipefail
cd "$(dirname "$0")/../jvm"
if ! command -v mvn >/dev/null 2>&1; then
    echo "warning: 'mvn' is not on PATH: the JVM pieces (Java client tests, Spark's Kafka connector, Apache Kafka) are unavailable" >&2
    exit 3
fi
# The real-time operators compile against PySpark's own jars (the venv's, when it has one).
pyspark_jars=()
if [ -x ../.venv/bin/python ]; then
    jars_dir=$(../.venv/bin/python -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))' 2>/dev/null || true)
    if [ -n "$jars_dir" ] && [ -d "$jars_dir" ]; then pyspark_jars=("-Dpyspark.jars=$jars_dir"); fi
fi
echo "resolving the JVM pieces from Maven Central into jvm/lib (once) ..."
rm -rf lib
if ! mvn -q -B package "${pyspark_jars[@]}" > .mvn-build.log 2>&1; then
    tail -40 .mvn-build.log >&2
    echo "warning: building jvm/ failed (no Maven Central?); see jvm/.mvn-build.log" >&2
    exit 3
fi
rm -f .mvn-build.log
