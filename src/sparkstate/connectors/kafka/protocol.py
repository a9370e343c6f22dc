"""The transactional Kafka sink's protocol: exactly-once writes of micro-batches.

Spark runs a micro-batch whose commit it did not record again after a restart, with the same
batch id. So each batch of each writer (``KafkaSink.marker``: the job and the topic) is one
Kafka transaction holding the batch's records and a marker record in ``sparkstate_batches``
(key: the writer; value: the batch id and its row count):

1. a run starts by initialising its writers' producers under their ``transactional.id``,
   which is the same in every run: the broker fences off any earlier producer of that id (a
   zombie run still writing cannot commit any more) and aborts what it left open; then it
   reads the writer's last marker with ``read_committed``;
2. a batch at or below that marker was committed by an earlier attempt: it writes nothing;
3. any other batch begins a transaction, produces its records and its marker, and commits:
   both become visible to ``read_committed`` readers together, or neither does.

Reading the markers waits for every transaction open on the marker topic at the time of the
read to end (a reader with ``read_committed`` cannot pass an open transaction): a marker
committed earlier is then always found, whatever other writers are doing.

Before anything is sent, a row whose record the broker would refuse on every attempt (larger
than the producer's ``message.max.bytes``) is taken out of the batch as a dead letter, so a
batch never fails over and over on one row.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from sparkstate.connectors.database.protocol import BatchOutcome
from sparkstate.connectors.kafka.client import METADATA_TIMEOUT_S, client_config, mask, reason, topic_partitions, unreachable
from sparkstate.connectors.kafka.records import encode
from sparkstate.connectors.kafka.sink import KafkaSink
from sparkstate.errors import SinkError
from sparkstate.fault_points import SINK_ROWS_WRITTEN, fault_point

log = logging.getLogger("sparkstate.sinks")

#: milliseconds a transaction may stay open before the broker aborts it (a run killed mid-batch)
TRANSACTION_TIMEOUT_MS = 60_000
#: seconds a commit (or a flush of an at-least-once batch) may take
COMMIT_TIMEOUT_S = 120.0
#: the largest record sent (librdkafka's default message.max.bytes); larger rows are dead letters
DEFAULT_MAX_RECORD_BYTES = 1_000_000

_lock = threading.Lock()
#: this process's producer per transactional id (initialised once: initialising again would fence itself)
_producers: dict[str, Any] = {}
#: the last batch each writer committed, as read at prepare time and advanced by each commit
_tops: dict[str, int | None] = {}
#: delivery failures of each at-least-once writer's current batch
_failures: dict[str, list[str]] = {}


def _admin(sink: KafkaSink) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_config(sink.bootstrap_servers, sink.options))


def ensure_topics(sink: KafkaSink, topics: Iterable[tuple[str, int, bool]]) -> None:
    """Check that each ``(topic, partitions, create)`` exists, creating it when ``create``."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    admin = _admin(sink)
    missing = []
    for topic, partitions, create in topics:
        if topic_partitions(admin, topic, sink.bootstrap_servers, f"checking topic {topic!r}", SinkError) is not None:
            continue
        if not create:
            missing.append(topic)
            continue
        try:
            admin.create_topics([NewTopic(topic, partitions)], operation_timeout=METADATA_TIMEOUT_S)[topic].result()
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
                raise SinkError(
                    f"cannot create topic {topic!r} on Kafka at {mask(sink.bootstrap_servers)}: {reason(exc)}"
                ) from None
    if missing:
        names = ", ".join(repr(t) for t in missing)
        raise SinkError(
            f"topic{'s' if len(missing) > 1 else ''} {names} do{'' if len(missing) > 1 else 'es'} not exist on Kafka at "
            f"{mask(sink.bootstrap_servers)}. Create {'them' if len(missing) > 1 else 'it'} (with your Kafka tools), or "
            "let the sink create the topics it writes: KafkaSink(..., create_topics=True) (in a URL: &create=true)"
        )


