#!/usr/bin/env bash
# A Spark Connect server on this machine, for `sparkstate run --remote` and its tests: one
# driver (local mode by default) that clients reach over gRPC at sc://127.0.0.1:PORT, started
# from the installed pyspark (its jars hold spark-connect; the server runs in the foreground
# through bin/spark-submit rather than sbin/'s daemon wrapper, so that its pid is the one kept),
# bound to 127.0.0.1, stopped by its pid.
#
#   scripts/connect.sh start [DIR]    start the server and print its URL (sc://127.0.0.1:15002)
#   scripts/connect.sh stop [DIR]     stop it (SIGTERM, then SIGKILL after 10 s)
#   scripts/connect.sh status [DIR]   whether it runs, and its URL
#
# DIR (default .sparkstate/connect) holds the pid file, the log and the server's scratch space.
# SPARKSTATE_CONNECT_PORT (15002) and SPARKSTATE_CONNECT_MASTER (local[2]) change the layout.
# The server's Python workers (foreachBatch functions, Python data sources, stateful
# processors) run with this venv's interpreter (PYSPARK_PYTHON), and a PYTHONPATH set when
# it starts reaches them too (for classes that clients pickle by reference, by module name).
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${2:-.sparkstate/connect}
PYTHON=${PYTHON:-.venv/bin/python}
PORT=${SPARKSTATE_CONNECT_PORT:-15002}
MASTER=${SPARKSTATE_CONNECT_MASTER:-local[2]}
URL="sc://127.0.0.1:$PORT"

spark_home() { "$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'; }

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

listening() {  # listening PORT: whether something accepts connections on 127.0.0.1:PORT
  "$PYTHON" - "$1" <<'EOF' 2>/dev/null
import socket, sys
with socket.socket() as s:
    s.settimeout(1)
    sys.exit(s.connect_ex(("127.0.0.1", int(sys.argv[1]))))
EOF
}

wait_for() {  # wait_for LOG PID WHAT: the server listens, or its process ends, or 90 s pass
  for _ in $(seq 1 180); do
    listening "$PORT" && return 0
    kill -0 "$2" 2>/dev/null || { echo "connect: $3 exited while starting; see $1" >&2; return 1; }
    sleep 0.5
  done
  echo "connect: $3 did not listen on 127.0.0.1:$PORT within 90 s; see $1" >&2
  return 1
}

start() {
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  if running "$DIR/server.pid"; then
    echo "connect: the server runs already (pid $(cat "$DIR/server.pid"))" >&2
    echo "$URL"
    return 0
  fi
  if listening "$PORT"; then
    echo "connect: 127.0.0.1:$PORT is in use by another process" >&2
    return 1
  fi
  local home worker_path
  home=$(spark_home)
  # Spark's Python processes import pyspark from the installed package, not from Spark's zip
  # (see the sitecustomize.py in sparkstate's worker_path folder, which the local session puts
  # on their PYTHONPATH the same way, before any PYTHONPATH inherited)
  worker_path=$(find "$PWD/src/sparkstate" -type f -path '*/worker_path/sitecustomize.py' -printf '%h\n' | head -n 1)
  if [ -z "$worker_path" ]; then
    echo "connect: no worker_path/sitecustomize.py under src/sparkstate" >&2
    return 1
  fi
  worker_path="$worker_path${PYTHONPATH:+:$PYTHONPATH}"
  export SPARK_HOME="$home" SPARK_LOCAL_IP=127.0.0.1 SPARK_LOG_DIR="$DIR"
  # the server's Python workers run with this venv's interpreter, which has sparkstate
  export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")}"
  mkdir -p "$DIR/tmp"
  : > "$DIR/server.log"
  # the settings of sparkstate's local session (get_spark) that act on the server
  "$home/bin/spark-submit" \
    --class org.apache.spark.sql.connect.service.SparkConnectServer \
    --name "sparkstate Spark Connect server" \
    --master "$MASTER" \
    --driver-memory 4g \
    --conf spark.connect.grpc.binding.address=127.0.0.1 \
    --conf spark.connect.grpc.binding.port="$PORT" \
    --conf spark.driver.host=127.0.0.1 \
    --conf spark.local.dir="$DIR/tmp" \
    --conf spark.ui.enabled=false \
    --conf spark.ui.showConsoleProgress=false \
    --conf spark.sql.shuffle.partitions=2 \
    --conf spark.sql.session.timeZone=UTC \
    --conf spark.sql.streaming.stateStore.providerClass=org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider \
    --conf spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=true \
    --conf spark.sql.execution.arrow.maxRecordsPerBatch=100000 \
    --conf spark.sql.streaming.metricsEnabled=false \
    --conf spark.python.worker.reuse=true \
    --conf spark.python.unix.domain.socket.enabled=true \
    --conf spark.executorEnv.PYTHONPATH="$worker_path" \
    >> "$DIR/server.log" 2>&1 < /dev/null &
  echo $! > "$DIR/server.pid"
  wait_for "$DIR/server.log" "$(cat "$DIR/server.pid")" "the server"
  echo "$URL"
}

stop() {
  local pid="" n=0
  if running "$DIR/server.pid"; then
    pid=$(cat "$DIR/server.pid")
    n=1
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR/server.pid"
  echo "connect: stopped ($n processes)"
}

status() {
  if running "$DIR/server.pid"; then
    echo "server: running (pid $(cat "$DIR/server.pid"))"
    echo "connect: $URL"
  else
    [ -f "$DIR/server.pid" ] && echo "server: not running"
    echo "connect: not running"
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status [DIR]" >&2; exit 2 ;;
esac
