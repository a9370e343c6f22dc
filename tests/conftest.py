"""Shared fixtures: one SparkSession for the whole test session (Spark takes seconds to start),
and one real PostgreSQL server for the database sinks."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from spark_helpers import TESTS_JIT  # noqa: E402

# the JIT flag of the tests' Spark JVMs (see spark_helpers.TESTS_JIT)
if TESTS_JIT not in os.environ.get("SPARK_SUBMIT_OPTS", ""):
    os.environ["SPARK_SUBMIT_OPTS"] = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {TESTS_JIT}".strip()

import behaviour_cases  # noqa: E402
from pyspark import cloudpickle  # noqa: E402

# Spark's Python workers cannot import modules from tests/: ship their functions by value.
cloudpickle.register_pickle_by_value(behaviour_cases)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from sparkstate.runtime.session.classic import get_spark

    log = tmp_path_factory.mktemp("spark-log") / "spark.log"
    session = get_spark(parallelism=2, log_file=log)
    yield session


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    return tmp_path / "checkpoint"


def _started(server, what: str):
    """Start a test server for the session, and remove it (data and all) at its end."""
    try:
        server.start()
    except RuntimeError as exc:
        server.remove()
        pytest.fail(f"cannot start the test {what}: {exc}", pytrace=False)
    yield server
    server.remove()


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server for the session (installed first when missing)."""
    from postgres_server import LocalPostgres

    yield from _started(LocalPostgres(), "PostgreSQL server")


@pytest.fixture(scope="session")
def postgres_url(postgres_server) -> str:
    """The URL of the session's PostgreSQL server (its ``postgres`` database)."""
    return postgres_server.url


@pytest.fixture
def postgres_db(postgres_server, request) -> str:
    """The URL of a new, empty database for one test: no table or marker left by another."""
    import re

    name = "t_" + re.sub(r"\W", "_", request.node.name.lower())[:50]
    return postgres_server.database_url(name)


@pytest.fixture(scope="session")
def kafka_broker():
    """A real Kafka-protocol broker for the session (``scripts/kafka.sh``, noida-db)."""
    from kafka_server import LocalKafka

    yield from _started(LocalKafka(), "Kafka broker")


@pytest.fixture
def own_broker():
    """A broker of the test's own, for tests that stop and start it (the session's goes on)."""
    from kafka_server import LocalKafka

    broker = LocalKafka()
    broker.start()
    yield broker
    broker.remove()


def pytest_collection_finish(session):
    for module in {item.module for item in session.items if getattr(item, "module", None)}:
        cloudpickle.register_pickle_by_value(module)


#: the Spark Connect suite: run in a pytest process of its own (scripts/test.sh), as a process
#: that has had a Connect session cannot start a Classic one, nor the other way round
CONNECT_SUITE = Path(__file__).parent / "connect"


def pytest_ignore_collect(collection_path, config):
    if collection_path == CONNECT_SUITE:
        asked = [Path(a.split("::")[0]).resolve() for a in config.args]
        return not asked or not all(a == CONNECT_SUITE or CONNECT_SUITE in a.parents for a in asked)
    return None


def pytest_collection_modifyitems(config, items):
    # Spark tests are marked automatically by folder so `-m "not spark"` gives the fast suite.
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "connect" in parts:
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.connect)
        if "integration" in parts:
            item.add_marker(pytest.mark.spark)
        if "e2e" in parts:
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.e2e)
