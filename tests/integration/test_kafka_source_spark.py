"""The Kafka source on Spark against a real broker (noida-db, ``tests/kafka_server.py``): event
time from the record's timestamp decides as the harness does; a restart, a replayed first batch
of ``starting="latest"``, a failed batch and a lost broker each read every record once; partitions
added while the job runs are read; malformed records are dead letters; a savepoint's restore
resumes at its Kafka offsets. Small topics and short triggers: the Spark time is a few runs'."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewPartitions
from kafka_server import LocalKafka
from spark_helpers import FAST

from sparkstate import (
    Job,
    JobFailedError,
    KafkaSource,
    KeyedProcessFunction,
    MapStateDescriptor,
    MemorySink,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from sparkstate.runtime.savepoints.take import take_savepoint

SCHEMA = "merchant_id string, amount double, kafka_partition int, kafka_offset bigint"


def produce(broker: LocalKafka, topic: str, events: list[Any], partition: int | None = None,
            stamps: list[int] | None = None) -> None:
    """Events (dicts as JSON, text as it is) to ``topic``, keyed by merchant (round robin over
    the partitions when ``partition`` is None), with the given timestamps (epoch ms)."""
    p = Producer({"bootstrap.servers": broker.servers})
    for i, e in enumerate(events):
        value = json.dumps(e).encode() if isinstance(e, dict) else None if e is None else e.encode()
        kwargs: dict[str, Any] = {}
        if partition is not None:
            kwargs["partition"] = partition
        if stamps is not None:
            kwargs["timestamp"] = stamps[i]
        p.produce(topic, value, **kwargs)
    assert p.flush(10) == 0


def pay(n: int, first: int = 0, merchants: int = 3) -> list[dict]:
    return [{"merchant_id": f"m{(first + i) % merchants}", "amount": 1.0} for i in range(n)]


class Tally(KeyedProcessFunction):
    """Each event: the merchant's running count and total, and the record it came from. With
    ``fail_flag``, the event of merchant ``boom`` fails its batch once (the flag file marks the
    first attempt)."""

    def __init__(self, fail_flag: str | None = None) -> None:
        self.fail_flag = fail_flag

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))
        self.total = ctx.get_state(ValueStateDescriptor("total", float, default=0.0))

    def process_element(self, event, ctx):
        if self.fail_flag and event["merchant_id"] == "boom" and not os.path.exists(self.fail_flag):
            Path(self.fail_flag).write_text("failed once")
            raise RuntimeError("the first attempt of this batch fails")
        self.count.update(self.count.value() + 1)
        self.total.update(self.total.value() + event["amount"])
        yield (ctx.get_current_key(), self.count.value(), self.total.value(), event["kafka_partition"], event["kafka_offset"])


def tally_job(source: KafkaSource, fail_flag: str | None = None) -> tuple[Job, MemorySink, MemorySink]:
    sink, dead = MemorySink(), MemorySink()
    job = (
        Job("kafka-tally").source(source).key_by("merchant_id")
        .process(Tally(fail_flag), output_schema="merchant_id string, count bigint, total double, part int, offset bigint")
        .sink(sink).dead_letters(dead).with_settings(**FAST)
    )
    return job, sink, dead


def records(*sinks: MemorySink) -> list[tuple]:
    """The (partition, offset) of every output row, in order: each record once, no gap."""
    return sorted((r["part"], r["offset"]) for s in sinks for r in s.rows())


def counts(*sinks: MemorySink) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for s in sinks:
        for r in s.rows():
            out.setdefault(r["merchant_id"], []).append(r["count"])
    return {k: sorted(v) for k, v in sorted(out.items())}


def expected(written: dict[int, int]) -> list[tuple]:
    """Every (partition, offset) of partitions holding ``written[p]`` records from 0."""
    return sorted((p, o) for p, n in written.items() for o in range(n))


def uncommit(checkpoint: Path, batch: int) -> None:
    """Forget that ``batch`` committed, and any later batch that was planned, as a crash
    between its offsets and its commit would."""
    for log in ("commits", "offsets"):
        for path in (checkpoint / log).iterdir():
            number = path.name.removeprefix(".").removesuffix(".crc")
            if number.isdigit() and (int(number) > batch or (log == "commits" and int(number) == batch)):
                path.unlink()


# ------------------------------------------------------------------ (a) event time from the record


class WindowCount(KeyedProcessFunction):
    """Events per key in 10 s windows of the record's timestamp, emitted when the watermark
    passes a window's end (event-time timers)."""

    def open(self, ctx):
        self.counts = ctx.get_map_state(MapStateDescriptor("counts", int, int))

    def process_element(self, event, ctx):
        end = ctx.timestamp() // 10_000 * 10_000 + 9_999
        self.counts.put(end, self.counts.get(end, 0) + 1)
        ctx.timer_service().register_event_time_timer(end)
        return []

    def on_timer(self, timestamp, ctx):
        yield (ctx.get_current_key(), timestamp, self.counts.get(timestamp, 0))
        self.counts.remove(timestamp)


