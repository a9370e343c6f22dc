#!/usr/bin/env bash
# A separate virtualenv with PyFlink for the benchmarks' Flink rows.
#
#   bash benchmarks/flink/setup.sh        # creates benchmarks/flink/.venv (about 850 MB)
#
# PyFlink 2.3 pins pandas < 2.3 and pyarrow < 21, which sparkstate's pinned versions exceed,
# so it cannot share the project's environment; the benchmarks run it as a child process
# when this directory has it, and leave its rows out otherwise.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then
    python3.11 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet -r "$here/requirements.txt"
"$venv/bin/python" -c "import pyflink, sys; print('pyflink', pyflink.__file__, sys.version.split()[0])"
