#!/usr/bin/env bash
# Installs sparkstate (scripts/setup.sh), then runs the UPI per-merchant job: 3,000,000 generated
# payments over 100,000 merchants, a running count and total per merchant, checkpointed in
# RocksDB. Prints a line per micro-batch, a summary, and the top merchants. Run it again and it
# resumes from its checkpoint (here: it has already finished); add --fresh to start over.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/sparkstate run running-sum --events 3000000 --merchants 100000 "$@"
