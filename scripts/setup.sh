#!/usr/bin/env bash
# Set up everything kappaplus needs on a fresh Debian machine: Java 17 and a virtualenv
# with the project and its dev tools. Safe to run again; does nothing already done.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! command -v java >/dev/null 2>&1; then
  echo "[setup] Java not found: installing openjdk-17-jdk-headless (Java 17 and javac)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jdk-headless procps >/dev/null
elif ! command -v javac >/dev/null 2>&1; then
  # javac builds the Hive source's JVM reader; without it the Python reader is used
  echo "[setup] javac not found: installing openjdk-17-jdk-headless"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
      openjdk-17-jdk-headless >/dev/null; } || echo "[setup] could not install javac: continuing"
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp=.venv/.kappaplus-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "[setup] installing kappaplus and its dependencies into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  touch "$stamp"
fi
bash scripts/build_jvm.sh
# the driver JVM's class archive (local runs start ~5 s sooner); a failure only costs that
if [ "${KAPPA_JVM_ARCHIVE:-}" != "off" ] && ! .venv/bin/kappa jvm-archive --show | grep -q "(built)"; then
  echo "[setup] building the driver JVM's class archive (one training run, about a minute)"
  .venv/bin/kappa jvm-archive >/dev/null || echo "[setup] no class archive: runs start ~5 s slower"
fi
echo "[setup] ready: $(.venv/bin/python --version), $(java -version 2>&1 | head -1)"
