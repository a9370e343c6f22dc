"""What the Kafka source and sink share: the client configuration, credentials kept out of
every message, and errors that name the servers.

librdkafka (``confluent-kafka``) logs connection failures to stderr many times a second;
sparkstate's clients send its log to a logger of their own instead, which keeps quiet unless
a user switches it on (``logging.getLogger("sparkstate.kafka.client")``): whatever stops a
job reaches the user as a :class:`~sparkstate.errors.SourceError` or
:class:`~sparkstate.errors.SinkError` that says what, where and the fix.

This module does not import pyspark: Spark's Python workers run it, and so do the unit tests.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sparkstate.connectors.credentials import mask

#: seconds a metadata request (topics, partitions, offsets) may take before the broker counts as unreachable
METADATA_TIMEOUT_S = 15.0
_client_log = logging.getLogger("sparkstate.kafka.client")
_client_log.addHandler(logging.NullHandler())
_client_log.propagate = False


def client_config(bootstrap_servers: str, options: Mapping[str, Any] | None = None, **settings: Any) -> dict[str, Any]:
    """librdkafka's configuration for a client of ``bootstrap_servers``: the user's
    ``options`` (security settings and tuning, librdkafka's names), then ``settings``, which
    sparkstate's correctness rests on and so win."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, "client.id": "sparkstate", "logger": _client_log}
    config.update(options or {})
    config.update(settings)
    return config


def reason(exc: BaseException) -> str:
    """A Kafka exception's own words (librdkafka's error string), credentials masked."""
    err: Any = exc.args[0] if exc.args else None
    text = err.str() if err is not None and hasattr(err, "str") else str(exc)
    return mask(text)


def unreachable(servers: str, doing: str, exc: BaseException | None = None) -> str:
    """The message of a broker that does not answer."""
    why = f": {reason(exc)}" if exc is not None else ""
    return (
        f"cannot reach Kafka at {mask(servers)} while {doing}{why}. Is a broker running there, and are the "
        "address and the security settings right?"
    )


def topic_partitions(client: Any, topic: str, servers: str, doing: str, error: type[Exception]) -> list[int] | None:
    """The partitions of ``topic`` (sorted), or None when the broker has no such topic.
    ``client`` is a Consumer or an AdminClient; a broker that does not answer raises ``error``."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        meta = client.list_topics(topic, timeout=METADATA_TIMEOUT_S)
    except KafkaException as exc:
        raise error(unreachable(servers, doing, exc)) from None
    found = meta.topics.get(topic)
    if found is None or (found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
        return None
    if found.error is not None:
        raise error(f"Kafka at {mask(servers)} cannot describe topic {topic!r} while {doing}: {mask(found.error.str())}")
    return sorted(found.partitions)
