#!/usr/bin/env bash
# Build kappaplus/jars/kappaplus-jvm.jar (the JVM read path of the Hive streaming source) from
# jvm/src with javac, against the jars of the pyspark wheel installed in .venv. No Maven: the
# only dependencies are Spark's own jars. Rebuilds only when a source is newer than the jar.
# Without javac it says so and exits 0: the Python reader is used instead.
set -euo pipefail
cd "$(dirname "$0")/.."

jar=kappaplus/jars/kappaplus-jvm.jar
if ! command -v javac >/dev/null 2>&1; then
  echo "[setup] javac not found: the Hive source will use its Python reader"
  exit 0
fi
spark_jars=$(.venv/bin/python -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
if [ -f "$jar" ] && [ -z "$(find jvm -newer "$jar" -type f | head -1)" ] \
    && [ "$jar" -nt "$spark_jars" ]; then
  exit 0
fi
echo "[setup] compiling the JVM reader (jvm/src) against $(basename "$(dirname "$spark_jars")") $(.venv/bin/python -c 'import pyspark; print(pyspark.__version__)')"
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
javac -nowarn --release 17 -encoding UTF-8 -cp "$spark_jars/*" -d "$build" \
  $(find jvm/src -name '*.java' | sort) 2>&1 | grep -v '^Note:' || true
cp -r jvm/resources/. "$build/"
if [ ! -f "$build/org/kappaplus/hive/KappaHiveSource.class" ]; then
  echo "[setup] compiling jvm/src failed (above): the Hive source will use its Python reader" >&2
  exit 0
fi
jar cf "$jar.tmp" -C "$build" .
mv "$jar.tmp" "$jar"
echo "[setup] built $jar"
