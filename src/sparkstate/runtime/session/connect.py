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


#: how long a session sparkstate starts waits for a server that stops answering before the call
#: fails (Spark's default is 10 minutes): the backoffs of :func:`_retry_policy`, about a minute.
#: A server that died took its queries with it, so a run can only fail and be run again.
SERVER_WAIT_SECONDS = 60


class RemoteSessionError(SparkStateError):
    """A Spark Connect server that cannot be reached, or a client that cannot talk to one."""


class ServerLostError(RemoteSessionError):
    """The Spark Connect server stopped answering while a run watched its query."""


def server_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says the server cannot be reached: gRPC's UNAVAILABLE."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return False
        code = getattr(seen, "code", None)
        if callable(code) and getattr(code(), "name", None) == "UNAVAILABLE":
            return True
        text = str(seen)
        if "UNAVAILABLE" in text or "failed to connect to all addresses" in text or "Connection refused" in text:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def server_lost_error(exc: BaseException, job: str, checkpoint: str) -> ServerLostError:
    """The error a run ends with when its server stopped answering (``exc`` says so)."""
    text = str(exc).strip()
    first = text.splitlines()[0][:300] if text else type(exc).__name__
    return ServerLostError(
        f"the Spark Connect server stopped answering while job {job!r} ran ({first}); the checkpoint {checkpoint} "
        "keeps every committed batch: run the job again once the server is back, and it resumes from there")


def abandon(spark: Any) -> None:
    """Close ``spark``'s channel without calling the server, which is gone: pyspark's exit
    handler would otherwise call it again, waiting for each call's retries."""
    try:
        spark.client.close()
    except Exception:
        pass


def _retry_policy() -> Any:
    """Retries with backoffs of 0.5, 1, 2, 4, 8, then 15 s: :data:`SERVER_WAIT_SECONDS` in all."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    return DefaultPolicy(max_retries=8, backoff_multiplier=2.0, initial_backoff=500, max_backoff=15_000)


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
        import pyspark.sql.connect.session  # noqa: F401  (the client's packages are there)
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise RemoteSessionError(
            f"Spark Connect needs its client packages ({exc}): pip install \"pyspark[connect]\" "
            "(grpcio, grpcio-status, googleapis-common-protos, zstandard), or pip install -r requirements.txt"
        ) from None
    try:
        # pyspark's own builder, not the Connect module's: it also puts this process in Connect
        # mode, where pyspark's functions and types (a DDL schema's parsing) go to the server
        spark = SparkSession.builder.remote(url).getOrCreate()
        spark.client.set_retry_policies([_retry_policy()])
        spark.conf.get("spark.sql.session.timeZone")  # the first call that reaches the server
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RemoteSessionError(
            f"cannot reach the Spark Connect server at {url}: {first}. Start one (scripts/connect.sh start), "
            "or check the address"
        ) from None
    return spark
