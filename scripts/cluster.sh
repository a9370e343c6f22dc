#!/usr/bin/env bash
# A Spark standalone cluster on this machine, for trying sparkstate on a cluster and for its
# cluster tests: a master and two workers (one core each, their own work directories), started
# from the installed pyspark (the pip package has Spark's jars and bin/spark-class but no sbin/
# scripts), bound to 127.0.0.1, stopped by their pids.
#
#   scripts/cluster.sh start [DIR]    start the master (spark://127.0.0.1:7077, UI :8080) and the workers
#   scripts/cluster.sh stop [DIR]     stop them (SIGTERM, then SIGKILL after 10 s)
#   scripts/cluster.sh status [DIR]   what runs, and the master's URL
#
# DIR (default .sparkstate/cluster) holds the pid files, logs and the workers' directories.
# SPARKSTATE_MASTER_PORT, SPARKSTATE_MASTER_UI_PORT, SPARKSTATE_WORKERS (2),
# SPARKSTATE_WORKER_CORES (1) and SPARKSTATE_WORKER_MEMORY (3g) change the layout.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${2:-.sparkstate/cluster}
PYTHON=${PYTHON:-.venv/bin/python}
PORT=${SPARKSTATE_MASTER_PORT:-7077}
UI_PORT=${SPARKSTATE_MASTER_UI_PORT:-8080}
WORKERS=${SPARKSTATE_WORKERS:-2}
CORES=${SPARKSTATE_WORKER_CORES:-1}
MEMORY=${SPARKSTATE_WORKER_MEMORY:-3g}
MASTER="spark://127.0.0.1:$PORT"

spark_home() { "$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'; }

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_for() {  # wait_for LOG PATTERN WHAT
  for _ in $(seq 1 120); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.5
  done
  echo "cluster: $3 did not start within 60 s; see $1" >&2
  return 1
}

start() {
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  local home
  home=$(spark_home)
  export SPARK_HOME="$home" SPARK_LOCAL_IP=127.0.0.1 SPARK_LOG_DIR="$DIR" SPARK_NO_DAEMONIZE=1
  # executors run Python with the driver's interpreter (PYSPARK_PYTHON), which here is this venv's
  export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")}"
  if running "$DIR/master.pid"; then
    echo "cluster: the master runs already (pid $(cat "$DIR/master.pid"))" >&2
  else
    : > "$DIR/master.log"
    "$home/bin/spark-class" org.apache.spark.deploy.master.Master \
      --host 127.0.0.1 --port "$PORT" --webui-port "$UI_PORT" >> "$DIR/master.log" 2>&1 &
    echo $! > "$DIR/master.pid"
    wait_for "$DIR/master.log" "I have been elected leader" "the master"
  fi
  for i in $(seq 1 "$WORKERS"); do
    if running "$DIR/worker-$i.pid"; then
      continue
    fi
    mkdir -p "$DIR/worker-$i"
    : > "$DIR/worker-$i.log"
    "$home/bin/spark-class" org.apache.spark.deploy.worker.Worker \
      --host 127.0.0.1 --cores "$CORES" --memory "$MEMORY" --work-dir "$DIR/worker-$i" --webui-port 0 \
      "$MASTER" >> "$DIR/worker-$i.log" 2>&1 &
    echo $! > "$DIR/worker-$i.pid"
  done
  for i in $(seq 1 "$WORKERS"); do
    wait_for "$DIR/worker-$i.log" "Successfully registered with master" "worker $i"
  done
  echo "$MASTER"
}

stop() {
  local pids=()
  for f in "$DIR"/worker-*.pid "$DIR"/master.pid; do
    [ -f "$f" ] || continue
    running "$f" && pids+=("$(cat "$f")") && kill "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
  for _ in $(seq 1 20); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.5
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  echo "cluster: stopped (${#pids[@]} processes)"
}

status() {
  local up=0
  for f in "$DIR"/master.pid "$DIR"/worker-*.pid; do
    [ -f "$f" ] || continue
    if running "$f"; then
      echo "$(basename "$f" .pid): running (pid $(cat "$f"))"
      up=1
    else
      echo "$(basename "$f" .pid): not running"
    fi
  done
  [ "$up" = 1 ] && echo "master: $MASTER (UI http://127.0.0.1:$UI_PORT)" || echo "cluster: not running"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status [DIR]" >&2; exit 2 ;;
esac
