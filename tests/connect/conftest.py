"""The Spark Connect suite's server: one ``scripts/connect.sh`` server for the session, on a
free port, and ``spark`` as a Connect client of it (the tests' jobs run on the server).

These tests run in a pytest process of their own (``scripts/test.sh`` starts it): a process
that has had a Connect session cannot start a Classic one, nor the other way round.
"""

from __future__ import annotations

import pytest
from connect_server import ConnectServer, free_port


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    server = ConnectServer(tmp_path_factory.mktemp("connect-server"), free_port())
    try:
        server.start()
    except RuntimeError as exc:
        server.stop()
        pytest.fail(f"cannot start the Spark Connect server: {exc}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark(connect_server):
    """A Spark Connect client session of the suite's server (in place of the Classic one)."""
    from sparkstate.runtime.session import get_spark

    session = get_spark(remote=connect_server.url)
    yield session
    # closed before the server stops: the client's exit handler would otherwise call the stopped
    # server, and retry for minutes
    session.stop()