def test_kafka_timestamps_drive_event_time_timers_as_on_the_harness(spark, kafka_broker, tmp_path):
    topic = kafka_broker.new_topic("win", 3)
    base = (int(time.time() * 1000) - 600_000) // 10_000 * 10_000
    events = []
    for part in range(3):  # partition p, offset i: time base + 1.5 s * i; last, one far ahead that closes every window
        mine = [({"merchant_id": f"m{(part + i) % 2}", "amount": 1.0}, base + 1500 * i) for i in range(12)]
        mine.append(({"merchant_id": "end", "amount": 0.0}, base + 120_000))
        produce(kafka_broker, topic, [e for e, _ in mine], partition=part, stamps=[t for _, t in mine])
        events += mine
    source = KafkaSource(kafka_broker.servers, topic, "merchant_id string, amount double, kafka_timestamp timestamp",
                         time_column="kafka_timestamp")
    sink = MemorySink()
    job = (
        Job("kafka-windows").source(source, watermark=WatermarkStrategy.for_bounded_out_of_orderness(0))
        .key_by("merchant_id").process(WindowCount(), output_schema="merchant_id string, window_end bigint, n bigint")
        .sink(sink).with_settings(**FAST)
    )
    harness = job.harness()
    want = harness.process_batch([{**e, "kafka_timestamp": _dt(t)} for e, t in events])
    want += harness.advance_watermark(base + 120_000)
    want_rows = sorted((r["merchant_id"], r["window_end"], r["n"]) for r in want)
    assert len(want_rows) == 4 and sum(n for *_, n in want_rows) == 36  # the windows of m0 and m1; "end"'s stays open

    result = job.run(checkpoint_dir=tmp_path / "ck", spark=spark, timeout=120,
                     until=lambda r: r.events >= 39 and len(sink.rows()) >= 4)
    assert result.completed and result.events == 39
    assert sorted((r["merchant_id"], r["window_end"], r["n"]) for r in sink.rows()) == want_rows


def _dt(ms: int) -> Any:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


# ------------------------------------------------------------------ (b) restart, replayed first batch, (f) lost broker


def per_partition(broker: LocalKafka, topic: str, n: int, first: int, parts: int = 3) -> None:
    for part in range(parts):
        produce(broker, topic, pay(n, first + part * n), partition=part)