def _producer(sink: KafkaSink) -> Any:
    """This process's transactional producer of ``sink``'s writer, initialised (fencing off
    any earlier producer of its ``transactional.id``)."""
    from confluent_kafka import KafkaException, Producer

    with _lock:
        p = _producers.get(sink.transactional_id)
        if p is not None:
            return p
        p = Producer(_producer_config(sink, **{"transactional.id": sink.transactional_id,
                                               "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS}))
        try:
            p.init_transactions(METADATA_TIMEOUT_S)
        except KafkaException as exc:
            doing = f"starting the transactions of writer {sink.marker!r}"
            raise SinkError(unreachable(sink.bootstrap_servers, doing, exc)) from None
        _producers[sink.transactional_id] = p
        return p


def _producer_config(sink: KafkaSink, **settings: Any) -> dict[str, Any]:
    base = {"linger.ms": 5, "partitioner": "murmur2_random", "queue.buffering.max.messages": 1_000_000,
            "enable.idempotence": True}
    config = client_config(sink.bootstrap_servers, {**base, **sink.options})
    config.update(settings)
    return config


def _drop_producer(sink: KafkaSink) -> None:
    with _lock:
        _producers.pop(sink.transactional_id, None)
        _tops.pop(sink.marker, None)


def read_top_marker(sink: KafkaSink, timeout_s: float = TRANSACTION_TIMEOUT_MS / 1000 + 30) -> int | None:
    """The last batch ``sink``'s writer committed (None: none), from the marker topic read
    with ``read_committed`` up to its end as of now (waiting for transactions open now)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    servers = sink.bootstrap_servers
    consumer = Consumer(client_config(servers, sink.options, **{
        "group.id": "sparkstate-markers", "enable.auto.commit": False, "isolation.level": "read_committed",
        "auto.offset.reset": "earliest", "allow.auto.create.topics": False}))
    try:
        parts = topic_partitions(consumer, sink.marker_topic, servers, "reading the batch markers", SinkError)
        if not parts:
            return None
        top: int | None = None
        for part in parts:
            tp = TopicPartition(sink.marker_topic, part)
            try:
                # read_uncommitted's end: every transaction open now lies below it
                low, end = _high_watermark(sink, tp)
            except KafkaException as exc:
                raise SinkError(unreachable(servers, "reading the batch markers", exc)) from None
            if end <= low:
                continue
            consumer.assign([TopicPartition(sink.marker_topic, part, low)])
            deadline = time.monotonic() + timeout_s
            pos = low
            while pos < end:
                for msg in consumer.consume(10_000, timeout=0.5):
                    if msg.error() is not None:
                        continue
                    pos = max(pos, (msg.offset() or 0) + 1)
                    if msg.key() == sink.marker.encode():
                        batch = json.loads(msg.value() or b"{}")["batch"]
                        top = batch if top is None else max(top, batch)
                if pos < end:
                    at = consumer.position([tp])[0].offset
                    pos = max(pos, at)
                    if pos < end and time.monotonic() > deadline:
                        raise SinkError(
                            f"the batch markers in topic {sink.marker_topic!r} on Kafka at {mask(servers)} stay "
                            f"unreadable past offset {pos} for {timeout_s:.0f} s: a transaction there is still open. "
                            "The broker aborts it after its transaction timeout; run again then"
                        )
        return top
    finally:
        consumer.close()


def _high_watermark(sink: KafkaSink, tp: Any) -> tuple[int, int]:
    from confluent_kafka import Consumer

    c = Consumer(client_config(sink.bootstrap_servers, sink.options, **{
        "group.id": "sparkstate-markers", "isolation.level": "read_uncommitted", "allow.auto.create.topics": False}))
    try:
        low, high = c.get_watermark_offsets(tp, timeout=METADATA_TIMEOUT_S)
        return int(low), int(high)
    finally:
        c.close()


def prepare(sinks: list[KafkaSink], last_committed: int | None) -> None:
    """Check a job's Kafka writers before its first batch: topics there (or created), the
    transactional producers initialised (zombies fenced) and each writer's markers agreeing
    with the checkpoint (``last_committed``: its last committed batch id, or None)."""
    if not sinks:
        return
    for sink in sinks:  # a side output's sink may write to another cluster
        ensure_topics(sink, [(sink.topic, sink.partitions, sink.create_topics)]
                      + ([(sink.marker_topic, 1, True)] if sink.transactional else []))
    exact = [s for s in sinks if s.transactional]
    for sink in exact:  # all fenced before any marker is read: none of them holds a transaction open
        _producer(sink)
    for sink in exact:
        top = read_top_marker(sink)
        if top is not None and (last_committed is None or top > last_committed + 1):
            have = "has committed no batch" if last_committed is None else f"has committed batches up to {last_committed}"
            raise SinkError(
                f"topic {sink.marker_topic!r} on Kafka at {mask(sink.bootstrap_servers)} holds markers up to batch {top} "
                f"of writer {sink.marker!r} (topic {sink.topic!r}), but the checkpoint {have}: they came from another "
                "checkpoint, and this run's batches with the same ids would be skipped as written. Give this run "
                "another writer name (KafkaSink(..., job=...), in a URL &job=...) or write to another topic"
            )
        with _lock:
            _tops[sink.marker] = top


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


def commit_batch(sink: KafkaSink, data: pa.Table, batch_id: int) -> BatchOutcome:
    """Write micro-batch ``batch_id`` (exactly-once: in one transaction with its marker; a
    batch already committed writes nothing)."""
    from confluent_kafka import KafkaError, KafkaException

    values, keys, dead = encode(data, tuple(sink.key))
    limit = _max_bytes(sink) - 512  # room for the record's own framing
    refused = {i for i, d in enumerate(values) if not d}
    for i, v in enumerate(values):
        if len(v) > limit and i not in refused:
            refused.add(i)
            dead.append({"raw": v[:1000].decode("utf-8", "replace") + "...",
                         "reason": f"row {i} is {len(v):,} bytes as a record, more than the sink's record limit "
                                   f"({limit:,} bytes; librdkafka's message.max.bytes)"})
    if not sink.transactional:
        return _write_at_least_once(sink, values, keys, refused, dead, batch_id)
    with _lock:
        known = sink.marker in _tops
        top = _tops.get(sink.marker)
    if not known:
        prepare([sink], None if top is None else top)
        with _lock:
            top = _tops.get(sink.marker)
    if top is not None and batch_id <= top:
        return BatchOutcome(None, dead)
    p = _producer(sink)
    try:
        p.begin_transaction()
        written = _produce_all(p, sink.topic, values, keys, refused)
        marker = json.dumps({"writer": sink.marker, "batch": batch_id, "rows": written, "topic": sink.topic})
        p.produce(sink.marker_topic, marker.encode(), sink.marker.encode())
        fault_point(SINK_ROWS_WRITTEN)
        p.commit_transaction(COMMIT_TIMEOUT_S)
    except BaseException as exc:
        err: Any = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
        code = err.code() if err is not None and hasattr(err, "code") else None
        fenced = code in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH) or bool(
            err is not None and hasattr(err, "fatal") and err.fatal())
        if not fenced:
            try:  # what the batch wrote stays invisible to read_committed readers either way
                p.abort_transaction(METADATA_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - the broker aborts it after its timeout
                pass
        _drop_producer(sink)
        if not isinstance(exc, KafkaException):
            raise
        if fenced:
            raise SinkError(
                f"writer {sink.marker!r} of topic {sink.topic!r} was fenced off by a newer run of the same job (the same "
                f"transactional.id): this run is a zombie, and it did not commit batch {batch_id}. Only one run of a "
                "job may write"
            ) from None
        raise SinkError(
            f"writing batch {batch_id} to topic {sink.topic!r} on Kafka at {mask(sink.bootstrap_servers)} failed: "
            f"{reason(exc)}. Its transaction is aborted (or the broker aborts it): nothing of the batch is visible to "
            "read_committed readers, and the next run writes it again"
        ) from None
    with _lock:
        _tops[sink.marker] = batch_id
    return BatchOutcome(written, dead)


def _write_at_least_once(
    sink: KafkaSink, values: list[bytes], keys: list[bytes | None], refused: set[int], dead: list[dict], batch_id: int
) -> BatchOutcome:
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
    written = _produce_all(p, sink.topic, values, keys, refused)
    left = p.flush(COMMIT_TIMEOUT_S)
    if left or failures:
        _drop_producer(sink)
        why = failures[0] if failures else f"{left} records still unsent after {COMMIT_TIMEOUT_S:.0f} s"
        raise SinkError(
            f"writing batch {batch_id} to topic {sink.topic!r} on Kafka at {mask(sink.bootstrap_servers)} failed: "
            f"{mask(why)}. The batch is not committed; the next run writes it again (at-least-once: records that "
            "did reach the broker are written twice)"
        )
    return BatchOutcome(written, dead)


def close_all() -> None:
    """Flush and forget this process's producers (the end of a run)."""
    with _lock:
        producers = list(_producers.values())
        _producers.clear()
        _tops.clear()
    for p in producers:
        try:
            p.flush(5)
        except Exception:  # noqa: BLE001 - closing: nothing left to report
            pass
