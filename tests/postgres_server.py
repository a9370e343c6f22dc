"""A real local PostgreSQL server for the tests, run by ``scripts/postgres.sh``.

The script installs PostgreSQL (Debian's package) when it is missing, creates a cluster in a
temporary folder and starts it on a free port of 127.0.0.1. Nothing is mocked: the sinks talk
to this server as they would to any other.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "postgres.sh"


class LocalPostgres:
    """One server in its own temporary folder (under /tmp, which the postgres user can enter)."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="sparkstate-pg-")
        self.url: str | None = None

    def _run(self, *args: str) -> str:
        done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"scripts/postgres.sh {' '.join(args)} failed:\n{done.stderr.strip() or done.stdout.strip()}")
        return done.stdout.strip()

    def start(self) -> str:
        """Start (or restart, on the same port and data) and return the server's URL."""
        self.url = self._run("start", self.dir).splitlines()[-1]
        return self.url

    def stop(self) -> None:
        self._run("stop", self.dir)

    def remove(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def database_url(self, name: str) -> str:
        """A new, empty database on the server, by URL."""
        import psycopg

        assert self.url is not None
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + f"/{name}"


def closed_port() -> int:
    """A local port on which nothing listens (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
