"""``KafkaSource``: the records of Kafka topics as events, replayable from offsets the
checkpoint keeps (the Spark binding is ``sparkstate.runtime.io.kafka_source``).

Flink's Kafka source keeps each partition's offset as operator state in its checkpoints;
sparkstate keeps them in Spark's offset log, which Spark writes before it runs a micro-batch.
A micro-batch is a range of offsets per partition, so one that failed reads exactly the same
records again, and each record changes state and output once: **exactly-once**, as long as the
broker still holds the records (a range that retention deleted is an error, never skipped).

Records are read with ``isolation.level=read_committed``: a range ends at the partition's last
stable offset, so records of a transaction still open upstream wait for its outcome, and those
of an aborted one are never events.

An event's columns are those of ``schema``. With ``format="json"`` or ``"csv"`` the record's
value is parsed into them as the text sources parse lines (a record that is not an event of
the schema becomes a dead letter); ``format="raw"`` keeps the value as a ``value`` column.
Columns named ``kafka_*`` come from the record itself rather than its value:

=====================  ===========================  =====================================
column                 type                         what
=====================  ===========================  =====================================
``kafka_key``          ``string`` or ``binary``     the record's key
``kafka_topic``        ``string``                   its topic
``kafka_partition``    ``int``                      its partition
``kafka_offset``       ``bigint``                   its offset
``kafka_timestamp``    ``timestamp``                its timestamp (usable as event time)
``kafka_headers``      ``map<string,string>``       its headers (the last of a repeated name)
=====================  ===========================  =====================================
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sparkstate.api.io import Guarantee
from sparkstate.api.schema import Schema
from sparkstate.api.time import epoch_millis
from sparkstate.connectors.credentials import mask, query_parameters
from sparkstate.connectors.sources import TextLines
from sparkstate.errors import JobDefinitionError
from sparkstate.extras import require

#: the columns a record gives beside its value, with the DDL types each may have
METADATA_COLUMNS: dict[str, tuple[str, ...]] = {
    "kafka_key": ("string", "binary"),
    "kafka_topic": ("string",),
    "kafka_partition": ("int", "integer", "bigint"),
    "kafka_offset": ("bigint", "long"),
    "kafka_timestamp": ("timestamp", "timestamp_ltz", "bigint"),
    "kafka_headers": ("map<string,string>",),
}
KAFKA_FORMATS = ("json", "csv", "raw")
STARTING_WORDS = ("earliest", "latest")
#: the records one micro-batch reads at most, unless the source says otherwise (Spark's
#: Kafka source has no bound by default; a first batch of a topic's whole history can be large)
DEFAULT_MAX_RECORDS_PER_BATCH = 1_000_000
#: the group id sparkstate's consumers give the broker (offsets are kept in the checkpoint,
#: never committed to the group)
DEFAULT_GROUP = "sparkstate"


def _ddl_type(t: str) -> str:
    return "".join(t.lower().split())


def split_columns(schema: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """A source schema's (name, DDL type) pairs: the value's columns and the ``kafka_*`` ones."""
    parsed = Schema.of(schema)
    value: list[tuple[str, str]] = []
    meta: list[tuple[str, str]] = []
    for name, ddl in zip(parsed.names, parsed.types):
        (meta if name.startswith("kafka_") else value).append((name, ddl))
    return value, meta


def starting_position(value: Any) -> str:
    """A starting position as the option string the reader takes: ``earliest``, ``latest``,
    ``timestamp:<epoch ms>`` or ``offsets:<JSON {topic: {partition: offset}}>``."""
    if isinstance(value, str):
        low = value.strip().lower()
        if low in STARTING_WORDS:
            return low
        if low.startswith("timestamp:"):
            ms = value.strip().partition(":")[2].strip()
            if not ms.lstrip("-").isdigit():
                raise JobDefinitionError(
                    f"KafkaSource: starting={value!r}: a timestamp is epoch milliseconds, e.g. 'timestamp:1735689600000'"
                )
            return f"timestamp:{int(ms)}"
        if low.startswith("offsets:"):
            try:
                given = json.loads(value.strip().partition(":")[2])
            except ValueError:
                given = None
            if not isinstance(given, Mapping):
                raise JobDefinitionError(
                    f"KafkaSource: starting={value!r}: offsets are JSON {{topic: {{partition: offset}}}}, e.g. "
                    "'offsets:{\"payments\": {\"0\": 42}}'"
                )
            return starting_position(given)
        if low.lstrip("-").isdigit():
            return f"timestamp:{int(low)}"
        try:
            when = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise JobDefinitionError(
                f"KafkaSource: starting={value!r} is not a position; use 'earliest', 'latest', a timestamp "
                "(epoch milliseconds, an ISO 8601 time or a datetime) or offsets ({topic: {partition: offset}})"
            ) from None
        return f"timestamp:{epoch_millis(when if when.tzinfo else when.replace(tzinfo=dt.UTC))}"
    if isinstance(value, dt.datetime):
        return f"timestamp:{epoch_millis(value if value.tzinfo else value.replace(tzinfo=dt.UTC))}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"timestamp:{value}"
    if isinstance(value, Mapping):
        try:
            offsets = {str(t): {str(int(p)): _offset(o) for p, o in parts.items()} for t, parts in value.items()}
        except (AttributeError, TypeError, ValueError):
            raise JobDefinitionError(
                f"KafkaSource: starting={value!r}: offsets are {{topic: {{partition: offset}}}} with whole numbers "
                "from 0, e.g. {'payments': {0: 42, 1: 40}}"
            ) from None
        return "offsets:" + json.dumps(offsets)
    raise JobDefinitionError(f"KafkaSource: starting={value!r} is not a position (earliest, latest, a timestamp or offsets)")


def _offset(value: Any) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < 0:
        raise ValueError(value)
    return int(value)


@dataclass(frozen=True)
class KafkaSource(TextLines):
    """The records of Kafka ``topic`` (a name, or several as a list or ``"a,b"``) at
    ``bootstrap_servers``, each one event of ``schema`` read from its value by ``format``.

    ``starting``: where a new checkpoint begins: ``"earliest"`` (default), ``"latest"``, a
    timestamp (epoch ms, ISO 8601 text or a datetime: each partition's first record at or after
    it, through the broker's offsets-for-times) or offsets ``{topic: {partition: offset}}``
    (partitions not named start at their earliest). A checkpoint that exists resumes where it
    ended, whatever ``starting`` says; so does a restored savepoint, at its offsets. A topic
    deleted and created again since that checkpoint or savepoint (its Kafka topic id, or where
    the broker gives none its first records, changed) is refused, since its offsets belong to
    the old topic, unless ``starting_if_recreated`` (a position as ``starting`` takes) says
    where the new topic is read from. Partitions added to a topic while the job runs are read
    from their first record. ``max_records_per_batch`` bounds one micro-batch, spread over the
    partitions by how far each is behind. ``options`` are librdkafka's settings (security:
    ``security.protocol``, ``sasl.mechanism``, ``sasl.username``, ``sasl.password``...), never
    printed.

    Example::

        >>> src = KafkaSource("localhost:9092", "payments", "event_time timestamp, merchant_id string, amount double")
        >>> print(src.guarantee, "-", src.describe())
        exactly-once - kafka localhost:9092/payments (json values)
    """

    bootstrap_servers: str
    topic: Any
    schema: str
    format: str = "json"
    time_column: str | None = None
    starting: Any = "earliest"
    max_records_per_batch: int | None = DEFAULT_MAX_RECORDS_PER_BATCH
    options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    name: str = "kafka"
    starting_if_recreated: Any = None

    guarantee: ClassVar[Guarantee] = Guarantee.EXACTLY_ONCE
    guarantee_why: ClassVar[str] = "replayable (per-partition Kafka offsets in the checkpoint)"

    def __post_init__(self) -> None:
        require("kafka", "KafkaSource")
        topics = self.topic.split(",") if isinstance(self.topic, str) else list(self.topic or ())
        topics = [t.strip() for t in topics if isinstance(t, str) and t.strip()]
        if not topics or len(set(topics)) != len(topics):
            raise JobDefinitionError(f"KafkaSource needs one or more distinct topic names, got {self.topic!r}")
        object.__setattr__(self, "topic", tuple(topics))
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers.strip():
            raise JobDefinitionError("KafkaSource needs bootstrap_servers, e.g. 'localhost:9092'")
        if self.format not in KAFKA_FORMATS:
            raise JobDefinitionError(f"KafkaSource: format must be one of {', '.join(KAFKA_FORMATS)}, got {self.format!r}")
        if self.max_records_per_batch is not None and (
            not isinstance(self.max_records_per_batch, int) or isinstance(self.max_records_per_batch, bool)
            or self.max_records_per_batch < 1
        ):
            raise JobDefinitionError(
                f"KafkaSource: max_records_per_batch must be a positive int or None, got {self.max_records_per_batch!r}"
            )
        object.__setattr__(self, "starting", starting_position(self.starting))
        if self.starting_if_recreated is not None:
            object.__setattr__(self, "starting_if_recreated", starting_position(self.starting_if_recreated))
        if self.starting.startswith("offsets:"):
            unknown = sorted(set(json.loads(self.starting.partition(":")[2])) - set(topics))
            if unknown:
                raise JobDefinitionError(
                    f"KafkaSource: starting offsets name topic(s) {', '.join(map(repr, unknown))}, which the source does "
                    f"not read (it reads {', '.join(map(repr, topics))})"
                )
        object.__setattr__(self, "options", dict(self.options or {}))
        value, meta = split_columns(self.schema)
        for name, ddl in meta:
            allowed = METADATA_COLUMNS.get(name)
            if allowed is None:
                raise JobDefinitionError(
                    f"KafkaSource: column {name!r} is not one of the record's columns ({', '.join(METADATA_COLUMNS)}); "
                    "a column of the value must not start with kafka_"
                )
            if _ddl_type(ddl) not in allowed:
                raise JobDefinitionError(f"KafkaSource: column {name!r} must be of type {' or '.join(allowed)}, got {ddl}")
        if self.format == "raw" and [n for n, _ in value] != ["value"]:
            raise JobDefinitionError(
                "KafkaSource: format='raw' keeps the record's value as one column: the schema has `value string` "
                f"(or `value binary`) and kafka_* columns only, got ({self.schema})"
            )
        if self.format == "raw" and _ddl_type(value[0][1]) not in ("string", "binary"):
            raise JobDefinitionError(f"KafkaSource: format='raw': column 'value' must be string or binary, got {value[0][1]}")
        if self.format != "raw" and not value:
            raise JobDefinitionError(
                f"KafkaSource: format={self.format!r} reads the value's columns, and the schema names none ({self.schema})"
            )
        if self.time_column is not None and self.time_column not in Schema.of(self.schema).names:
            raise JobDefinitionError(f"KafkaSource: time_column {self.time_column!r} is not in the schema ({self.schema})")

    @property
    def rejects_malformed(self) -> bool:  # type: ignore[override]
        """A value that is not an event of the schema is a dead letter (raw values are kept as they are)."""
        return True

    def value_schema(self) -> str:
        """The DDL of the columns read from a record's value."""
        return ", ".join(f"{n} {t}" for n, t in split_columns(self.schema)[0])

    def describe(self) -> str:
        what = "raw values" if self.format == "raw" else f"{self.format} values"
        return f"kafka {mask(self.bootstrap_servers)}/{','.join(self.topic)} ({what})"

    def identity(self) -> dict:
        return {"type": type(self).__name__, "topics": list(self.topic)}


