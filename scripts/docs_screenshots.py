"""Screenshots of the built documentation site (./site, from `scripts/docs.sh build`) for
docs/assets/: its home page and one guide, taken with the headless Chromium the dashboard's
browser test uses (Debian's, scripts/chromium.sh), driven by Playwright.

Usage: scripts/docs.sh screenshots   (builds the site, then runs this)"""

from __future__ import annotations

import functools
import http.server
import shutil
import sys
import threading
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "site"
ASSETS = ROOT / "docs" / "assets"
#: page (under the site) -> the screenshot's file
PAGES = {"": "site-home.png", "guides/windows/": "site-guide-windows.png"}
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# no network here: without these, Chromium's own connections (updates, sync) fail at every start
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # one line per request otherwise
        pass


def main() -> int:
    if not (SITE / "index.html").is_file():
        print("no built site: run scripts/docs.sh build first", file=sys.stderr)
        return 1
    handler = functools.partial(_Quiet, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ASSETS.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            for path, name in PAGES.items():
                page.goto(f"http://127.0.0.1:{server.server_port}/{path}", wait_until="networkidle")
                page.screenshot(path=str(ASSETS / name))
                print(f"docs/assets/{name}: {page.title()}")
            browser.close()
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
