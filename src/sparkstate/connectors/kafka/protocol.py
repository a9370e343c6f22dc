"""The transactional Kafka sink's protocol: exactly-once writes of micro-batches.

Spark runs a micro-batch whose commit it did not record again after a restart, with the same
batch id. A sink's writer (``KafkaSink.marker``: the job and the topic) has parts: a job's
main sink is written by the tasks of the batch, part ``i`` by the task of partition ``i``
(Flink's sink subtasks), each side output by the driver (part 0). Each batch of each part is
one Kafka transaction holding the part's records and a marker record in
``sparkstate_batches`` (key: ``KafkaSink.writer(i)``; value: the batch id and its row count):

1. a part starts its batch by initialising its producer under its ``transactional.id``
   (``sparkstate:<writer>/p<i>``, the same in every run): the broker fences off any earlier
   producer of that id (a zombie run, or an earlier attempt of the task, cannot commit any
   more) and aborts what it left open;
2. a batch at or below the part's last marker was committed by an earlier attempt: the part
   writes nothing. Before its first batch the run fences every part and reads all their
   markers (to refuse markers ahead of the checkpoint); each task then reads its own part's
   last marker itself (:func:`read_part_top`), since an earlier attempt of it, or of its
   stage, may have committed;
3. any other batch begins a transaction, produces the part's records and its marker, and
   commits: both become visible to ``read_committed`` readers together, or neither does.

A replayed batch gives each partition the same rows (the same input, the same state), so a
part that committed its share of a batch and a part that did not are both right: the first
writes nothing, the second writes its share once.

Reading the markers waits for every transaction open on the marker topic at the time of the
read to end (a reader with ``read_committed`` cannot pass an open transaction): a marker
committed earlier is then always found, whatever other writers are doing.

A part's top is its LAST marker record (its batch ids only grow, so that is its highest); a
writer's top is its parts' highest. A Kafka topic's records cannot be deleted, so
``sparkstate run --fresh`` (:func:`reset`) writes a marker ``{"batch": null, "reset": true}``
under each part's key that makes its top None again: the new checkpoint's batch ids start at
0, and its batches are written, after the old run's records.

Invariants: on the driver one producer per part and process (initialising a second would
fence the first), initialised anew by each run's :func:`prepare`; a failed or fenced
producer is dropped, and the next batch of its part fences it and reads the marker again; a
task's producer lives for the task; nothing a failed batch sent is visible to
``read_committed``.

A part's transaction lasts at most the sink's ``transaction.timeout.ms`` (default 15 minutes)
from its first record: past it the broker aborts it, and the sink aborts it before committing
(a broker may not), with an error that names the timeout, never a zombie. The marker topic is
compacted: each part's last marker stays however long a job is stopped.

Before anything is sent, a row whose record the broker would refuse on every attempt (larger
than the producer's ``message.max.bytes``) is taken out of the batch as a dead letter, so a
batch never fails over and over on one row.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from sparkstate.connectors.credentials import mask
from sparkstate.connectors.database.protocol import BatchOutcome
from sparkstate.connectors.kafka.client import METADATA_TIMEOUT_S, client_config, reason, topic_partitions, unreachable
from sparkstate.connectors.kafka.records import encode
from sparkstate.connectors.kafka.sink import TRANSACTION_TIMEOUT, KafkaSink
from sparkstate.errors import SinkError
from sparkstate.fault_points import SINK_ROWS_WRITTEN, fault_point

log = logging.getLogger("sparkstate.sinks")

#: milliseconds a part's transaction may stay open before the broker aborts it, unless the sink's
#: options set ``transaction.timeout.ms``: as Flink advises for its Kafka sink, longer than the
#: longest batch plus a restart's downtime, so 15 minutes, Apache Kafka's default largest
#: (``transaction.max.timeout.ms``), lowered to the broker's largest when that is less
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000
#: seconds the marker reads wait beyond the transaction timeout for a transaction open on the marker topic
MARKER_WAIT_SLACK_S = 30.0
#: the marker topic's settings when the sink creates it: compacted, so each part's last marker
#: stays for as long as the topic lives (a deleting topic drops them after retention.ms, and a
#: batch committed to Kafka but not to the checkpoint would then be written again); segments
#: roll hourly, since compaction cleans closed segments only and the start-up read reads them all
MARKER_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": "3600000"}
#: seconds a commit (or a flush of an at-least-once batch) may take
COMMIT_TIMEOUT_S = 120.0
#: the largest record sent (librdkafka's default message.max.bytes); larger rows are dead letters
DEFAULT_MAX_RECORD_BYTES = 1_000_000

_lock = threading.RLock()  # re-entered: a producer made under it asks for the broker's largest timeout
#: this process's producer per transactional id (initialised once: initialising again would fence itself)
_producers: dict[str, Any] = {}
#: the last batch each part of each writer committed, as read at prepare time and advanced by
#: each commit on the driver
_tops: dict[str, dict[int, int | None]] = {}
#: delivery failures of each at-least-once writer's current batch
_failures: dict[str, list[str]] = {}
#: each cluster's transaction.max.timeout.ms (None: the broker does not say), by bootstrap servers
_broker_max_timeouts: dict[str, int | None] = {}
#: the marker topics whose settings this process has checked, by (bootstrap servers, topic)
_checked_marker_topics: set[tuple[str, str]] = set()


def _admin(sink: KafkaSink) -> Any:
    from confluent_kafka.admin import AdminClient

    # an admin client is a producer to librdkafka, which lets its metadata requests create topics
    return AdminClient(client_config(sink.bootstrap_servers, sink.options, **{"allow.auto.create.topics": False}))


def ensure_topics(sink: KafkaSink, topics: Iterable[tuple[str, int, bool]]) -> None:
    """Check that each ``(topic, partitions, create)`` exists, creating it when ``create``."""
    missing = _ensure(sink, topics)
    if missing:
        raise SinkError(_missing_message(missing, sink.bootstrap_servers))


def _ensure(sink: KafkaSink, topics: Iterable[tuple[str, int, bool]]) -> list[str]:
    """The topics of ``(topic, partitions, create)`` that do not exist and may not be created."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    admin = _admin(sink)
    missing = []
    for topic, partitions, create in topics:
        if topic_partitions(admin, topic, sink.bootstrap_servers, f"checking topic {topic!r}", SinkError) is not None:
            if topic == sink.marker_topic and sink.transactional:
                _check_marker_topic(sink, admin)
            continue
        if not create:
            missing.append(topic)
            continue
        new = NewTopic(topic, partitions)
        if topic == sink.marker_topic:
            new = NewTopic(topic, partitions, replication_factor=_marker_replication(sink, admin),
                           config=MARKER_TOPIC_CONFIG)
        try:
            admin.create_topics([new], operation_timeout=METADATA_TIMEOUT_S)[topic].result()
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
                fix = ""
                if topic == sink.marker_topic:
                    fix = (f" (the sink's marker topic: {new.replication_factor} replicas, "
                           f"{', '.join(f'{k}={v}' for k, v in MARKER_TOPIC_CONFIG.items())}). Set its replicas with "
                           "KafkaSink(..., marker_replication=N) (in a URL &marker_replication=N), or create it "
                           "with your Kafka tools")
                raise SinkError(
                    f"cannot create topic {topic!r} on Kafka at {mask(sink.bootstrap_servers)}: {reason(exc)}{fix}"
                ) from None
    return missing


