#!/usr/bin/env bash
# Installs everything sparkstate needs into ./.venv: Java 17 (from Debian, when missing and
# running as root) and the pinned Python packages. Safe to run again; it only adds what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v java >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Java 17 (openjdk-17-jre-headless)..."
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "sparkstate needs Java 17 (Spark runs on it): install openjdk-17-jre-headless and run again" >&2
    exit 1
  fi
fi

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11))'; then
  echo "sparkstate needs Python 3.11 or newer ($PYTHON is $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
# Spark starts a dozen Python workers per run, and each compiles the sparkstate modules it
# imports unless their bytecode is cached (an editable install caches none, and
# PYTHONDONTWRITEBYTECODE keeps Python from doing it): about 0.4 s of CPU per worker.
.venv/bin/python -m compileall -q src >/dev/null