def parse_kafka_url(spec: str) -> tuple[str, str, dict[str, str]]:
    """``kafka://[USER:PASSWORD@]HOST:PORT[,HOST:PORT]/TOPIC?k=v`` as (servers, topic, options);
    a user and password become SASL settings (``sasl.username``/``sasl.password``; the
    mechanism and protocol come from the query, default PLAIN over SASL_PLAINTEXT)."""
    from urllib.parse import unquote, urlsplit

    rest = spec[len("kafka://"):] if spec.startswith("kafka://") else None
    if not rest:
        raise JobDefinitionError(f"{mask(spec)!r} is not a kafka:// URL; use kafka://HOST:PORT/TOPIC")
    # a URL's user part ends at its first "/", "?" or "#": a password holding one must be percent-encoded
    encode = ("; percent-encode '/', '?', '#', '[', ']' and '%' in a user name or password ('/' is %2F)"
              if "@" in rest else "")
    try:
        url = urlsplit(spec)
    except ValueError:  # "[" without "]": Python reads it as an IPv6 host
        raise JobDefinitionError(f"{mask(spec)!r}: expected kafka://HOST:PORT/TOPIC{encode}") from None
    auth, _, servers = url.netloc.rpartition("@")
    topic = unquote(url.path.strip("/"))
    if not servers or not topic or "/" in topic:
        raise JobDefinitionError(
            f"{mask(spec)!r}: expected kafka://HOST:PORT/TOPIC, e.g. kafka://localhost:9092/payments{encode}")
    if "#" in spec:  # what follows it is not in url.query: a password would lose its end, an option be dropped
        raise JobDefinitionError(f"{mask(spec)!r}: a kafka:// URL has no '#' part; percent-encode a '#' (%23)")
    options = dict(query_parameters(url.query))
    if auth:
        user, _, password = auth.partition(":")
        options.setdefault("sasl.username", unquote(user))
        options.setdefault("sasl.password", unquote(password))
        options.setdefault("sasl.mechanism", "PLAIN")
        options.setdefault("security.protocol", "SASL_PLAINTEXT")
    return servers, topic, options
