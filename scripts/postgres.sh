#!/usr/bin/env bash
# A throwaway local PostgreSQL server, for the tests and for trying the PostgreSQL sink.
#
#   scripts/postgres.sh install     install PostgreSQL (Debian's package) when initdb/pg_ctl are missing
#   scripts/postgres.sh start DIR   create a cluster in DIR (once), start it on a free port of
#                                   127.0.0.1 (its unix socket in DIR too) and print its URL
#   scripts/postgres.sh stop DIR    stop the server of DIR (DIR itself is left for the caller)
#
# The server trusts local connections (user postgres, no password): it is for tests only.
# PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user, which
# then owns DIR; DIR's parent folders must let that user through (a folder under /tmp does).
set -euo pipefail

pg_bin() {
  # Debian keeps the server binaries out of PATH, one folder per major version
  if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
    dirname "$(command -v pg_ctl)"
    return
  fi
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$dir" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/initdb" ]; then
    echo "$dir"
  fi
}

install() {
  [ -n "$(pg_bin)" ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing PostgreSQL (Debian package postgresql)..." >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  if [ -z "$(pg_bin)" ]; then
    echo "PostgreSQL's initdb and pg_ctl are missing: install the postgresql package (as root: apt-get install postgresql)" >&2
    exit 1
  fi
}

# run a command as the server's user: root may not run PostgreSQL
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  local dir=${1:?usage: postgres.sh start DIR}
  install
  local bin
  bin=$(pg_bin)
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ "$(id -u)" = 0 ]; then
    getent passwd postgres >/dev/null || useradd --system --no-create-home --shell /usr/sbin/nologin postgres
    chown postgres "$dir"
    if ! runuser -u postgres -- test -w "$dir"; then
      echo "the postgres user cannot write to $dir: choose a folder whose parents it can enter (e.g. under /tmp)" >&2
      exit 1
    fi
  fi
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 || {
      cat "$dir/initdb.log" >&2
      exit 1
    }
  fi
  local port
  port=$(cat "$dir/port" 2>/dev/null || free_port)
  echo "$port" >"$dir/port"
  if as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    echo "postgresql://postgres@127.0.0.1:$port/postgres"  # already running
    return
  fi
  if ! as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1" start >/dev/null; then
    echo "PostgreSQL did not start; its log ($dir/server.log) ends with:" >&2
    tail -n 20 "$dir/server.log" >&2 || true
    exit 1
  fi
  echo "postgresql://postgres@127.0.0.1:$port/postgres"
}

stop() {
  local dir=${1:?usage: postgres.sh stop DIR}
  local bin
  bin=$(pg_bin)
  [ -n "$bin" ] && [ -f "$dir/data/postmaster.pid" ] || return 0
  as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
}

case "${1:-}" in
  install) install ;;
  start) start "${2:-}" ;;
  stop) stop "${2:-}" ;;
  *) echo "usage: $0 install | start DIR | stop DIR" >&2; exit 2 ;;
esac
