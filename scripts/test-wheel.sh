#!/usr/bin/env bash
# sparkstate as users install it: builds the wheel, installs it (no -e, with its extras, held
# to the proven versions of requirements.txt) into a fresh virtualenv, and from a directory
# outside the checkout runs the CLI, a seed job and a pipeline file on Spark and the report.
# This catches what only the source tree has: a missing package-data file (the workers'
# sitecustomize.py, the dashboard's script), a module left out of the packages, a dependency
# the metadata does not declare.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
PYTHON=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/sparkstate-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "building the wheel..."
"$PYTHON" -m pip wheel -q --disable-pip-version-check --no-deps -w "$work/dist" "$root"
wheel=$(ls "$work"/dist/sparkstate-*.whl)
echo "  $(basename "$wheel")"

echo "installing it into a fresh virtualenv..."
"$PYTHON" -m venv "$work/venv"
# requirements.txt as constraints (which take no extras): the wheel's declared ranges resolve to the proven set
sed -E 's/\[[^]]*\]//' requirements.txt > "$work/constraints.txt"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check -c "$work/constraints.txt" "${wheel}[kafka,postgres,report]"

mkdir "$work/outside"
cd "$work/outside"
cp "$root/examples/pipeline.py" .
sparkstate="$work/venv/bin/sparkstate"
# the installed package, not the checkout's
"$work/venv/bin/python" - "$root" <<'PY'
import sys
from pathlib import Path

import sparkstate

where = Path(sparkstate.__file__).resolve()
assert Path(sys.argv[1]) not in where.parents, f"sparkstate was imported from the checkout: {where}"
print(f"  sparkstate {sparkstate.__version__} from {where.parent}")
PY
"$sparkstate" --version
"$sparkstate" jobs >/dev/null
echo "running a seed job and a pipeline file from $(pwd)..."
# their progress goes to a log, shown when a run fails
quietly() { "$@" > "$work/run.log" 2>&1 || { tail -n 60 "$work/run.log"; exit 1; }; }
quietly "$sparkstate" run running-sum --events 20000 --quiet
quietly "$sparkstate" run pipeline.py --checkpoint pipeline-checkpoint --quiet
"$work/venv/bin/python" - <<'PY'
import pyarrow.parquet as pq

for folder, events in ((".sparkstate/running-sum/output", 20_000), ("out/running-sum", 200_000)):
    rows = pq.read_table(folder).num_rows
    assert rows == events, f"{folder}: {rows} rows, expected one per event ({events})"
    print(f"  {folder}: {rows:,} rows")
PY
quietly "$sparkstate" report running-sum --out report
test -s report/report.html
echo "the wheel installs and runs outside the checkout"
