"""Reading a Kafka source: where micro-batches start and end (on the driver) and the records
of one partition's offset range as events (in Spark's Python workers).

Offsets are ``{topic: {partition: offset}}`` with partitions as strings (they travel as
JSON in Spark's offset log); an offset is the next record to read. A micro-batch reads, per
partition, the records from its start offset up to (not including) its end offset, so a
replayed batch reads exactly what its first attempt read.

Invariants:

* an end offset never passes a partition's last stable offset (``read_committed``): every
  record below it belongs to a decided transaction, so a range reads the same records
  whenever it is read;
* a start offset below the partition's earliest offset (retention deleted records the job
  never read) is an error naming the records lost, never a silent skip; so is one above the
  partition's end (the topic was created again, or starting offsets point past it), which
  would otherwise skip the records that arrive below it;
* offsets of a topic that was deleted and created again since they were logged are refused
  even when the new topic holds more records than they skip: every offset Spark logs carries
  each topic's id (Kafka's topic id, a UUID the broker gives a topic when it creates it), and
  a topic whose id is no longer that one is a different topic;
* a partition that appears between two batches starts at offset 0 (its first record), in
  every batch that reads it, so replays agree.

A broker that is down or lost is reported within seconds (:data:`DOWN_GRACE_S` after
librdkafka finds every broker unreachable), on the driver and in a reading task alike, as a
:class:`SourceError` naming the servers; the batch it stops commits nothing.

No pyspark here: the unit tests run it against the broker without Spark.
"""

from __future__ import annotations

import bisect
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from sparkstate.connectors.credentials import mask
from sparkstate.connectors.kafka.client import METADATA_TIMEOUT_S, client_config, topic_partitions, unreachable
from sparkstate.errors import SourceError

Offsets = dict[str, dict[str, int]]

#: seconds a partition's range may make no progress before its read fails (a lost broker)
READ_TIMEOUT_S = 30.0
#: seconds every broker may stay unreachable (librdkafka says "all brokers down": connections
#: refused or lost) before a metadata request or a read gives up, rather than waiting for
#: :data:`METADATA_TIMEOUT_S` or ``READ_TIMEOUT_S``: a broker that is down is reported in seconds
DOWN_GRACE_S = 2.0
#: seconds one metadata request waits while the broker is probed
PROBE_S = 0.5
#: records handed on per Arrow batch while a range is read
CHUNK = 100_000
#: librdkafka's fetch settings for reading a range (a user's options override them): answers of
#: up to 16 MB a partition (the default, 1 MB, is about 8,000 records of 120 bytes: a round trip
#: to the broker each), and two chunks fetched ahead of the one the task parses (at most 128 MB)
FETCH_SETTINGS = {"max.partition.fetch.bytes": 16 << 20, "fetch.max.bytes": 64 << 20,
                  "queued.min.messages": 2 * CHUNK, "queued.max.messages.kbytes": 128 << 10}


