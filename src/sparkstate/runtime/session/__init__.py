"""The Spark session sparkstate runs on: a local (Classic) one it starts, a cluster's, or a
Spark Connect client's. :func:`get_spark` picks one; everything that needs the driver's JVM
goes through :mod:`~sparkstate.runtime.session.driver`."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def get_spark(
    *,
    master: str | None = None,
    remote: str | None = None,
    parallelism: int | None = None,
    log_file: str | Path | None = None,
    extra_conf: dict[str, str] | None = None,
    ui: bool = False,
) -> Any:
    """The session a run uses: the active one; else a Spark Connect client of ``remote`` (or
    of ``$SPARK_REMOTE``); else a local or cluster session sparkstate starts (``classic.py``)."""
    from sparkstate.errors import JobDefinitionError
    from sparkstate.runtime.session import classic
    from sparkstate.runtime.session.connect import connect_session, remote_url

    url = remote_url(remote) if master is None else None
    if master is not None and remote is not None:
        raise JobDefinitionError(
            f"both a cluster (--master {master}) and a Spark Connect server (--remote {remote}) were given: "
            "choose one (a Connect server runs on its own cluster)")
    active = classic.active_session()
    if active is not None:
        return active
    if url is not None:
        return connect_session(url)
    return classic.get_spark(master=master, parallelism=parallelism, log_file=log_file, extra_conf=extra_conf, ui=ui)