def test_a_restart_a_replayed_latest_first_batch_and_a_lost_broker_read_every_record_once(spark, own_broker, tmp_path):
    topic = own_broker.new_topic("restart", 3)
    per_partition(own_broker, topic, 2, 100)  # before the job: starting="latest" never reads them
    source = KafkaSource(own_broker.servers, topic, SCHEMA, starting="latest", max_records_per_batch=9)
    ck = tmp_path / "ck"
    start_file = ck / "sparkstate-sources" / "kafka-start.json"
    produced = []

    def first_batch(r):
        if not produced and start_file.exists():  # the start is resolved: these records come after it
            per_partition(own_broker, topic, 3, 0)
            produced.append(True)
        return r.batches >= 1

    job, first, _ = tally_job(source)
    assert job.run(checkpoint_dir=ck, spark=spark, timeout=120, until=first_batch).completed
    assert produced and 0 in first.batches
    logged = (ck / "offsets" / "0").read_text()

    # a crash between batch 0's offsets and its commit, the start file lost too (a checkpoint that
    # is not local has none): the replay starts where batch 0 started, not at the topic's new end;
    # first the broker is down: the run fails naming it and commits nothing
    uncommit(ck, 0)
    start_file.unlink()
    own_broker.stop()
    job, lost, _ = tally_job(source)
    began = time.monotonic()
    with pytest.raises(JobFailedError, match=rf"SourceError: (cannot reach )?Kafka at {own_broker.servers}"):
        job.run(checkpoint_dir=ck, spark=spark, timeout=120, until=lambda r: r.batches >= 1)
    assert time.monotonic() - began < 25  # not librdkafka's 15 s metadata or the 30 s read timeout, and Spark's start
    assert lost.rows() == [] and not (ck / "commits" / "0").exists()

    own_broker.start()
    per_partition(own_broker, topic, 2, 10)  # more while the job was stopped
    job, second, _ = tally_job(source)
    result = job.run(checkpoint_dir=ck, spark=spark, timeout=120, until=lambda r: len(second.rows()) >= 15)
    assert result.completed and (ck / "offsets" / "0").read_text() == logged
    assert second.batches[0] == first.batches[0]  # the replayed first batch read the same records
    # one uninterrupted run's output: every record after the start once (offsets 2.. of each partition)
    assert records(second) == sorted((p, o) for p in range(3) for o in range(2, 7))
    assert all(c == list(range(1, len(c) + 1)) for c in counts(second).values())
    assert max(len(b) for b in second.batches.values()) <= 9


# ------------------------------------------------------------------ (c) a failed batch, (d) new partitions,
# (e) dead letters, (g) a savepoint's offsets