class _Down:
    """librdkafka's error callback: remembers when it last said that no broker is reachable
    (its other errors are retried by the client and reach the caller as a failed request)."""

    def __init__(self) -> None:
        self.since: float | None = None

    def __call__(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        if err.code() == KafkaError._ALL_BROKERS_DOWN and self.since is None:
            self.since = time.monotonic()

    def reset(self) -> None:
        self.since = None

    def for_over(self, seconds: float) -> bool:
        return self.since is not None and time.monotonic() - self.since >= seconds


def consumer_config(servers: str, options: Mapping[str, Any], group: str, down: _Down | None = None) -> dict[str, Any]:
    """A consumer that reads only what it is told (offsets live in the checkpoint, not the group)."""
    extra: dict[str, Any] = {} if down is None else {"error_cb": down}
    return client_config(
        servers, options,
        **{"group.id": group, "enable.auto.commit": False, "enable.auto.offset.store": False,
           "isolation.level": "read_committed", "auto.offset.reset": "error",
           "allow.auto.create.topics": False, "enable.partition.eof": False},
        **extra,
    )


def _retention_error(servers: str, topic: str, part: int | str, start: int, low: int) -> SourceError:
    return SourceError(
        f"Kafka at {mask(servers)} no longer holds records {start} to {low - 1} of topic {topic!r} partition {part} "
        f"(its earliest offset is now {low}; retention deleted them before this job read them). They cannot be "
        "read, and sparkstate does not skip them silently. Either start a new checkpoint (`sparkstate run --fresh`, "
        "or another checkpoint directory) with starting='earliest' to read what the broker still holds, or keep "
        "records longer (the topic's retention.ms) so that a stopped job finds them"
    )


def recreated_error(servers: str, topic: str, why: str, where: str, offsets: Mapping[str, int]) -> SourceError:
    """The error of offsets kept for a topic that has since been deleted and created again."""
    at = ", ".join(f"partition {p} at {o}" for p, o in sorted(offsets.items(), key=lambda i: int(i[0])))
    return SourceError(
        f"topic {topic!r} on Kafka at {mask(servers)} was deleted and created again since {where} read it ({why}). "
        f"The offsets kept there ({at or 'none'}) belong to the old topic: reading "
        "on from them would skip the new topic's first records silently. Either start a new checkpoint (`sparkstate "
        "run --fresh`, or another checkpoint directory) with `starting=` set to where the new topic is to be read "
        "from, or keep the job's state and say where the new topic is read from with "
        "KafkaSource(..., starting_if_recreated='earliest') (or 'latest', a time, offsets)"
    )


def _behind_error(servers: str, topic: str, part: int | str, start: int, high: int) -> SourceError:
    return SourceError(
        f"topic {topic!r} partition {part} on Kafka at {mask(servers)} ends at offset {high}, before offset {start} "
        "where this job is to read on: the topic was deleted and created again, or the starting offsets point past "
        "its end. Reading on would skip the records up to it silently. Start a new checkpoint (`sparkstate run "
        "--fresh`, or another checkpoint directory), with starting offsets within the partition's records"
    )


class OffsetBook:
    """The driver's view of a source's topics: partitions, their readable ends and earliest
    offsets (one consumer, never assigned: it only asks the broker)."""

    def __init__(self, servers: str, topics: Sequence[str], options: Mapping[str, Any], group: str) -> None:
        from confluent_kafka import Consumer

        self.servers, self.topics = servers, list(topics)
        self._down = _Down()
        self._consumer = Consumer(consumer_config(servers, options, group, self._down))
        self._options, self.group = dict(options), group
        self._admin: Any = None
        self._no_ids = False
        #: a partition's first record's description by (topic, partition, offset), and the consumer that reads it
        self._firsts: dict[tuple[str, int, int], str | None] = {}
        self._peek: Any = None
        self.waiting: int | None = None
        #: each partition's (earliest, last stable) offsets as :meth:`latest` last found them
        self.last_bounds: dict[tuple[str, int], tuple[int, int]] = {}

    def close(self) -> None:
        self._consumer.close()
        if self._peek is not None:
            self._peek.close()

    def ids(self) -> dict[str, str]:
        """Each topic's id (Kafka's topic id, which a topic deleted and created again does not
        keep); empty when the broker gives none (noida-db; Kafka before 2.8), and then not
        asked again."""
        from confluent_kafka import KafkaError, KafkaException, TopicCollection
        from confluent_kafka.admin import AdminClient

        if self._no_ids:
            return {}
        if self._admin is None:
            self._admin = AdminClient(client_config(self.servers, self._options))
        out: dict[str, str] = {}
        try:
            found = self._admin.describe_topics(TopicCollection(self.topics), request_timeout=METADATA_TIMEOUT_S)
            for topic, future in found.items():
                uuid = future.result().topic_id
                if uuid is not None and (uuid.get_most_significant_bits() or uuid.get_least_significant_bits()):
                    out[topic] = str(uuid)
        except KafkaException as exc:
            err: Any = exc.args[0] if exc.args else None
            if getattr(err, "code", lambda: None)() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                return out  # ``partitions`` says so
            raise SourceError(unreachable(self.servers, f"describing {', '.join(map(repr, self.topics))}", exc)) from None
        self._no_ids = not out
        return out

    def first(self, topic: str, part: int, low: int, high: int) -> str | None:
        """What the first record at or after ``low`` (a partition's earliest offset) and below
        ``high`` is: its offset, timestamp and a CRC of its key and value; None when the range
        holds no record (transaction markers, aborted records). Kept per offset: read once."""
        import zlib

        from confluent_kafka import Consumer, TopicPartition

        if (topic, part, low) in self._firsts:
            return self._firsts[(topic, part, low)]
        if self._peek is None:
            # one record wanted: no fetching ahead
            small = {"queued.min.messages": 1, "max.partition.fetch.bytes": 65536}
            self._peek = Consumer(consumer_config(self.servers, {**self._options, **small}, self.group))
        tp = TopicPartition(topic, part, low)
        self._peek.assign([tp])
        found: str | None = None
        deadline = time.monotonic() + METADATA_TIMEOUT_S
        while time.monotonic() < deadline:
            msgs = [m for m in self._peek.consume(1, timeout=0.2) if m.error() is None]
            if msgs:
                msg = msgs[0]
                crc = zlib.crc32(msg.value() or b"", zlib.crc32(msg.key() or b""))
                found = f"{msg.offset()}:{msg.timestamp()[1]}:{crc:08x}"
                break
            if self._peek.position([tp])[0].offset >= high:  # markers and aborted records only
                break
        self._firsts[(topic, part, low)] = found
        return found

    def all_bounds(self) -> dict[tuple[str, int], tuple[int, int]]:
        return {(t, p): self.bounds(t, p) for t in self.topics for p in self.partitions(t)}

    def fingerprint(self, bounds: Mapping[tuple[str, int], tuple[int, int]]) -> dict[str, Any]:
        """What tells these topics from topics of the same names created later, for the offsets
        Spark logs: Kafka's topic ids where the broker gives them, else each partition's
        earliest offset and what its record there is (:meth:`first`)."""
        ids = self.ids()
        if ids:
            return {"ids": ids}
        firsts: dict[str, dict[str, list]] = {}
        for (topic, part), (low, high) in bounds.items():
            if high > low:
                what = self.first(topic, part, low, high)
                if what is not None:
                    firsts.setdefault(topic, {})[str(part)] = [low, what]
        return {"firsts": firsts} if firsts else {}

    def recreated(self, saved: Mapping[str, Any], firsts: bool = True) -> dict[str, str]:
        """The topics of offsets ``saved`` (as logged, with :meth:`fingerprint`'s keys) that
        were deleted and created again since, each with how that shows. Offsets logged without
        them (by an older version) say nothing; ``firsts=False`` compares topic ids only (a
        request less per partition)."""
        out: dict[str, str] = {}
        if not saved.get("ids") and not (firsts and saved.get("firsts")):
            return out
        # a broker that is down is named within seconds, not after the topic description's timeout
        self.reach(f"checking that {', '.join(map(repr, self.topics))} are the topics the offsets are of")
        ids = saved.get("ids")
        if isinstance(ids, Mapping) and ids:
            now = self.ids()
            for t in self.topics:
                if t in ids and t in now and ids[t] != now[t]:
                    out[t] = f"its topic id is now {now[t]}, was {ids[t]}"
        known = saved.get("firsts") if firsts else None
        for t in self.topics if isinstance(known, Mapping) else ():
            for part, (low, what) in (known.get(t) or {}).items():  # type: ignore[union-attr]
                parts = self.partitions(t)
                if int(part) not in parts:
                    out[t] = f"it has no partition {part} now (partitions {', '.join(map(str, parts))})"
                    break
                now_low, high = self.bounds(t, int(part))
                if now_low < int(low):
                    out[t] = f"partition {part} now starts at offset {now_low}, before offset {low} where it started"
                    break
                if now_low == int(low) and high > now_low and self.first(t, int(part), now_low, high) not in (what, None):
                    out[t] = (f"the record at offset {low} of partition {part} is not the one it was (its timestamp "
                              "and content differ)")
                    break
        return out

    def reach(self, doing: str) -> None:
        """Returns once a broker answers a metadata request; raises :class:`SourceError`
        naming the servers when none does: within :data:`DOWN_GRACE_S` seconds when the client
        finds every broker down (a refused or lost connection), else after
        :data:`METADATA_TIMEOUT_S` (an address that does not answer at all)."""
        from confluent_kafka import KafkaException

        began = time.monotonic()
        self._down.reset()
        while True:
            try:
                self._consumer.list_topics(self.topics[0], timeout=PROBE_S)
                return
            except KafkaException as exc:
                failure: BaseException = exc
            self._consumer.poll(0)  # serves the error callback
            if self._down.for_over(DOWN_GRACE_S) or time.monotonic() - began >= METADATA_TIMEOUT_S:
                raise SourceError(unreachable(self.servers, doing, failure)) from None

    def partitions(self, topic: str) -> list[int]:
        parts = topic_partitions(self._consumer, topic, self.servers, f"looking up topic {topic!r}", SourceError)
        if parts is None:
            raise SourceError(
                f"topic {topic!r} does not exist on Kafka at {mask(self.servers)}: a source reads an existing topic "
                "(create it, e.g. with your Kafka tools or `sparkstate produce`, or check the name)"
            )
        return parts

    def bounds(self, topic: str, part: int) -> tuple[int, int]:
        """(earliest offset, last stable offset) of a partition."""
        from confluent_kafka import KafkaException, TopicPartition

        try:
            low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            raise SourceError(unreachable(self.servers, f"reading the offsets of {topic!r} partition {part}", exc)) from None
        return int(low), int(high)

    def _times(self, topic: str, parts: list[int], when: int) -> dict[int, int]:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            found = self._consumer.offsets_for_times([TopicPartition(topic, p, when) for p in parts], timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            raise SourceError(unreachable(self.servers, f"looking up offsets by time in {topic!r}", exc)) from None
        # no record at or after the time: the partition's end
        return {tp.partition: tp.offset if tp.offset >= 0 else self.bounds(topic, tp.partition)[1] for tp in found}

    def initial(self, starting: str) -> Offsets:
        """Where a new checkpoint starts, resolved now (the reader keeps it, see the runtime)."""
        explicit: Offsets = json.loads(starting.partition(":")[2]) if starting.startswith("offsets:") else {}
        self.reach(f"finding where {', '.join(map(repr, self.topics))} start")
        out: Offsets = {}
        for topic in self.topics:
            parts = self.partitions(topic)
            if starting == "latest":
                out[topic] = {str(p): self.bounds(topic, p)[1] for p in parts}
            elif starting.startswith("timestamp:"):
                out[topic] = {str(p): o for p, o in self._times(topic, parts, int(starting.partition(":")[2])).items()}
            else:
                given = explicit.get(topic, {})
                missing = sorted(set(given) - {str(p) for p in parts}, key=int)
                if missing:
                    raise SourceError(
                        f"the starting offsets name partition(s) {', '.join(missing)} of topic {topic!r}, which has "
                        f"partitions {', '.join(map(str, parts))} on Kafka at {mask(self.servers)}: fix the offsets"
                    )
                out[topic] = {str(p): int(given[str(p)]) if str(p) in given else self.bounds(topic, p)[0] for p in parts}
        return out

    def latest(self, start: Offsets, max_records: int | None) -> Offsets:
        """The end of the next micro-batch from ``start``: each partition's last stable offset,
        scaled down to ``max_records`` in all (in proportion to each partition's lag)."""
        self.reach(f"finding the end of the next micro-batch of {', '.join(map(repr, self.topics))}")
        self.last_bounds = {}
        ends: Offsets = {}
        lags: list[tuple[str, str, int, int]] = []
        for topic in self.topics:
            known = start.get(topic, {})
            ends[topic] = dict(known)
            for p in self.partitions(topic):
                s = int(known.get(str(p), 0))
                low, high = self.bounds(topic, p)
                self.last_bounds[(topic, p)] = (low, high)
                if high > s and s < low:
                    raise _retention_error(self.servers, topic, p, s, low)
                if s > high:
                    raise _behind_error(self.servers, topic, p, s, high)
                ends[topic][str(p)] = max(s, high)
                if high > s:
                    lags.append((topic, str(p), s, high - s))
        total = sum(lag for *_, lag in lags)
        if max_records is not None and total > max_records:
            budget = max_records
            for i, (topic, part, s, lag) in enumerate(lags):
                share = lag * max_records // total if i < len(lags) - 1 else budget
                share = max(1, min(lag, share, budget)) if budget else 0
                budget -= share
                ends[topic][part] = s + share
        # records the partitions held beyond the batch's end when it was planned (the metrics'
        # "input rows waiting", Flink's records lag)
        self.waiting = total - sum(int(ends[t][p]) - s for t, p, s, _ in lags)
        return ends


def ranges(start: Offsets, end: Offsets) -> list[tuple[int, str, int, int, int]]:
    """The (index, topic, partition, from, to) of every partition a batch reads, in a fixed
    order (topics, then partitions by number), so a replay numbers them alike."""
    out = []
    index = 0
    for topic in sorted(end):
        for p in sorted(end[topic], key=int):
            s, e = int(start.get(topic, {}).get(p, 0)), int(end[topic][p])
            if e > s:
                out.append((index, topic, int(p), s, e))
            index += 1
    return out


def fetch(
    servers: str, options: Mapping[str, Any], group: str, topic: str, part: int, start: int, end: int,
    timeout_s: float = READ_TIMEOUT_S,
) -> Iterator[list[Any]]:
    """The records of ``[start, end)`` of one partition, in chunks of messages. Offsets
    without a record (transaction markers, aborted records) are skipped as the consumer
    skips them; a range the broker no longer holds, or one that makes no progress for
    ``timeout_s`` seconds, raises :class:`SourceError`."""
    from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

    transient = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._PARTITION_EOF}
    down = _Down()
    # large fetches: a range is read whole, so the broker's answers may be as large as memory allows
    consumer = Consumer(consumer_config(servers, {**FETCH_SETTINGS, **options}, group, down))
    try:
        consumer.assign([TopicPartition(topic, part, start)])
        pos, last_progress = start, time.monotonic()
        while pos < end:
            chunk: list[Any] = consumer.consume(min(CHUNK, end - pos), timeout=0.5)
            # the messages are looked at in C (map): a Python step per message costs as much as parsing it
            if any(map(Message.error, chunk)):  # an error, or the partition's end: each message in turn
                kept = []
                for msg in chunk:
                    err = msg.error()
                    if err is None:
                        kept.append(msg)
                        continue
                    if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        low = _low(consumer, topic, part)
                        raise _retention_error(servers, topic, part, pos, low if low is not None else end)
                    if err.code() in transient:
                        continue
                    where = f"topic {topic!r} partition {part}"
                    raise SourceError(f"Kafka at {mask(servers)} failed reading {where}: {mask(err.str())}")
                chunk = kept
            if chunk:
                # one partition's messages come in offset order: those at or past the end are cut off
                if (chunk[-1].offset() or 0) >= end:
                    chunk = chunk[: bisect.bisect_left(chunk, end, key=_offset_of)]
                    pos = end
                else:
                    pos = (chunk[-1].offset() or 0) + 1
            if chunk:
                last_progress = time.monotonic()
                down.reset()
                yield chunk
                continue
            if pos < end:
                at = consumer.position([TopicPartition(topic, part)])[0].offset
                if at >= end:  # the rest of the range holds no records (markers, aborted)
                    break
                if at > pos:
                    pos, last_progress = at, time.monotonic()
                    down.reset()
                    continue
                waited = time.monotonic() - last_progress
                lost = down.for_over(min(DOWN_GRACE_S, timeout_s))
                if waited > timeout_s or lost:
                    why = "no broker is reachable" if lost else "is the broker down?"
                    raise SourceError(
                        f"Kafka at {mask(servers)} delivered nothing of offsets {pos} to {end - 1} of topic {topic!r} "
                        f"partition {part} for {waited:.0f} s ({why}). The micro-batch fails and nothing of it is "
                        "committed; the next run reads it again once the broker is back"
                    )
    finally:
        consumer.close()


def _offset_of(msg: Any) -> int:
    return msg.offset() or 0


def _low(consumer: Any, topic: str, part: int) -> int | None:
    from confluent_kafka import KafkaException, TopicPartition

    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=METADATA_TIMEOUT_S)[0])
    except KafkaException:
        return None


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


