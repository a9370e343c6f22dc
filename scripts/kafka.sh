#!/usr/bin/env bash
# A throwaway local Kafka-protocol broker, for the tests and for trying the Kafka source and sink.
#
#   scripts/kafka.sh start DIR   start a broker with its data in DIR on a free port of 127.0.0.1
#                                (the same port again when DIR held one) and print host:port
#   scripts/kafka.sh stop DIR    stop the broker of DIR (DIR itself is left for the caller)
#   scripts/kafka.sh status DIR  print host:port when the broker of DIR runs, else exit 1
#
# The broker is noida-db (pinned in requirements-dev.txt, installed by scripts/setup.sh): an
# independent Rust implementation of the Kafka protocol, not Apache Kafka. It keeps records for
# 7 days by their timestamps, so data written for a test carries the current time.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}

binary() {
  # the console script is a wrapper: run the binary itself, so that its pid is the broker's
  "$PY" -c 'import os, noida_db; print(os.path.join(os.path.dirname(noida_db.__file__), "noida-db"))'
}

free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

running() {
  local dir=$1
  [ -f "$dir/broker.pid" ] && kill -0 "$(cat "$dir/broker.pid")" 2>/dev/null
}

start() {
  local dir=${1:?usage: kafka.sh start DIR}
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  local port
  port=$(cat "$dir/port" 2>/dev/null || free_port)
  echo "$port" >"$dir/port"
  if running "$dir"; then
    echo "127.0.0.1:$port"
    return
  fi
  local bin
  bin=$(binary)
  [ -x "$bin" ] || { echo "the broker's binary is missing ($bin): run scripts/setup.sh" >&2; exit 1; }
  # setsid: the broker outlives this script and is not stopped by the caller's Ctrl-C
  setsid "$bin" start --data-dir "$dir/data" --host 127.0.0.1 --only kafka --kafka-port "$port" \
    >"$dir/broker.log" 2>&1 </dev/null &
  echo $! >"$dir/broker.pid"
  for _ in $(seq 1 100); do
    if "$PY" -c "import socket,sys; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null; then
      echo "127.0.0.1:$port"
      return
    fi
    running "$dir" || break
    sleep 0.1
  done
  echo "the Kafka broker did not start; its log ($dir/broker.log) ends with:" >&2
  tail -n 20 "$dir/broker.log" >&2 || true
  exit 1
}

stop() {
  local dir=${1:?usage: kafka.sh stop DIR}
  running "$dir" || return 0
  local pid
  pid=$(cat "$dir/broker.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$dir/broker.pid"; return 0; }
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$dir/broker.pid"
}

status() {
  local dir=${1:?usage: kafka.sh status DIR}
  running "$dir" && echo "127.0.0.1:$(cat "$dir/port")"
}

case "${1:-}" in
  start) start "${2:-}" ;;
  stop) stop "${2:-}" ;;
  status) status "${2:-}" ;;
  *) echo "usage: $0 start DIR | stop DIR | status DIR" >&2; exit 2 ;;
esac
