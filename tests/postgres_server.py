"""A real local PostgreSQL server for the tests, run by ``scripts/postgres.sh``.

The script installs PostgreSQL (Debian's package) when it is missing, creates a cluster in a
temporary folder and starts it on a free port of 127.0.0.1. Nothing is mocked: the sinks talk
to this server as they would to any other.
"""

from __future__ import annotations

from script_server import ScriptServer


class LocalPostgres(ScriptServer):
    """One server in its own temporary folder (under /tmp, which the postgres user can enter)."""

    script = "postgres.sh"
    timeout = 900  # a first start installs PostgreSQL

    @property
    def url(self) -> str | None:
        return self.address

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