class RecordColumns:
    """Turns messages into the ``kafka_*`` columns a source's schema asks for."""

    def __init__(self, meta: Sequence[tuple[str, str]]) -> None:
        from sparkstate.api.schema import arrow_type

        self.meta = [(name, arrow_type(ddl)) for name, ddl in meta]

    def column(self, name: str, kind: pa.DataType, msgs: Sequence[Any]) -> pa.Array:
        if name == "kafka_key":
            keys = [m.key() for m in msgs]
            return pa.array(keys if pa.types.is_binary(kind) else [_text(k) for k in keys], kind)
        if name == "kafka_topic":
            return pa.array([m.topic() for m in msgs], kind)
        if name == "kafka_partition":
            return pa.array([m.partition() for m in msgs], kind)
        if name == "kafka_offset":
            return pa.array([m.offset() for m in msgs], kind)
        if name == "kafka_timestamp":
            stamps = [m.timestamp()[1] for m in msgs]
            stamps = [t if t is not None and t >= 0 else None for t in stamps]
            if pa.types.is_timestamp(kind):
                return pa.array([None if t is None else t * 1000 for t in stamps], pa.int64()).cast(kind)
            return pa.array(stamps, kind)
        # kafka_headers: the last value of a repeated name wins
        rows = []
        for m in msgs:
            headers = m.headers() or []
            rows.append(list({k: _text(v) for k, v in headers}.items()))
        return pa.array(rows, kind)

    def add(self, events: pa.RecordBatch, msgs: Sequence[Any], schema: pa.Schema) -> pa.RecordBatch:
        """``events`` (one per message of ``msgs``) with the metadata columns, in ``schema``'s order."""
        have = {n: events.column(i) for i, n in enumerate(events.schema.names)}
        for name, kind in self.meta:
            have[name] = self.column(name, kind, msgs)
        return pa.RecordBatch.from_arrays([have[f.name] for f in schema], schema=schema)