def _brokers(admin: Any, sink: KafkaSink) -> list[int]:
    from confluent_kafka import KafkaException

    try:
        return sorted(admin.list_topics(timeout=METADATA_TIMEOUT_S).brokers)
    except KafkaException as exc:
        raise SinkError(unreachable(sink.bootstrap_servers, "listing the brokers", exc)) from None


def _broker_config(admin: Any, sink: KafkaSink, name: str) -> str | None:
    """A broker setting by DescribeConfigs (None: the broker does not say, or may not be asked)."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    brokers = _brokers(admin, sink)
    if not brokers:
        return None
    resource = ConfigResource(ResourceType.BROKER, str(brokers[0]))
    try:
        entry = admin.describe_configs([resource], request_timeout=METADATA_TIMEOUT_S)[resource].result().get(name)
    except Exception:  # noqa: BLE001 - not authorised, or an old broker: the setting is unknown
        return None
    return None if entry is None or entry.value is None else str(entry.value)


def _marker_replication(sink: KafkaSink, admin: Any) -> int:
    """The marker topic's replicas: the sink's ``marker_replication``, else the broker's
    default replication factor but at least ``min(3, brokers)`` (Kafka's own internal
    topics have 3: a batch's markers must outlive the loss of a broker)."""
    if sink.marker_replication is not None:
        return sink.marker_replication
    brokers = len(_brokers(admin, sink))
    default = _broker_config(admin, sink, "default.replication.factor")
    return max(min(3, brokers), int(default) if default and default.isdigit() else 1)


def _check_marker_topic(sink: KafkaSink, admin: Any) -> None:
    """Warn (once a process) when an existing marker topic loses markers: a deleting cleanup
    policy drops them after its retention, one replica loses them with its broker."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    seen = (sink.bootstrap_servers, sink.marker_topic)
    with _lock:
        if seen in _checked_marker_topics:
            return
        _checked_marker_topics.add(seen)
    resource = ConfigResource(ResourceType.TOPIC, sink.marker_topic)
    try:
        config = admin.describe_configs([resource], request_timeout=METADATA_TIMEOUT_S)[resource].result()
    except Exception as exc:  # noqa: BLE001 - not authorised to describe it: nothing to check
        log.info("could not check the settings of marker topic %r: %s", sink.marker_topic, reason(exc))
        return
    entry = config.get("cleanup.policy")
    policy = {p.strip() for p in str(entry.value if entry is not None else "delete").split(",")}
    where = f"on Kafka at {mask(sink.bootstrap_servers)}"
    if policy != {"compact"}:
        retention = config.get("retention.ms")
        kept = f"retention.ms={retention.value}" if retention is not None else "its retention"
        log.warning(
            f"the marker topic {sink.marker_topic!r} {where} has cleanup.policy={','.join(sorted(policy))}: its "
            f"markers are deleted after {kept}, and a batch committed to Kafka but not to the checkpoint before a "
            f"stop longer than that is written twice on restart. Make it compacted: kafka-configs.sh "
            f"--bootstrap-server {mask(sink.bootstrap_servers)} --alter --entity-type topics --entity-name "
            f"{sink.marker_topic} --add-config cleanup.policy=compact"
        )
    try:
        meta = admin.list_topics(sink.marker_topic, timeout=METADATA_TIMEOUT_S)
        replicas = min(len(p.replicas) for p in meta.topics[sink.marker_topic].partitions.values())
    except Exception:  # noqa: BLE001 - gone meanwhile, or no answer: the next step says so
        return
    if replicas < min(3, len(meta.brokers)):
        log.warning(
            f"the marker topic {sink.marker_topic!r} {where} has {replicas} replica{'s' if replicas > 1 else ''} on a "
            f"cluster of {len(meta.brokers)} brokers: its markers are lost with one broker's disk, and a batch "
            "committed to Kafka but not to the checkpoint is then written twice on restart. Give it more with "
            "kafka-reassign-partitions.sh"
        )


def _missing_message(missing: list[str], servers: str) -> str:
    many = len(missing) > 1
    names = ", ".join(repr(t) for t in missing)
    return (
        f"topic{'s' if many else ''} {names} do{'' if many else 'es'} not exist on Kafka at {mask(servers)}. Create "
        f"{'them' if many else 'it'} (with your Kafka tools), or let the sink create the topics it writes: "
        "KafkaSink(..., create_topics=True, partitions=N) (in a URL: &create=true&partitions=N)"
    )


def _producer(sink: KafkaSink, part: int = 0) -> Any:
    """This process's transactional producer of part ``part`` of ``sink``'s writer,
    initialised (fencing off any earlier producer of its ``transactional.id``)."""
    with _lock:
        p = _producers.get(sink.transactional_id(part))
        if p is not None:
            return p
        p = _producers[sink.transactional_id(part)] = _new_transactional(sink, part)
        return p


def _new_transactional(sink: KafkaSink, part: int) -> Any:
    from confluent_kafka import KafkaError, KafkaException, Producer

    timeout = transaction_timeout_ms(sink)
    p = Producer(_producer_config(sink, **{"transactional.id": sink.transactional_id(part),
                                           TRANSACTION_TIMEOUT: timeout}))
    try:
        p.init_transactions(METADATA_TIMEOUT_S)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if getattr(err, "code", lambda: None)() == KafkaError.INVALID_TRANSACTION_TIMEOUT:
            raise SinkError(_timeout_too_large(sink, timeout, None)) from None
        doing = f"starting the transactions of writer {sink.writer(part)!r}"
        raise SinkError(unreachable(sink.bootstrap_servers, doing, exc)) from None
    return p


def transaction_timeout_ms(sink: KafkaSink) -> int:
    """The ``transaction.timeout.ms`` of ``sink``'s transactions: the user's, else
    :data:`DEFAULT_TRANSACTION_TIMEOUT_MS` lowered to the broker's largest when it says so."""
    if sink.transaction_timeout_ms is not None:
        return sink.transaction_timeout_ms
    largest = broker_max_timeout_ms(sink)
    return DEFAULT_TRANSACTION_TIMEOUT_MS if largest is None else min(DEFAULT_TRANSACTION_TIMEOUT_MS, largest)


def broker_max_timeout_ms(sink: KafkaSink) -> int | None:
    """The cluster's ``transaction.max.timeout.ms`` (None: its brokers do not say), asked once a process."""
    with _lock:
        if sink.bootstrap_servers in _broker_max_timeouts:
            return _broker_max_timeouts[sink.bootstrap_servers]
    value = _broker_config(_admin(sink), sink, "transaction.max.timeout.ms")
    largest = int(value) if value and value.isdigit() else None
    with _lock:
        _broker_max_timeouts[sink.bootstrap_servers] = largest
    return largest


def with_transaction_timeout(sink: KafkaSink) -> KafkaSink:
    """``sink`` with its transaction timeout in its options (what its tasks use, so that
    they do not ask the broker for its largest again)."""
    from dataclasses import replace

    if not sink.transactional or sink.transaction_timeout_ms is not None:
        return sink
    return replace(sink, options={**sink.options, TRANSACTION_TIMEOUT: transaction_timeout_ms(sink)})


def _check_transaction_timeout(sink: KafkaSink) -> None:
    """Refuse a user's ``transaction.timeout.ms`` above the broker's largest, before anything is written."""
    largest = broker_max_timeout_ms(sink)
    if sink.transaction_timeout_ms is not None and largest is not None and sink.transaction_timeout_ms > largest:
        raise SinkError(_timeout_too_large(sink, sink.transaction_timeout_ms, largest))


def _timeout_too_large(sink: KafkaSink, timeout: int, largest: int | None) -> str:
    limit = f"={largest}" if largest is not None else " (Apache Kafka's default: 900000, 15 minutes)"
    return (
        f"the Kafka sink of topic {sink.topic!r} asks for transaction.timeout.ms={timeout}, more than the broker at "
        f"{mask(sink.bootstrap_servers)} allows (its transaction.max.timeout.ms{limit}). Set the sink's "
        f"{TRANSACTION_TIMEOUT} at or below it (KafkaSink(..., options={{'{TRANSACTION_TIMEOUT}': N}}), in a URL "
        f"&{TRANSACTION_TIMEOUT}=N), or raise transaction.max.timeout.ms on the brokers"
    )


def _marker_wait_s(sink: KafkaSink) -> float:
    """How long a marker read waits for a transaction open on the marker topic: one the
    broker aborts after its transaction timeout (a writer of this sink's timeout)."""
    return transaction_timeout_ms(sink) / 1000 + MARKER_WAIT_SLACK_S


def _producer_config(sink: KafkaSink, **settings: Any) -> dict[str, Any]:
    base = {"linger.ms": 5, "partitioner": "murmur2_random", "queue.buffering.max.messages": 1_000_000,
            "enable.idempotence": True}
    config = client_config(sink.bootstrap_servers, {**base, **sink.options})
    config.update(settings)
    return config


def _drop_producer(sink: KafkaSink, producer: Any, key: str | None = None) -> None:
    """Forget ``producer`` (failed or fenced) and what its writer knew; a newer producer of
    the same writer in this process (one that fenced it) is kept."""
    key = key or sink.transactional_id()
    with _lock:
        if _producers.get(key) is producer:
            _producers.pop(key, None)
            _tops.pop(sink.marker, None)


def read_top_marker(sink: KafkaSink, timeout_s: float | None = None, writer: str | None = None) -> int | None:
    """The last batch ``sink``'s writer (or the writer named ``writer`` in its marker topic)
    committed in any of its parts (None: none, or a reset since): see :func:`read_part_tops`."""
    return _highest(read_part_tops(sink, timeout_s, writer))


def _highest(tops: dict[int, int | None]) -> int | None:
    """A writer's top: the highest of its parts' (None: no part has written since a reset)."""
    written = [t for t in tops.values() if t is not None]
    return max(written) if written else None


def read_part_tops(sink: KafkaSink, timeout_s: float | None = None, writer: str | None = None) -> dict[int, int | None]:
    """The last batch each part of ``sink``'s writer (or of the writer named ``writer``)
    committed (None: a reset since), from the whole marker topic read with ``read_committed``
    up to its end as of now (waiting, at most ``timeout_s``, default the transaction timeout
    and :data:`MARKER_WAIT_SLACK_S`, for transactions open now).

    A part's top is its LAST marker record: its batch ids only grow, so that is its highest,
    except after :func:`reset` (``sparkstate run --fresh``), whose marker record
    ``{"batch": null, "reset": true}`` makes it None again (a topic's records cannot be
    deleted, and the new checkpoint's batch ids start at 0).

    Every record of the topic is read (a compacted topic holds one per key and the records
    since its last cleaning), keeping the last value of each key: only those of this writer's
    parts are parsed."""
    prefix = (writer or sink.marker).encode() + b"/p"
    last: dict[bytes | None, bytes | None] = {}
    with _MarkerReader(sink, timeout_s) as reader:
        for tp, low, end in reader.partitions():
            for msgs in reader.batches(tp, low, end):
                last.update((m.key(), m.value()) for m in msgs)
    return {int(key[len(prefix):]): _marker_batch(value, sink) for key, value in last.items()
            if key is not None and key.startswith(prefix) and key[len(prefix):].isdigit()}


def read_part_top(sink: KafkaSink, part: int, timeout_s: float | None = None) -> int | None:
    """The last batch part ``part`` of ``sink``'s writer committed (None: none, or a reset
    since), read from the marker topic's end backwards: a running job's parts write a marker
    each batch, so the part's last one is among the last records and a task finds it at once."""
    key = sink.writer(part).encode()
    found: list[bytes | None] = []
    with _MarkerReader(sink, timeout_s) as reader:
        for tp, low, end in reader.partitions():
            step, top = 256, end
            while top > low and not found:
                start = max(low, top - step)
                found = [m.value() for msgs in reader.batches(tp, start, top) for m in msgs if m.key() == key][-1:]
                top, step = start, step * 4
            if found:  # a key's records are in one partition
                return _marker_batch(found[0], sink)
    return None


class _MarkerReader:
    """Reads the marker topic with ``read_committed``: each partition up to its end as of now
    (the end ``read_uncommitted`` readers see, past every transaction open now), waiting at
    most ``timeout_s`` for those transactions to end."""

    def __init__(self, sink: KafkaSink, timeout_s: float | None) -> None:
        from confluent_kafka import Consumer

        self.sink, self.timeout_s = sink, _marker_wait_s(sink) if timeout_s is None else timeout_s
        self.consumer = Consumer(client_config(sink.bootstrap_servers, sink.options, **{
            "group.id": "sparkstate-markers", "enable.auto.commit": False, "isolation.level": "read_committed",
            "auto.offset.reset": "earliest", "allow.auto.create.topics": False}))

    def __enter__(self) -> _MarkerReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.consumer.close()

    def partitions(self) -> Iterator[tuple[Any, int, int]]:
        """(partition, earliest offset, end) of each partition of the marker topic that holds records."""
        from confluent_kafka import KafkaException, TopicPartition

        servers = self.sink.bootstrap_servers
        parts = topic_partitions(self.consumer, self.sink.marker_topic, servers, "reading the batch markers", SinkError)
        for part in parts or ():
            tp = TopicPartition(self.sink.marker_topic, part)
            try:
                low, end = _high_watermark(self.sink, tp)
            except KafkaException as exc:
                raise SinkError(unreachable(servers, "reading the batch markers", exc)) from None
            if end > low:
                yield tp, low, end

    def batches(self, tp: Any, start: int, end: int) -> Iterator[list[Any]]:
        """The committed records (librdkafka's messages) of offsets ``[start, end)`` of
        partition ``tp``, in offset order, as they arrive: a list at a time, so that a caller
        does as little per record as it can (a start-up read may meet millions)."""
        from confluent_kafka import TopicPartition

        self.consumer.assign([TopicPartition(tp.topic, tp.partition, start)])
        deadline = time.monotonic() + self.timeout_s
        pos = start
        while pos < end:
            # a short wait: control records (a commit's marker) hold offsets and deliver no message,
            # so a read of the offsets left may never see as many messages as it asks for
            msgs = self.consumer.consume(min(100_000, end - pos), timeout=0.05)
            if msgs:
                if any(m.error() is not None for m in msgs):
                    msgs = [m for m in msgs if m.error() is None]
                while msgs and (msgs[-1].offset() or 0) >= end:
                    msgs.pop()
                if msgs:
                    pos = max(pos, (msgs[-1].offset() or 0) + 1)
                    yield msgs
            if pos < end:
                pos = max(pos, self.consumer.position([tp])[0].offset)
                if pos < end and time.monotonic() > deadline:
                    raise SinkError(
                        f"the batch markers in topic {self.sink.marker_topic!r} on Kafka at "
                        f"{mask(self.sink.bootstrap_servers)} stay unreadable past offset {pos} for "
                        f"{self.timeout_s:.0f} s: a transaction there is still open. The broker aborts it after its "
                        "transaction timeout; run again then"
                    )


def _marker_batch(value: bytes | None, sink: KafkaSink) -> int | None:
    """The batch id of one marker record of ``sink``'s writer (None: a reset)."""
    try:
        batch = json.loads(value or b"{}").get("batch")
    except (ValueError, AttributeError):
        batch = "?"
    if batch is None or (isinstance(batch, int) and not isinstance(batch, bool)):
        return batch
    raise SinkError(
        f"topic {sink.marker_topic!r} on Kafka at {mask(sink.bootstrap_servers)} holds a marker of writer "
        f"{sink.marker!r} that sparkstate did not write ({(value or b'')[:200]!r}): only sparkstate may write to "
        "its marker topic. Give the sink another marker_topic, or remove that topic if nothing else is in it"
    )


def _high_watermark(sink: KafkaSink, tp: Any) -> tuple[int, int]:
    from confluent_kafka import Consumer

    c = Consumer(client_config(sink.bootstrap_servers, sink.options, **{
        "group.id": "sparkstate-markers", "isolation.level": "read_uncommitted", "allow.auto.create.topics": False}))
    try:
        low, high = c.get_watermark_offsets(tp, timeout=METADATA_TIMEOUT_S)
        return int(low), int(high)
    finally:
        c.close()


def _topics(sinks: list[KafkaSink]) -> None:
    """Each sink's topic there (or created when it asks), and the marker topics; every
    missing topic named in one error."""
    missing: list[str] = []
    servers = sinks[0].bootstrap_servers
    for sink in sinks:  # a side output's sink may write to another cluster
        absent = _ensure(sink, [(sink.topic, sink.partitions, sink.create_topics)]
                         + ([(sink.marker_topic, 1, True)] if sink.transactional else []))
        if absent and not missing:
            servers = sink.bootstrap_servers
        missing += [t for t in absent if t not in missing]
    if missing:
        raise SinkError(_missing_message(missing, servers))


def prepare(sinks: list[KafkaSink], last_committed: int | None, parts: Mapping[str, int] | None = None) -> None:
    """Check a job's Kafka writers before its first batch: topics there (or created), every
    part's producer initialised (zombies fenced) and each writer's markers agreeing with the
    checkpoint (``last_committed``: its last committed batch id, or None). ``parts``: the
    parts of each writer (by ``marker``) that its tasks write (default one, the driver)."""
    if not sinks:
        return
    parts = parts or {}
    exact = [s for s in sinks if s.transactional]
    for sink in exact:
        _check_transaction_timeout(sink)
    _topics(sinks)
    with _lock:  # each run its own producers: one kept from an earlier run may have been fenced since
        stale = [_producers.pop(s.transactional_id(i), None) for s in exact for i in range(parts.get(s.marker, 1))]
    for p in stale:
        if p is not None:
            p.flush(0)
    for sink in exact:  # all fenced before any marker is read: none of them holds a transaction open
        for i in range(parts.get(sink.marker, 1)):
            _producer(sink, i)
    for sink in exact:
        tops = read_part_tops(sink)
        top = _highest(tops)
        if top is not None and (last_committed is None or top > last_committed + 1):
            have = "has committed no batch" if last_committed is None else f"has committed batches up to {last_committed}"
            raise SinkError(
                f"topic {sink.marker_topic!r} on Kafka at {mask(sink.bootstrap_servers)} holds markers up to batch {top} "
                f"of writer {sink.marker!r} (topic {sink.topic!r}), but the checkpoint {have}: they came from another "
                "checkpoint, and this run's batches with the same ids would be skipped as written. Start over with "
                "`sparkstate run --fresh` (Job.run(fresh=True)), which resets the writer's markers, give this run "
                "another writer name (KafkaSink(..., job=...), in a URL &job=...) or write to another topic"
            )
        with _lock:
            _tops[sink.marker] = tops
        if sink.marker in parts:  # its tasks write: each task's producer fences the driver's
            for i in range(parts[sink.marker]):
                with _lock:
                    p = _producers.pop(sink.transactional_id(i), None)
                if p is not None:
                    p.flush(0)


def reset(sink: KafkaSink, restored_ids: tuple[str | None, ...] = (), parts: int = 1) -> str | None:
    """Forget the batches of ``sink``'s writer and of its writers restored from the savepoints
    ``restored_ids`` (None: the writer of a checkpoint that was not restored), for
    ``sparkstate run --fresh``: a marker record ``{"batch": null, "reset": true}`` per writer,
    in a transaction of the writer's own (after fencing its ``parts`` parts and those its
    markers name: no run of it still writing holds a transaction open). Returns the note that
    the topic's records stay, or None when the sink's topic has none.

    A Kafka topic's records cannot be deleted: the new run writes its batches again after
    them, and readers of the whole topic see both runs' records."""
    from dataclasses import replace

    from confluent_kafka import KafkaException

    if not sink.transactional:
        return _kept_note(sink, _records_in(sink))
    admin = _admin(sink)
    if topic_partitions(admin, sink.marker_topic, sink.bootstrap_servers, "resetting the batch markers",
                        SinkError) is not None:
        writers = {w.marker: w for w in (replace(sink, restored_from=i) for i in (sink.restored_from, *restored_ids))}
        for _, writer in sorted(writers.items()):
            for i in range(parts):
                _producer(writer, i)  # first: a run of it still writing holds no transaction open any more
            tops = read_part_tops(writer)
            for i in tops:
                _producer(writer, i)
            written = sorted(i for i, t in tops.items() if t is not None)
            if not written:
                continue
            p = _producer(writer)
            try:
                p.begin_transaction()
                for i in written:
                    marker = json.dumps({"writer": writer.writer(i), "batch": None, "reset": True, "topic": writer.topic})
                    p.produce(writer.marker_topic, marker.encode(), writer.writer(i).encode())
                p.commit_transaction(COMMIT_TIMEOUT_S)
            except KafkaException as exc:
                _drop_producer(writer, p)
                raise SinkError(unreachable(writer.bootstrap_servers, f"resetting the markers of writer "
                                                                      f"{writer.marker!r}", exc)) from None
            with _lock:
                _tops[writer.marker] = dict.fromkeys(tops)
    return _kept_note(sink, _records_in(sink))


def check_reachable(sink: KafkaSink) -> None:
    """Raise a :class:`SinkError` naming the servers when ``sink``'s broker does not answer
    (``--fresh`` checks every sink before it resets any)."""
    topic_partitions(_admin(sink), sink.topic, sink.bootstrap_servers, f"looking at topic {sink.topic!r}", SinkError)


def _records_in(sink: KafkaSink) -> int:
    """Records (and transaction markers) in ``sink``'s topic: 0 when it has none or does not exist."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer(client_config(sink.bootstrap_servers, sink.options, **{
        "group.id": "sparkstate-markers", "allow.auto.create.topics": False}))
    try:
        parts = topic_partitions(c, sink.topic, sink.bootstrap_servers, f"looking at topic {sink.topic!r}", SinkError)
        total = 0
        for part in parts or ():
            try:
                low, high = c.get_watermark_offsets(TopicPartition(sink.topic, part), timeout=METADATA_TIMEOUT_S)
            except KafkaException as exc:
                raise SinkError(unreachable(sink.bootstrap_servers, f"looking at topic {sink.topic!r}", exc)) from None
            total += max(0, int(high) - int(low))
        return total
    finally:
        c.close()


def _kept_note(sink: KafkaSink, records: int) -> str | None:
    if not records:
        return None
    return (f"--fresh kept the records of topic {sink.topic!r} on Kafka at {mask(sink.bootstrap_servers)}: a Kafka "
            "topic's records cannot be deleted. This run writes its batches again after them, so readers of the "
            "whole topic see the earlier run's records too; write to a new topic, or delete and recreate this one "
            "with your Kafka tools, if they must not")


def _max_bytes(sink: KafkaSink) -> int:
    value = sink.options.get("message.max.bytes")
    return int(value) if value else DEFAULT_MAX_RECORD_BYTES


def _produce_all(p: Any, topic: str, values: list[bytes], keys: list[bytes | None], skip: set[int]) -> int:
    n = 0
    for i, (v, k) in enumerate(zip(values, keys)):
        if i in skip:
            continue
        while True:
            try:
                p.produce(topic, v, k)
                break
            except BufferError:
                p.poll(0.05)
        n += 1
        if n % 10_000 == 0:
            p.poll(0)
    return n


def _records(sink: KafkaSink, data: pa.Table | pa.RecordBatch) -> tuple[list[bytes], list[bytes | None], set[int], list[dict]]:
    """``data``'s rows as records (values, keys), the rows refused (a dead letter each) by index."""
    values, keys, dead = encode(data, tuple(sink.key))
    limit = _max_bytes(sink) - 512  # room for the record's own framing
    refused = {i for i, d in enumerate(values) if not d}
    for i, v in enumerate(values):
        if len(v) > limit and i not in refused:
            refused.add(i)
            dead.append({"raw": v[:1000].decode("utf-8", "replace") + "...",
                         "reason": f"row {i} is {len(v):,} bytes as a record, more than the sink's record limit "
                                   f"({limit:,} bytes; librdkafka's message.max.bytes)"})
    return values, keys, refused, dead


def _failure(
    sink: KafkaSink, p: Any, exc: BaseException, batch_id: int, part: int, clock: _Clock | None = None
) -> SinkError | None:
    """After ``exc`` in part ``part``'s transaction: the transaction aborted (or left to the
    broker's timeout) and the error to raise (None: ``exc`` is not Kafka's, raise it).

    A transaction open longer than its timeout is aborted (by the sink before its commit, or
    by the broker, which then takes the producer for an old one: Apache Kafka bumps its epoch
    and librdkafka says "fenced"): the error says so, and how to give batches more time, since
    a replay takes as long."""
    from confluent_kafka import KafkaError, KafkaException

    open_ms = clock.open_ms() if clock is not None else 0.0
    err: Any = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    code = err.code() if err is not None and hasattr(err, "code") else None
    fatal = bool(err is not None and hasattr(err, "fatal") and err.fatal())
    fenced = code in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH) or (
        fatal and "fenced" in str(err.str() if hasattr(err, "str") else err).lower())
    if not fatal:
        try:  # what the batch wrote stays invisible to read_committed readers either way
            p.abort_transaction(METADATA_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - the broker aborts it after its timeout
            pass
    if not isinstance(exc, KafkaException):
        return None
    timeout = transaction_timeout_ms(sink)
    if open_ms >= timeout:
        return SinkError(
            f"the transaction of batch {batch_id} of writer {sink.writer(part)!r} (topic {sink.topic!r}) on Kafka at "
            f"{mask(sink.bootstrap_servers)} is aborted: it stayed open {open_ms / 1000:.1f} s, longer "
            f"than the sink's transaction.timeout.ms={timeout} ({timeout / 1000:g} s; {reason(exc)}). Nothing of the "
            "batch is visible to read_committed readers, and a replay of it takes as long. Give the sink's batches "
            f"more time, above the longest batch (and a restart's downtime): KafkaSink(..., options="
            f"{{'{TRANSACTION_TIMEOUT}': N}}) (in a URL &{TRANSACTION_TIMEOUT}=N), at most the broker's "
            "transaction.max.timeout.ms (15 minutes by default), or make the batches smaller"
        )
    if fenced:
        return SinkError(
            f"writer {sink.writer(part)!r} of topic {sink.topic!r} was fenced off by a newer run of the same job (the "
            f"same transactional.id): this run is a zombie, and it did not commit batch {batch_id}. Only one run of a "
            "job may write"
        )
    return SinkError(
        f"writing batch {batch_id} to topic {sink.topic!r} on Kafka at {mask(sink.bootstrap_servers)} failed: "
        f"{reason(exc)}. Its transaction is aborted (or the broker aborts it): nothing of the batch is visible to "
        "read_committed readers, and the next run writes it again"
    )


class _Clock:
    """When a transaction's first record was sent: the broker's timeout runs from then."""

    def __init__(self) -> None:
        self.started: float | None = None

    def start(self) -> None:
        if self.started is None:
            self.started = time.monotonic()

    def open_ms(self) -> float:
        return 0.0 if self.started is None else (time.monotonic() - self.started) * 1000


def _transaction(
    p: Any, sink: KafkaSink, part: int, batch_id: int, chunks: Iterable[tuple[list, list, set]], clock: _Clock
) -> int:
    """One part's batch in one transaction: its records, then its marker; committed."""
    from confluent_kafka import KafkaError, KafkaException

    timeout = transaction_timeout_ms(sink)

    def within_timeout() -> None:
        # past its timeout a transaction is aborted, by Apache Kafka's coordinator (on its next
        # sweep, every 10 s) or here: its outcome does not hang on when the sweep runs
        if clock.open_ms() >= timeout:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "aborted by the sink past the transaction timeout"))

    p.begin_transaction()  # librdkafka's own: the broker hears of the transaction with its first record
    written = 0
    for values, keys, refused in chunks:  # the rows as the task computes them: a slow step holds it open
        clock.start()
        written += _produce_all(p, sink.topic, values, keys, refused)
        within_timeout()
    clock.start()
    marker = json.dumps({"writer": sink.writer(part), "batch": batch_id, "rows": written, "topic": sink.topic})
    p.produce(sink.marker_topic, marker.encode(), sink.writer(part).encode())
    if p.flush(COMMIT_TIMEOUT_S):  # the records at the broker, in the open transaction
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"records still unsent after {COMMIT_TIMEOUT_S:.0f} s"))
    fault_point(SINK_ROWS_WRITTEN)
    within_timeout()
    p.commit_transaction(COMMIT_TIMEOUT_S)
    if clock.open_ms() > timeout / 2:
        log.warning(
            "batch %s of writer %r stayed open %.1f s, more than half the sink's transaction.timeout.ms=%s: a "
            "slower batch is aborted by the broker. Raise the sink's %s, or make batches smaller",
            batch_id, sink.writer(part), clock.open_ms() / 1000, timeout, TRANSACTION_TIMEOUT)
    return written


