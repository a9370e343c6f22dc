"""The Kafka source without Spark, against a real broker (noida-db, ``tests/kafka_server.py``):
where a new checkpoint starts, where each micro-batch ends (bounded, never past an open
transaction, new partitions from their first record), what a range reads, the errors a
user meets (a missing topic, a broker down or lost, records retention deleted), and the
decoding of records into events and dead letters."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import NewPartitions
from kafka_server import LocalKafka
from postgres_server import closed_port

from sparkstate import JobDefinitionError, KafkaSource
from sparkstate.connectors.kafka.reader import OffsetBook, fetch, ranges
from sparkstate.errors import SourceError
from sparkstate.runtime.io.kafka_source import RecordDecoder, kafka_options

GROUP = "sparkstate-test"


@contextmanager
def book(broker: LocalKafka | str, *topics: str) -> Iterator[OffsetBook]:
    b = OffsetBook(broker if isinstance(broker, str) else broker.servers or "", list(topics), {}, GROUP)
    try:
        yield b
    finally:
        b.close()


def read_all(broker: LocalKafka, topic: str, part: int, start: int, end: int, timeout_s: float = 10.0) -> list[Any]:
    return [m for chunk in fetch(broker.servers or "", {}, GROUP, topic, part, start, end, timeout_s) for m in chunk]


def produce_at(broker: LocalKafka, topic: str, stamped: list[tuple[int, str]], partition: int = 0) -> None:
    """Records with the given timestamps (epoch ms) and values."""
    p = Producer({"bootstrap.servers": broker.servers})
    for ts, value in stamped:
        p.produce(topic, value.encode(), partition=partition, timestamp=ts)
    assert p.flush(10) == 0


# ------------------------------------------------------------------ starting positions


def test_a_new_checkpoint_starts_earliest_latest_at_a_time_or_at_given_offsets(kafka_broker):
    topic = kafka_broker.new_topic("start", 2)
    now = int(time.time() * 1000)
    produce_at(kafka_broker, topic, [(now - 30_000 + 1000 * i, f"a{i}") for i in range(5)], partition=0)
    produce_at(kafka_broker, topic, [(now - 20_000 + 1000 * i, f"b{i}") for i in range(3)], partition=1)
    with book(kafka_broker, topic) as b:
        assert b.initial("earliest") == {topic: {"0": 0, "1": 0}}
        assert b.initial("latest") == {topic: {"0": 5, "1": 3}}
        # the first record at or after the time (offsets_for_times); none: the partition's end
        assert b.initial(f"timestamp:{now - 28_000}") == {topic: {"0": 2, "1": 0}}
        assert b.initial(f"timestamp:{now - 19_000}") == {topic: {"0": 5, "1": 1}}
        assert b.initial(f"timestamp:{now + 60_000}") == {topic: {"0": 5, "1": 3}}
        # explicit offsets; a partition not named starts at its earliest
        assert b.initial("offsets:" + json.dumps({topic: {"0": 4}})) == {topic: {"0": 4, "1": 0}}
        # the spec turns a datetime, ISO text and epoch ms into the same position
        spec = KafkaSource("h:1", topic, "v string", starting=now - 28_000)
        assert spec.starting == f"timestamp:{now - 28_000}"
        iso = KafkaSource("h:1", topic, "v string", starting="2026-01-02T03:04:05")
        assert iso.starting == "timestamp:1767323045000"
        assert KafkaSource("h:1", topic, "v string", starting={topic: {0: 4}}).starting == (
            "offsets:" + json.dumps({topic: {"0": 4}}))


# ------------------------------------------------------------------ where a batch ends


def test_a_batch_is_bounded_by_max_records_spread_by_lag(kafka_broker):
    topic = kafka_broker.new_topic("bound", 3)
    for part, n in enumerate([60, 30, 10]):
        kafka_broker.produce(topic, [f"v{i}" for i in range(n)], partition=part)
    with book(kafka_broker, topic) as b:
        start = b.initial("earliest")
        assert b.latest(start, None) == {topic: {"0": 60, "1": 30, "2": 10}} and b.waiting == 0
        end = b.latest(start, 10)
        assert end == {topic: {"0": 6, "1": 3, "2": 1}}  # in proportion to each partition's lag
        assert b.waiting == 90  # what the partitions hold beyond the batch: the records lag
        # batch after batch, never more than the bound, until every record is read once
        seen, at = 0, start
        while True:
            nxt = b.latest(at, 7)
            n = sum(e - s for _, _, _, s, e in ranges(at, nxt))
            if n == 0:
                break
            assert n <= 7
            seen += n
            at = nxt
        assert seen == 100 and at == {topic: {"0": 60, "1": 30, "2": 10}}
        # a bound smaller than the partitions behind still moves each by at most its share
        assert sum(b.latest(start, 2)[topic].values()) == 2


def test_a_batch_never_passes_an_open_transaction_and_aborted_records_are_not_events(kafka_broker):
    topic = kafka_broker.new_topic("txn", 1)
    kafka_broker.produce(topic, ["c0", "c1"])
    p = Producer({"bootstrap.servers": kafka_broker.servers, "transactional.id": f"open-{uuid.uuid4().hex[:6]}"})
    p.init_transactions(10)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, f"open{i}".encode(), partition=0)
    p.flush(10)
    kafka_broker.produce(topic, ["after-open"])  # behind the open transaction
    with book(kafka_broker, topic) as b:
        start = b.initial("earliest")
        # the last stable offset holds the end at the open transaction's first record
        held = b.latest(start, None)
        assert held == {topic: {"0": 2}}
        assert [m.value() for m in read_all(kafka_broker, topic, 0, 0, 2)] == [b"c0", b"c1"]
        p.abort_transaction(10)
        kafka_broker.produce(topic, ["c2"], transactional_id=f"ok-{uuid.uuid4().hex[:6]}")
        kafka_broker.produce(topic, ["gone"], transactional_id=f"ab-{uuid.uuid4().hex[:6]}", abort=True)
        end = b.latest(held, None)
        assert end[topic]["0"] > 2
        # the range holds aborted records and transaction markers: it ends, with the committed records only
        values = [m.value() for m in read_all(kafka_broker, topic, 0, 2, end[topic]["0"])]
        assert values == [b"after-open", b"c2"]
        # a range of markers and aborted records only ends too, reading nothing
        gone_from = end[topic]["0"] - 2  # the aborted record and its marker
        assert read_all(kafka_broker, topic, 0, gone_from, end[topic]["0"]) == []


def test_partitions_added_to_a_topic_are_read_from_their_first_record(kafka_broker):
    topic = kafka_broker.new_topic("grow", 1)
    kafka_broker.produce(topic, ["a", "b"], partition=0)
    with book(kafka_broker, topic) as b:
        first = b.latest(b.initial("latest"), None)
        assert first == {topic: {"0": 2}}
        admin = kafka_broker.admin()
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result()
        kafka_broker.produce(topic, ["x"], partition=2)
        nxt = b.latest(first, None)
        assert nxt == {topic: {"0": 2, "1": 0, "2": 1}}
        # the new partition's range starts at 0 (a replay numbers the ranges alike)
        assert ranges(first, nxt) == [(2, topic, 2, 0, 1)]
        assert [m.value() for m in read_all(kafka_broker, topic, 2, 0, 1)] == [b"x"]


# ------------------------------------------------------------------ errors a user meets


def test_records_deleted_by_retention_are_an_error_naming_them_and_the_options(kafka_broker):
    topic = kafka_broker.new_topic("ret", 2)
    kafka_broker.produce(topic, [f"v{i}" for i in range(10)], partition=1)
    with book(kafka_broker, topic) as b:
        start = b.initial("earliest")
        assert start == {topic: {"0": 0, "1": 0}}
        admin = kafka_broker.admin()
        admin.delete_records([TopicPartition(topic, 1, 6)])[TopicPartition(topic, 1, 6)].result()
        for attempt in (lambda: b.latest(start, None), lambda: read_all(kafka_broker, topic, 1, 0, 10)):
            with pytest.raises(SourceError) as err:
                attempt()
            text = str(err.value)
            assert f"records 0 to 5 of topic {topic!r} partition 1" in text
            assert "earliest offset is now 6" in text and "retention" in text
            assert "--fresh" in text and "retention.ms" in text
        # a checkpoint past the deleted records goes on
        assert b.latest({topic: {"0": 0, "1": 7}}, None) == {topic: {"0": 0, "1": 10}}


def test_offsets_past_a_partitions_end_or_of_partitions_that_do_not_exist_are_refused(kafka_broker):
    topic = kafka_broker.new_topic("past", 2)
    kafka_broker.produce(topic, ["a", "b"], partition=0)
    with book(kafka_broker, topic) as b:
        # the topic deleted and created again under a running job, or offsets given past the end:
        # reading on would skip the records below that offset without a word
        start = b.initial("offsets:" + json.dumps({topic: {"0": 50}}))
        with pytest.raises(SourceError, match=rf"topic {topic!r} partition 0 .* ends at offset 2, before offset 50"):
            b.latest(start, None)
        with pytest.raises(SourceError, match=rf"partition\(s\) 7 of topic {topic!r}, which has partitions 0, 1"):
            b.initial("offsets:" + json.dumps({topic: {"7": 0}}))


def test_a_topic_that_does_not_exist_is_refused(kafka_broker):
    with book(kafka_broker, "no-such-topic-" + uuid.uuid4().hex[:6]) as b:
        with pytest.raises(SourceError, match=r"topic 'no-such-topic-\w+' does not exist on Kafka at 127\.0\.0\.1:\d+"):
            b.initial("earliest")


def test_a_broker_that_is_down_is_named_quickly_and_quietly(capfd):
    servers = f"127.0.0.1:{closed_port()}"
    began = time.monotonic()
    with book(servers, "t") as b, pytest.raises(SourceError) as err:
        b.initial("earliest")
    assert time.monotonic() - began < 8
    assert f"cannot reach Kafka at {servers}" in str(err.value) and "Is a broker running there" in str(err.value)
    began = time.monotonic()
    with pytest.raises(SourceError, match=f"Kafka at {servers} delivered nothing of offsets 0 to 9"):
        list(fetch(servers, {}, GROUP, "t", 0, 0, 10, timeout_s=30))
    assert time.monotonic() - began < 8  # every broker down: not the whole read timeout
    out, errors = capfd.readouterr()
    assert "rdkafka" not in errors.lower() and "connection refused" not in errors.lower(), errors


def test_a_read_fails_when_the_broker_stops_mid_range_and_the_range_reads_alike_when_it_is_back(own_broker):
    topic = own_broker.new_topic("lost", 1)
    own_broker.produce(topic, [f"v{i}" for i in range(50)])
    servers = own_broker.servers or ""
    reads = fetch(servers, {}, GROUP, topic, 0, 0, 100, timeout_s=2)  # 50 records exist; the rest never come
    first = next(reads)
    assert [m.offset() for m in first] == list(range(50))
    own_broker.stop()
    began = time.monotonic()
    with pytest.raises(SourceError, match=rf"offsets 50 to 99 of topic {topic!r} partition 0"):
        next(reads)
    assert time.monotonic() - began < 8
    own_broker.start()
    assert [m.value() for m in read_all(own_broker, topic, 0, 10, 20)] == [f"v{i}".encode() for i in range(10, 20)]


# ------------------------------------------------------------------ records as events


def decoder(schema: str, format: str = "json", **pack: str) -> RecordDecoder:
    return RecordDecoder({**kafka_options(KafkaSource("h:1", "t", schema, format=format)), **pack})


def test_records_decode_into_events_with_their_kafka_columns_and_dead_letters(kafka_broker):
    topic = kafka_broker.new_topic("dec", 1)
    now = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": kafka_broker.servers})
    p.produce(topic, b'{"k": "a", "v": 1.5}', key=b"ka", timestamp=now, headers=[("h", b"1"), ("h", b"2"), ("x", b"y")])
    p.produce(topic, None, key=b"kb", timestamp=now + 1)  # a tombstone
    p.produce(topic, b"not json", key=b"kc", timestamp=now + 2)
    p.produce(topic, b'{"k": "d", "v": "x"}', timestamp=now + 3)
    p.produce(topic, b"e,2", key=b"ke", timestamp=now + 4)
    p.produce(topic, b" \r\n", timestamp=now + 5)  # blank: no event, yet not dropped without a word
    assert p.flush(10) == 0
    msgs = read_all(kafka_broker, topic, 0, 0, 6)
    schema = ("k string, v double, kafka_key string, kafka_topic string, kafka_partition int, kafka_offset bigint, "
              "kafka_timestamp timestamp, kafka_headers map<string,string>")
    events, dead, raws = decoder(schema)(msgs)
    rows = events.to_pylist()
    assert len(rows) == 1 and raws == ['{"k": "a", "v": 1.5}']
    row = rows[0]
    assert (row["k"], row["v"], row["kafka_key"], row["kafka_topic"], row["kafka_partition"], row["kafka_offset"]) == (
        "a", 1.5, "ka", topic, 0, 0)
    assert int(row["kafka_timestamp"].timestamp() * 1000) == now
    assert dict(row["kafka_headers"]) == {"h": "2", "x": "y"}  # the last of a repeated name
    assert events.schema.names == [c.split()[0] for c in schema.split(", ")]
    # dead letters in the records' order, each naming its record
    reasons = [d["reason"] for d in dead]
    assert [d["raw"] for d in dead] == ["", "not json", '{"k": "d", "v": "x"}', "e,2", " \r\n"]
    assert reasons[0] == f"record at offset 1 of {topic!r} partition 0: no value (a tombstone)"
    assert reasons[1].startswith(f"record at offset 2 of {topic!r} partition 0: not valid JSON")
    assert reasons[2] == f"record at offset 3 of {topic!r} partition 0: column 'v' (double): expected a number, got string \"x\""
    assert reasons[4] == f"record at offset 5 of {topic!r} partition 0: an empty value"

    # csv: the value's columns in order; binary keys and epoch-ms timestamps as the schema asks
    events, dead, _ = decoder("k string, v double, kafka_key binary, kafka_timestamp bigint", "csv")(msgs)
    assert events.to_pylist() == [{"k": "e", "v": 2.0, "kafka_key": b"ke", "kafka_timestamp": now + 4}]
    assert len(dead) == 5

    # raw: the value as it is (a tombstone is a null value, not a dead letter)
    events, dead, raws = decoder("value string, kafka_offset bigint", "raw")(msgs)
    assert [r["value"] for r in events.to_pylist()] == [
        '{"k": "a", "v": 1.5}', None, "not json", '{"k": "d", "v": "x"}', "e,2", " \r\n"]
    assert [r["kafka_offset"] for r in events.to_pylist()] == [0, 1, 2, 3, 4, 5] and dead == [] and raws is None
    events, _, _ = decoder("value binary", "raw")(msgs[:1])
    assert events.to_pylist() == [{"value": b'{"k": "a", "v": 1.5}'}]


def test_kafka_source_specs_are_checked():
    ok = KafkaSource("h:1", "a, b", "v string, kafka_timestamp timestamp", time_column="kafka_timestamp")
    assert ok.topic == ("a", "b") and ok.describe() == "kafka h:1/a,b (json values)"
    bad: list[tuple[dict[str, Any], str]] = [
        ({"topic": ""}, "one or more distinct topic names"),
        ({"topic": ["a", "a"]}, "one or more distinct topic names"),
        ({"bootstrap_servers": " "}, "needs bootstrap_servers"),
        ({"format": "avro"}, "format must be one of json, csv, raw"),
        ({"max_records_per_batch": 0}, "max_records_per_batch must be a positive int"),
        ({"starting": "yesterday"}, "is not a position"),
        ({"starting": 1.5}, "is not a position"),
        ({"starting": "timestamp:soon"}, "a timestamp is epoch milliseconds"),
        ({"starting": "offsets:[1]"}, "offsets are JSON"),
        ({"starting": {"t": {"0": -1}}}, "whole numbers from 0"),
        ({"starting": {"t": {"x": 1}}}, "whole numbers from 0"),
        ({"starting": {"other": {0: 1}}}, "name topic\\(s\\) 'other', which the source does not read"),
        ({"max_records_per_batch": True}, "max_records_per_batch must be a positive int"),
        ({"schema": "v string, kafka_value string"}, "'kafka_value' is not one of the record's columns"),
        ({"schema": "v string, kafka_offset string"}, "'kafka_offset' must be of type bigint or long"),
        ({"schema": "v string, kafka_key int"}, "'kafka_key' must be of type string or binary"),
        ({"format": "raw", "schema": "v string"}, "format='raw' keeps the record's value as one column"),
        ({"format": "raw", "schema": "value int"}, "column 'value' must be string or binary"),
        ({"schema": "kafka_key string"}, "the schema names none"),
        ({"time_column": "ts"}, "time_column 'ts' is not in the schema"),
    ]
    for change, message in bad:
        args: dict[str, Any] = {"bootstrap_servers": "h:1", "topic": "t", "schema": "v string", **change}
        with pytest.raises(JobDefinitionError, match=message):
            KafkaSource(**args)


# ------------------------------------------------------------------ the Spark reader's offsets (no Spark session)


def test_a_replayed_first_batch_reads_what_its_first_attempt_read(kafka_broker, tmp_path):
    from sparkstate.runtime.io.kafka_source import KafkaStreamReader

    topic = kafka_broker.new_topic("first", 2)
    kafka_broker.produce(topic, ["old"], partition=0)
    options = {**kafka_options(KafkaSource(kafka_broker.servers, topic, "value string", format="raw", starting="latest")),
               "start_file": str(tmp_path / "kafka-start.json")}
    reader = KafkaStreamReader(options)
    start = reader.initialOffset()
    assert start["topics"] == {topic: {"0": 1, "1": 0}} and set(start) <= {"topics", "ids", "firsts"}
    for part in range(2):
        kafka_broker.produce(topic, [f"a{part}"], partition=part)
    end = reader.latestOffset(start, None)  # Spark logs it before the batch runs
    assert end["initial"] == start["topics"] and end["topics"] == {topic: {"0": 2, "1": 1}}

    def read(r: KafkaStreamReader, begin: dict) -> list[Any]:
        return [v for p in r.partitions(begin, end) for b in r.read(p) for v in b.column("value").to_pylist()]

    assert read(reader, start) == ["a0", "a1"]
    # a crash before the batch committed; records arrive; the start file is gone (or was never
    # written: a checkpoint that is not local): "latest" now resolves after them, yet the replay
    # reads the first attempt's records
    kafka_broker.produce(topic, ["b0"], partition=0)
    (tmp_path / "kafka-start.json").unlink()
    again = KafkaStreamReader(options)
    moved = again.initialOffset()
    assert moved["topics"] == {topic: {"0": 3, "1": 1}}
    assert read(again, moved) == ["a0", "a1"]
    # the next batch starts at the logged end
    nxt = again.latestOffset(end, None)
    assert "initial" not in nxt and [(p.partition, p.start, p.end) for p in again.partitions(end, nxt)] == [(0, 2, 3)]
    assert again.latestOffset(nxt, None) is nxt  # nothing new: the same offset, no empty batch
    reader.stop()
    again.stop()


def test_a_batch_counts_the_records_its_offsets_span():
    from sparkstate.runtime.io.sources import kafka_records

    first = {"endOffset": json.dumps({"topics": {"t": {"0": 5, "1": 2}}, "initial": {"t": {"0": 1}}}), "startOffset": None}
    assert kafka_records(first) == 6  # a new partition counts from 0
    later = {"startOffset": json.dumps({"topics": {"t": {"0": 5, "1": 2}}}), "endOffset": {"topics": {"t": {"0": 9, "1": 2}}}}
    assert kafka_records(later) == 4
    assert kafka_records({"endOffset": json.dumps({"offset": 3})}) is None  # not a Kafka source's


def test_a_topic_deleted_and_created_again_with_more_records_is_refused_unless_a_start_is_given(kafka_broker, tmp_path):
    from confluent_kafka.admin import NewTopic

    from sparkstate.runtime.io.kafka_source import KafkaStreamReader

    topic = kafka_broker.new_topic("again", 2)
    for part in range(2):
        kafka_broker.produce(topic, [f"old{part}-{i}" for i in range(3)], partition=part)
    spec = KafkaSource(kafka_broker.servers, topic, "value string", format="raw")
    options = {**kafka_options(spec), "start_file": str(tmp_path / "ck" / "sparkstate-sources" / "kafka-start.json")}
    run = KafkaStreamReader(options)
    end = json.loads(json.dumps(run.latestOffset(run.initialOffset(), None)))  # as Spark logs it
    assert end["topics"] == {topic: {"0": 3, "1": 3}}
    run.stop()

    # the job stops; the topic is deleted and created again, with more records than the offsets skip
    admin = kafka_broker.admin()
    admin.delete_topics([topic])[topic].result()
    admin.create_topics([NewTopic(topic, 2)])[topic].result()
    for part in range(2):
        kafka_broker.produce(topic, [f"new{part}-{i}" for i in range(5)], partition=part)

    # resumed from the checkpoint (the next batch after the logged one, or that batch replayed),
    # or restored from a savepoint of it: refused, naming the topic, the checkpoint and the fixes
    again = KafkaStreamReader(options)
    with pytest.raises(SourceError) as err:
        again.latestOffset(end, None)
    text = str(err.value)
    assert f"topic {topic!r} on Kafka at {kafka_broker.servers} was deleted and created again since the checkpoint " \
           f"{tmp_path / 'ck'} read it" in text
    assert "partition 0 at 3, partition 1 at 3" in text and "skip the new topic's first records" in text
    assert "--fresh" in text and "starting=" in text and "starting_if_recreated='earliest'" in text
    with pytest.raises(SourceError, match="was deleted and created again since the checkpoint"):
        KafkaStreamReader(options).partitions({"topics": {topic: {"0": 0, "1": 0}}}, end)
    saved = {**options, "start_offsets": json.dumps(end["topics"]),
             "start_fingerprint": json.dumps({k: end[k] for k in ("ids", "firsts") if k in end})}
    restored = KafkaStreamReader(saved)
    with pytest.raises(SourceError, match="was deleted and created again since the savepoint this run restores read it"):
        restored.latestOffset(restored.initialOffset(), None)
    again.stop()
    restored.stop()

    # asked where to read the new topic from: its records from there, the batch's end carrying its start
    spec = KafkaSource(kafka_broker.servers, topic, "value string", format="raw", starting_if_recreated="earliest")
    told = KafkaStreamReader({**kafka_options(spec), "start_file": options["start_file"]})
    nxt = told.latestOffset(end, None)
    assert nxt["initial"] == {topic: {"0": 0, "1": 0}} and nxt["topics"] == {topic: {"0": 5, "1": 5}}
    values = [v for p in told.partitions(end, nxt) for b in told.read(p) for v in b.column("value").to_pylist()]
    assert values == [f"new{p}-{i}" for p in range(2) for i in range(5)]
    # and the job goes on from there, with the new topic's fingerprint
    kafka_broker.produce(topic, ["later"], partition=0)
    assert told.latestOffset(json.loads(json.dumps(nxt)), None)["topics"] == {topic: {"0": 6, "1": 5}}
    told.stop()
    # an unchanged topic resumes as before
    same = KafkaStreamReader({**kafka_options(spec), "start_file": options["start_file"]})
    assert same.latestOffset(json.loads(json.dumps(nxt)), None)["topics"] == {topic: {"0": 6, "1": 5}}
    same.stop()


def test_values_parsed_as_blocks_give_the_events_and_dead_letters_of_the_record_by_record_reading(kafka_broker):
    import random

    from sparkstate.runtime.io.kafka_source import SPLIT_MIN

    rng = random.Random(7)

    def good() -> bytes:
        event = {"k": rng.choice(["a", "b", "é", 'q"uote']), "v": rng.choice([1, 2.5, -0.25, 10**6]),
                 "ts": rng.randrange(1_700_000_000_000, 1_800_000_000_000), "n": rng.choice([None, 3, -7])}
        if rng.random() < 0.1:
            event["extra"] = [1, {"x": "y"}]
        return json.dumps(event, ensure_ascii=rng.random() < 0.5).encode()

    bad = [None, b"", b"  ", b"not json", b'{"k": "a", "v": "ten"}', b'{"v": 1}', b'{"k": null, "v": 1}', b"[1, 2]",
           b'{"k": "a", "v": 1, "n": 99999999999999999999}', b'{"k": "a",\n "v": 1}', b"\xff\xfe{", b'{"k": "a", "v": 1}\r',
           b'{"k": "a", "ts": "2026-01-01T00:00:00Z"}', b'{"k": "a", "ts": "yesterday"}', b"[" * 300 + b"]" * 300,
           b'{"k": "a", "v": 1e999}', b'\xef\xbb\xbf{"k": "a"}']
    # chunks: every record an event (one block), one bad record among thousands (halved down to
    # its piece), bad records everywhere (record by record)
    chunks = [[good() for _ in range(3000)],
              [good() for _ in range(5000)] + [b"not json"] + [good() for _ in range(4000)],
              [rng.choice(bad) if rng.random() < 0.3 else good() for _ in range(2 * SPLIT_MIN + 700)]]
    topic = kafka_broker.new_topic("blocks", 1)
    p = Producer({"bootstrap.servers": kafka_broker.servers, "linger.ms": 5})
    for value in (v for chunk in chunks for v in chunk):
        key = rng.choice([None, b"k1", "ключ".encode()])
        headers = rng.choice([None, [("h", b"1")], [("h", b"1"), ("h", b"2"), ("x", None)]])
        p.produce(topic, value, key=key, partition=0, **({"headers": headers} if headers else {}))
    assert p.flush(30) == 0
    msgs = read_all(kafka_broker, topic, 0, 0, sum(map(len, chunks)))
    schema = ("k string, v double, ts timestamp, n int, kafka_key string, kafka_offset bigint, "
              "kafka_headers map<string,string>")
    at = 0
    for chunk in chunks:
        piece, at = msgs[at : at + len(chunk)], at + len(chunk)
        batched = decoder(schema, pack_keys='["k"]', pack_time_column="")
        events, dead, raws = batched(piece)
        one_by_one = decoder(schema, pack_keys='["k"]', pack_time_column="")
        assert one_by_one.parser is not None
        one_by_one.parser._fast = None  # the parser's rules line by line, no block reading
        want_events, want_dead, want_raws = one_by_one.each(piece, [m.value() for m in piece])
        assert events.to_pylist() == want_events.to_pylist()
        assert dead == want_dead
        assert list(raws or []) == list(want_raws) and len(raws or []) == events.num_rows
    assert sum(len(decoder(schema, pack_keys='["k"]')(msgs[a : a + 3000])[1]) for a in range(0, len(msgs), 3000)) > 500
