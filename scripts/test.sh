#!/usr/bin/env bash
# Installs sparkstate (scripts/setup.sh), then runs the whole test suite: unit tests on the
# in-process harness, then integration tests on a local Spark (RocksDB, real checkpoints), a
# local PostgreSQL server for the database sinks and a local Kafka-protocol broker (noida-db,
# started by the tests through scripts/kafka.sh) for the Kafka source and sink, and Debian's
# Chromium (headless) for the dashboard's page.
# Then the Spark Connect suite (tests/connect): the same kinds of jobs as clients of a Connect
# server it starts (scripts/connect.sh), in a pytest process of its own, as a process that has
# had a Connect session cannot start a Classic one.
# Extra arguments go to both pytest runs, e.g. `scripts/test.sh -m "not spark"` for the fast part only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# the database sink tests run a real PostgreSQL server, and the dashboard's test a headless
# Chromium (both installed here when missing)
bash scripts/postgres.sh install
bash scripts/chromium.sh install
status=0
if [ "$#" -eq 0 ]; then
  # the Spark tests in one process (one SparkSession, the servers once), then the rest, which
  # need no Spark, on both cores (pytest-xdist)
  .venv/bin/python -m pytest tests -q --durations=15 -m spark || status=$?
  .venv/bin/python -m pytest tests -q --durations=5 -m "not spark" -n 2 || status=$?
else
  .venv/bin/python -m pytest tests -q --durations=15 "$@" || status=$?
fi
# exit code 5: the arguments selected no Connect test (-m "not spark")
.venv/bin/python -m pytest tests/connect -q --durations=10 "$@" || { rc=$?; [ "$rc" -eq 5 ] || status=$rc; }
exit "$status"