def commit_batch(sink: KafkaSink, data: pa.Table, batch_id: int) -> BatchOutcome:
    """Write micro-batch ``batch_id`` from the driver, as part 0 of ``sink``'s writer
    (exactly-once: in one transaction with its marker; a batch already committed writes nothing)."""
    values, keys, refused, dead = _records(sink, data)
    if not sink.transactional:
        return _write_at_least_once(sink, [(values, keys, refused)], dead, batch_id)
    with _lock:
        known = sink.marker in _tops
        top = (_tops.get(sink.marker) or {}).get(0)
    if not known:  # not prepared by this run (a sink bound late): fence, then read its last marker
        _topics([sink])
        _producer(sink)
        tops = read_part_tops(sink)
        top = tops.get(0)
        with _lock:
            _tops[sink.marker] = tops
    if top is not None and batch_id <= top:
        return BatchOutcome(None, dead)
    p = _producer(sink)
    clock = _Clock()
    try:
        written = _transaction(p, sink, 0, batch_id, [(values, keys, refused)], clock)
    except BaseException as exc:
        _drop_producer(sink, p)
        error = _failure(sink, p, exc, batch_id, 0, clock)
        if error is None:
            raise
        raise error from None
    with _lock:
        _tops.setdefault(sink.marker, {})[0] = batch_id
    return BatchOutcome(written, dead)


