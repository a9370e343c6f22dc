#!/usr/bin/env bash
# The documentation site (MkDocs, Material theme; its tools are pinned in requirements-docs.txt,
# installed by scripts/setup.sh). `scripts/docs.sh build` builds it strictly into ./site (any
# warning fails: a broken link, a docstring mkdocstrings cannot read); `scripts/docs.sh serve`
# serves it on http://127.0.0.1:8000 and rebuilds on every change; `scripts/docs.sh screenshots`
# builds it and takes docs/assets/'s screenshots in headless Chromium. Extra arguments go to mkdocs.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/mkdocs ] || bash scripts/setup.sh
# Material 9.7+ prints a banner about MkDocs 2.0 on every build; it says nothing about this site
export NO_MKDOCS_2_WARNING=1
command=${1:-build}
shift || true
case "$command" in
  build) exec .venv/bin/mkdocs build --strict "$@" ;;
  serve) exec .venv/bin/mkdocs serve --strict "$@" ;;
  screenshots)
    .venv/bin/mkdocs build --strict --quiet "$@"
    bash scripts/chromium.sh install
    exec .venv/bin/python scripts/docs_screenshots.py ;;
  *) echo "usage: scripts/docs.sh build|serve|screenshots [mkdocs options]" >&2; exit 2 ;;
esac
