"""A Spark Connect client session: ``sparkstate run --remote sc://HOST:PORT``,
``Job.run(remote=...)`` or Spark's own ``SPARK_REMOTE`` variable.

The server (``scripts/connect.sh start`` runs one from the installed pyspark) plans and runs
the query, its Python workers run the key groups and the batches' sink functions, and it
writes the checkpoint. So sparkstate must be importable on the server's Python (installed
there, the same version), and the checkpoint must be a path the client and the server both
see: the client reads and writes sparkstate's own files in it (see ``driver.py``).
"""

from __future__ import annotations

import os
import re
from typing import Any

from sparkstate.errors import SparkStateError

#: Spark's own variable: a process where it is set runs its sessions over Spark Connect
REMOTE_VARIABLE = "SPARK_REMOTE"
_URL = re.compile(r"sc://[^/\s]+(/.*)?")


class RemoteSessionError(SparkStateError):
    """A Spark Connect server that cannot be reached, or a client that cannot talk to one."""


def remote_url(remote: str | None = None) -> str | None:
    """The Connect server to use: ``remote``, else ``$SPARK_REMOTE``, else None (Classic)."""
    url = remote or os.environ.get(REMOTE_VARIABLE) or None
    if url is not None and not _URL.fullmatch(url):
        where = "--remote / remote=" if remote else f"${REMOTE_VARIABLE}"
        raise RemoteSessionError(
            f"{where} {url!r} is not a Spark Connect address: give sc://HOST:PORT (for example "
            "sc://127.0.0.1:15002, which scripts/connect.sh start prints)"
        )
    return url


def connect_session(url: str) -> Any:
    """The Connect session for ``url`` (the same one for every call in this process), checked
    to answer: a server that is not there fails here, not in the middle of a run."""
    try:
        from pyspark.sql.connect.session import SparkSession
    except ImportError as exc:
        raise RemoteSessionError(
            f"Spark Connect needs its client packages ({exc}): pip install \"pyspark[connect]\" "
            "(grpcio, grpcio-status, googleapis-common-protos, zstandard), or pip install -r requirements.txt"
        ) from None
    try:
        spark = SparkSession.builder.remote(url).getOrCreate()
        spark.conf.get("spark.sql.session.timeZone")  # the first call that reaches the server
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RemoteSessionError(
            f"cannot reach the Spark Connect server at {url}: {first}. Start one (scripts/connect.sh start), "
            "or check the address"
        ) from None
    return spark
