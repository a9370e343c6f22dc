"""``KafkaSink``: a job's output as records of a Kafka topic, each micro-batch in one Kafka
transaction with its marker (the protocol is ``sparkstate.connectors.kafka.protocol``; the
Spark binding ``sparkstate.runtime.io.sinks``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Self

from sparkstate.connectors.credentials import mask
from sparkstate.errors import JobDefinitionError
from sparkstate.extras import require

EXACTLY_ONCE = "exactly-once"
AT_LEAST_ONCE = "at-least-once"
SINK_GUARANTEES = (EXACTLY_ONCE, AT_LEAST_ONCE)
#: the topic of the transactional sink's batch markers (one partition, compacted, created when missing)
MARKER_TOPIC = "sparkstate_batches"
#: the librdkafka setting of a transaction's timeout, read from the sink's ``options``
TRANSACTION_TIMEOUT = "transaction.timeout.ms"
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def _check_topic(topic: str, what: str) -> None:
    if not isinstance(topic, str) or not _TOPIC_NAME.match(topic) or topic in (".", ".."):
        raise JobDefinitionError(
            f"KafkaSink: {what} {topic!r} is not a Kafka topic name (1-249 letters, digits, '.', '_' and '-')"
        )


@dataclass(frozen=True)
class KafkaSink:
    """Write each output row as one JSON record to ``topic`` at ``bootstrap_servers``.

    ``key``: the column (or columns, as a tuple or ``"a,b"``) whose value keys each record:
    one column's text, or a JSON object of several; records of one key land in one partition
    (Kafka's Java partitioner, murmur2). No key: records are spread over the partitions.

    ``guarantee="exactly-once"`` (default): each partition of a micro-batch is written by its
    task, its records and a marker ``(writer part, batch id)`` in topic ``sparkstate_batches``
    in one Kafka transaction, under a ``transactional.id`` per partition that is the same for
    every run of the job, so a new run (or task attempt) fences off an old one still writing
    (a "zombie") and aborts what it left open; a batch replayed after a crash finds the markers
    of the partitions it committed and writes only the others. Readers with
    ``isolation.level=read_committed`` see each batch exactly once; readers with
    ``read_uncommitted`` (the default of most clients) also see records of transactions that
    were later aborted (a batch that failed, whose replay writes its records again).
    ``guarantee="at-least-once"`` writes without transactions (idempotent producer): a batch
    replayed after a crash is written again.

    Side outputs go to ``<topic>-<name>`` (dead letters to ``<topic>-dead_letters``), each in
    transactions of its own; sparkstate creates these topics when they are missing (one
    partition, unkeyed), as a database sink creates its side tables. The topic named here (or
    by a side output's own sink) that does not exist is an error before the first batch,
    unless ``create_topics=True`` (created with ``partitions`` partitions). ``options`` are
    librdkafka's settings (security, tuning), never printed; ``transaction.timeout.ms`` among
    them is how long a part's batch may take before the broker aborts its transaction
    (default 15 minutes, Kafka's largest by default: see ``docs/guides/kafka.md``).

    The marker topic is created compacted (it keeps each part's last marker for as long as
    the topic lives) with ``marker_replication`` replicas (default: the broker's default, and
    at least ``min(3, brokers)``).

    Example::

        >>> print(KafkaSink("localhost:9092", "upi-counts", key="merchant_id").describe())
        kafka localhost:9092/upi-counts (json, key merchant_id, exactly-once: transactions, read_committed readers)
    """

    bootstrap_servers: str
    topic: str
    key: tuple[str, ...] | str = ()
    guarantee: str = EXACTLY_ONCE
    create_topics: bool = False
    partitions: int = 1
    options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    #: the writer's name in the markers (default: the job's name)
    job: str | None = None
    #: set by the run, not by users: the savepoint the checkpoint was restored from (its batch
    #: ids start at 0 again, so its writer has an identity of its own)
    restored_from: str | None = None
    marker_topic: str = MARKER_TOPIC
    #: replicas of the marker topic when the sink creates it (None: the broker's default, at least min(3, brokers))
    marker_replication: int | None = None

    def __post_init__(self) -> None:
        require("kafka", "KafkaSink")
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers.strip():
            raise JobDefinitionError("KafkaSink needs bootstrap_servers, e.g. 'localhost:9092'")
        _check_topic(self.topic, "topic")
        _check_topic(self.marker_topic, "marker_topic")
        if self.topic == self.marker_topic:
            raise JobDefinitionError(
                f"KafkaSink: {self.marker_topic} is the topic of sparkstate's batch markers; write to another"
            )
        key = self.key
        key = tuple(k.strip() for k in key.split(",") if k.strip()) if isinstance(key, str) else tuple(key or ())
        if not all(isinstance(k, str) and k for k in key) or len(set(key)) != len(key):
            raise JobDefinitionError(f"KafkaSink: key must name distinct columns, got {self.key!r}")
        object.__setattr__(self, "key", key)
        if self.guarantee not in SINK_GUARANTEES:
            raise JobDefinitionError(f"KafkaSink: guarantee must be one of {', '.join(SINK_GUARANTEES)}, got {self.guarantee!r}")
        if not isinstance(self.partitions, int) or isinstance(self.partitions, bool) or self.partitions < 1:
            raise JobDefinitionError(f"KafkaSink: partitions must be a positive int, got {self.partitions!r}")
        if self.marker_replication is not None and (
            not isinstance(self.marker_replication, int) or isinstance(self.marker_replication, bool)
            or self.marker_replication < 1
        ):
            raise JobDefinitionError(
                f"KafkaSink: marker_replication must be a positive int, got {self.marker_replication!r}"
            )
        object.__setattr__(self, "options", dict(self.options or {}))
        timeout = self.options.get(TRANSACTION_TIMEOUT)
        if timeout is not None and _positive_int(timeout) is None:
            raise JobDefinitionError(
                f"KafkaSink: option {TRANSACTION_TIMEOUT} must be a positive number of milliseconds, got {timeout!r}"
            )

    @property
    def transaction_timeout_ms(self) -> int | None:
        """The user's ``transaction.timeout.ms`` (None: not set, sparkstate chooses)."""
        value = self.options.get(TRANSACTION_TIMEOUT)
        return None if value is None else _positive_int(value)

    @property
    def transactional(self) -> bool:
        return self.guarantee == EXACTLY_ONCE

    @property
    def marker(self) -> str:
        """The writer's identity in the markers and its ``transactional.id``: the job and the
        topic, plus ``#<savepoint id>`` for a checkpoint restored from a savepoint."""
        return f"{self.job}@{self.topic}" + (f"#{self.restored_from}" if self.restored_from else "")

    def writer(self, part: int = 0) -> str:
        """Part ``part``'s name in the markers: a job's main sink is written by each partition
        of the batch (``part`` its index), a side output by the driver (part 0)."""
        return f"{self.marker}/p{part}"

    def transactional_id(self, part: int = 0) -> str:
        return f"sparkstate:{self.writer(part)}"

    def describe(self) -> str:
        key = f", key {','.join(self.key)}" if self.key else ""
        how = "exactly-once: transactions, read_committed readers" if self.transactional else "at-least-once"
        return f"kafka {mask(self.bootstrap_servers)}/{self.topic} (json{key}, {how})"

    def for_job(self, job_name: str) -> Self:
        """This sink bound to a job: its marker identity from the job's name."""
        return replace(self, job=self.job or job_name)

    def for_side_output(self, job_name: str, name: str, main: Any = None) -> Self:
        """This sink bound to side output ``name`` of a job (its own topic; marker ``<job>/<name>``)."""
        return replace(self, job=f"{self.job or job_name}/{name}")

    def side_table(self, name: str) -> Self:
        """Where side output ``name`` goes when it has no sink of its own: ``<topic>-<name>``,
        unkeyed, created when missing with one partition (this sink must be bound)."""
        return replace(self, topic=f"{self.topic}-{name}", key=(), job=f"{self.job}/{name}", create_topics=True,
                       partitions=1)


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    text = str(value).strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def parse_kafka_sink(spec: str) -> KafkaSink:
    """``kafka://HOST:PORT/TOPIC?key=a,b&guarantee=at-least-once&create=true&partitions=4&marker_replication=3``
    (other query parameters are librdkafka settings, e.g. ``security.protocol`` or
    ``transaction.timeout.ms``)."""
    from sparkstate.connectors.kafka.source import parse_kafka_url

    servers, topic, options = parse_kafka_url(spec)
    kwargs: dict[str, Any] = {}
    if "key" in options:
        kwargs["key"] = options.pop("key")
    if "guarantee" in options:
        kwargs["guarantee"] = options.pop("guarantee")
    if "job" in options:
        kwargs["job"] = options.pop("job")
    create = options.pop("create", None)
    if create is not None:
        if create.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise JobDefinitionError(f"sink {mask(spec)!r}: create must be true or false, got {create!r}")
        kwargs["create_topics"] = create.lower() in ("true", "1", "yes")
    if "partitions" in options:
        text = options.pop("partitions")
        if not text.isdigit():
            raise JobDefinitionError(f"sink {mask(spec)!r}: partitions must be a positive number, got {text!r}")
        kwargs["partitions"] = int(text)
    if "marker_replication" in options:
        text = options.pop("marker_replication")
        if not text.isdigit():
            raise JobDefinitionError(f"sink {mask(spec)!r}: marker_replication must be a positive number, got {text!r}")
        kwargs["marker_replication"] = int(text)
    return KafkaSink(servers, topic, options=options, **kwargs)