def write_part(sink: KafkaSink, part: int, batch_id: int, data: Iterable[pa.RecordBatch]) -> list[dict]:
    """Write part ``part`` of micro-batch ``batch_id`` (the rows of one partition, in the task
    that computed them); returns the dead letters of rows that cannot be records.

    Exactly-once: a producer of the part's own ``transactional.id`` for this task (which
    fences every earlier one: an earlier attempt of the task, a zombie run), then the part's
    last marker (:func:`read_part_top`; a task retried by Spark, or a batch replayed after a
    crash, may find its part written), then the batch with its marker in one transaction.
    At-least-once: records flushed, no marker."""
    dead: list[dict] = []

    def records() -> Iterator[tuple[list, list, set]]:  # encoded as the rows arrive
        for b in data:
            if b.num_rows:
                values, keys, refused, row_dead = _records(sink, b)
                dead.extend(row_dead)
                yield values, keys, refused

    if not sink.transactional:
        _write_at_least_once(sink, records(), dead, batch_id)
        return dead
    p = _new_transactional(sink, part)
    try:
        top = read_part_top(sink, part)
        if top is not None and batch_id <= top:
            for _ in records():  # written by an earlier attempt: its dead letters are the batch's all the same
                pass
            return dead
        clock = _Clock()
        try:
            _transaction(p, sink, part, batch_id, records(), clock)
        except BaseException as exc:
            error = _failure(sink, p, exc, batch_id, part, clock)
            if error is None:
                raise
            raise error from None
        return dead
    finally:
        try:
            p.flush(0)
        except Exception:  # noqa: BLE001 - a fenced or failed producer: the error above says so
            pass