def test_a_failed_batch_replays_new_partitions_are_read_bad_records_are_dead_letters_and_a_savepoint_resumes(
    spark, kafka_broker, tmp_path,
):
    topic = kafka_broker.new_topic("replay", 1)
    events: list[Any] = [*pay(2), {"merchant_id": "boom", "amount": 1.0}, "not json",
                         {"merchant_id": "m1", "amount": "ten"}, None, *pay(3, 2)]
    produce(kafka_broker, topic, events, partition=0)
    source = KafkaSource(kafka_broker.servers, topic, SCHEMA, max_records_per_batch=4)
    ck, flag = tmp_path / "ck", str(tmp_path / "failed-once")

    job, _, _ = tally_job(source, flag)
    with pytest.raises(JobFailedError, match="the first attempt of this batch fails"):
        job.run(checkpoint_dir=ck, spark=spark, timeout=120)
    assert os.path.exists(flag) and not (ck / "commits" / "0").exists()
    logged = (ck / "offsets" / "0").read_text()

    grown = []

    def grow(r):
        if r.batches >= 1 and not grown:  # partitions added while the job runs
            admin = kafka_broker.admin()  # kept until the result is in
            admin.create_partitions([NewPartitions(topic, 3)])[topic].result()
            produce(kafka_broker, topic, pay(2, 5), partition=2)
            grown.append(True)
        return len(sink.rows()) >= 8

    job, sink, dead = tally_job(source, flag)
    result = job.run(checkpoint_dir=ck, spark=spark, timeout=120, until=grow)
    assert result.completed and (ck / "offsets" / "0").read_text() == logged  # replayed from the same offsets
    assert records(sink) == [(0, 0), (0, 1), (0, 2), (0, 6), (0, 7), (0, 8), (2, 0), (2, 1)]
    assert counts(sink) == {"boom": [1], "m0": [1, 2, 3], "m1": [1, 2], "m2": [1, 2]}
    where = f"of {topic!r} partition 0:"
    assert [(d["raw"], d["reason"]) for d in dead.rows()] == [
        ("not json", f"record at offset 3 {where} not valid JSON: Expecting value at character 1"),
        ('{"merchant_id": "m1", "amount": "ten"}',
         f"record at offset 4 {where} column 'amount' (double): expected a number, got string \"ten\""),
        ("", f"record at offset 5 {where} no value (a tombstone)"),
    ]
    assert result.side_outputs == {"dead_letters": 3}

    # a savepoint of batch 0, restored into a new checkpoint: the restored run reads from its
    # Kafka offsets on, exactly what the first run read after batch 0
    take_savepoint(str(ck), target=str(tmp_path / "sp"), batch=0, spark=spark)
    after = [r for b in sorted(sink.batches) if b > 0 for r in sink.batches[b]]
    job, restored, _ = tally_job(source, flag)
    result = job.run(checkpoint_dir=tmp_path / "restored", spark=spark, timeout=120, from_savepoint=str(tmp_path / "sp"),
                     until=lambda r: r.events >= 7 and len(restored.rows()) >= len(after))
    assert result.completed and not any("source" in w for w in result.warnings)
    assert records(restored) == sorted((r["part"], r["offset"]) for r in after)
    assert counts(restored) == {k: sorted(v) for k, v in counts(MemorySink(batches={0: after})).items()}
    assert result.events == 7  # its own records (offsets 4 to 8 and the new partition's 2), not the savepoint's


# ------------------------------------------------------------------ (h) a topic deleted and created again


def test_a_topic_deleted_and_created_again_since_a_checkpoint_or_savepoint_is_refused(spark, kafka_broker, tmp_path):
    from confluent_kafka.admin import NewTopic

    topic = kafka_broker.new_topic("again", 1)
    produce(kafka_broker, topic, pay(3), partition=0)
    source = KafkaSource(kafka_broker.servers, topic, SCHEMA)
    ck = tmp_path / "ck"
    job, first, _ = tally_job(source)
    assert job.run(checkpoint_dir=ck, spark=spark, timeout=120,
                   until=lambda r: r.batches >= 1 and len(first.rows()) >= 3).completed
    take_savepoint(str(ck), target=str(tmp_path / "sp"), spark=spark)

    # stopped; the topic deleted and created again with more records than the checkpoint read
    admin = kafka_broker.admin()
    admin.delete_topics([topic])[topic].result()
    admin.create_topics([NewTopic(topic, 1)])[topic].result()
    produce(kafka_broker, topic, pay(5, 10), partition=0)

    for resume in ({"checkpoint_dir": ck}, {"checkpoint_dir": tmp_path / "restored", "from_savepoint": str(tmp_path / "sp")}):
        job, sink, _ = tally_job(source)
        with pytest.raises(JobFailedError, match=rf"topic {topic!r} on Kafka at \S+ was deleted and created again since "
                           r"the (checkpoint|savepoint).*--fresh.*starting_if_recreated"):
            job.run(spark=spark, timeout=120, until=lambda r: r.batches >= 1, **resume)
        assert sink.rows() == []

    # told where to read the new topic from, the checkpoint goes on with its state
    told = KafkaSource(kafka_broker.servers, topic, SCHEMA, starting_if_recreated="earliest")
    job, sink, _ = tally_job(told)
    assert job.run(checkpoint_dir=ck, spark=spark, timeout=120, until=lambda r: len(sink.rows()) >= 5).completed
    assert records(sink) == [(0, o) for o in range(5)]
    assert counts(sink)["m0"][0] == 2  # m0 had one event before: its state was kept
