#!/usr/bin/env bash
# The README's Kafka demo in one go: a throwaway local broker (noida-db, a Kafka-protocol broker;
# not Apache Kafka), `sparkstate produce` of UPI payments into a topic, `sparkstate run running-sum`
# from it into another topic in Kafka transactions, then the top merchants as a read_committed
# consumer sees them. Everything lives in a temporary folder, removed at the end with the broker.
#
#   scripts/kafka-demo.sh [EVENTS]     (default 200000; run scripts/setup.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
events=${1:-200000}
work=$(mktemp -d /tmp/sparkstate-kafka-demo.XXXXXX)
trap 'bash "$repo/scripts/kafka.sh" stop "$work/kafka" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

KAFKA=$(bash scripts/kafka.sh start "$work/kafka")
export KAFKA
echo "broker (noida-db) at $KAFKA"
cd "$work"
"$repo/.venv/bin/sparkstate" produce "kafka://$KAFKA/payments" --events "$events" --merchants 1000 --partitions 2 --create
# the topic has no end: stop once every payment is read (the progress line's running total)
"$repo/.venv/bin/python" - "$repo/.venv/bin/sparkstate" "$events" <<'EOF'
import os, re, signal, subprocess, sys

cmd = [sys.argv[1], "run", "running-sum", "--source", f"kafka://{os.environ['KAFKA']}/payments",
       "--sink", f"kafka://{os.environ['KAFKA']}/merchant-totals?key=merchant_id&create=true&partitions=2"]
run = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
for line in run.stdout:
    print(line, end="", flush=True)
    read = re.search(r"ev in [^|]*\| ([\d,]+) \|", line)
    if read and int(read.group(1).replace(",", "")) >= int(sys.argv[2]):
        os.killpg(run.pid, signal.SIGINT)  # Ctrl-C: the run stops after its batch, and says so
sys.exit(run.wait())
EOF
echo "top merchants in topic merchant-totals, read with isolation.level=read_committed:"
"$repo/.venv/bin/python" - <<'EOF'
import json, os

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

consumer = Consumer({"bootstrap.servers": os.environ["KAFKA"], "group.id": "demo", "enable.auto.commit": False,
                     "isolation.level": "read_committed"})
topic = "merchant-totals"
partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
latest, rows = {}, 0
while records := consumer.consume(10_000, timeout=3.0):
    for r in records:
        if r.error() is None:
            row = json.loads(r.value())
            latest[row["merchant_id"]] = row
            rows += 1
consumer.close()
print(f"{rows:,} rows, {len(latest):,} merchants; the latest row of the top 5 by total:")
for row in sorted(latest.values(), key=lambda r: -r["total"])[:5]:
    print(" ", row)
EOF