def _write_at_least_once(
    sink: KafkaSink, records: Iterable[tuple[list, list, set]], dead: list[dict], batch_id: int
) -> BatchOutcome:
    """The records flushed by this process's plain producer of ``sink`` (kept between batches)."""
    from confluent_kafka import Producer

    with _lock:
        failures = _failures.setdefault(sink.marker, [])
        failures.clear()
        p = _producers.get(sink.marker)
        if p is None:

            def delivered(err: Any, msg: Any) -> None:
                if err is not None:
                    failures.append(err.str())

            p = _producers[sink.marker] = Producer(_producer_config(sink, on_delivery=delivered))
    written = sum(_produce_all(p, sink.topic, values, keys, refused) for values, keys, refused in records)
    left = p.flush(COMMIT_TIMEOUT_S)
    if left or failures:
        _drop_producer(sink, p, key=sink.marker)
        why = failures[0] if failures else f"{left} records still unsent after {COMMIT_TIMEOUT_S:.0f} s"
        raise SinkError(
            f"writing batch {batch_id} to topic {sink.topic!r} on Kafka at {mask(sink.bootstrap_servers)} failed: "
            f"{mask(why)}. The batch is not committed; the next run writes it again (at-least-once: records that "
            "did reach the broker are written twice)"
        )
    return BatchOutcome(written, dead)


def close_all() -> None:
    """Flush and forget this process's producers and what it learnt of the brokers (the end of a run)."""
    with _lock:
        producers = list(_producers.values())
        _producers.clear()
        _tops.clear()
        _broker_max_timeouts.clear()
        _checked_marker_topics.clear()
    for p in producers:
        try:
            p.flush(5)
        except Exception:  # noqa: BLE001 - closing: nothing left to report
            pass
