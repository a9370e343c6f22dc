#!/usr/bin/env bash
# Static checks: ruff (style, imports, likely bugs) over the code, the tests and the benchmarks,
# then mypy (strict where pyproject.toml says so). Exits non-zero when either fails; runs both
# either way, so one run shows everything. Needs .venv (scripts/setup.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
echo "== ruff check src tests benchmarks"
.venv/bin/ruff check src tests benchmarks || status=1
echo "== mypy"
.venv/bin/python -m mypy || status=1
exit $status
