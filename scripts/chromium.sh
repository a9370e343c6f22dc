#!/usr/bin/env bash
# Headless Chromium for the dashboard's browser test (tests/integration/test_dashboard_browser.py).
#
#   scripts/chromium.sh install     install Debian's chromium package when /usr/bin/chromium is missing
#
# The test drives it with Playwright (a pinned dev requirement), which never downloads a browser
# of its own here: it launches this one (executable_path).
set -euo pipefail

install() {
  command -v chromium >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Chromium (Debian package chromium)..." >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
  if ! command -v chromium >/dev/null 2>&1; then
    echo "chromium is missing: install Debian's chromium package (as root: apt-get install chromium)" >&2
    exit 1
  fi
}

case "${1:-}" in
  install) install ;;
  *) echo "usage: $0 install" >&2; exit 2 ;;
esac
