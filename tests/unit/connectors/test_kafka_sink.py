"""The transactional Kafka sink's protocol against a real broker (noida-db), without Spark.

Each test writes to topics of its own and keeps its batch markers in a marker topic of its
own, so that a transaction another test leaves open never stands in its way. "A new run" of a
writer is simulated in one process by forgetting the module's producers (``close_all``): the
next ``prepare`` initialises a new producer under the same ``transactional.id``, as a new
process would.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest

from sparkstate import KafkaSink
from sparkstate.connectors.kafka import client, protocol
from sparkstate.connectors.kafka.sink import parse_kafka_sink
from sparkstate.errors import SinkError


@pytest.fixture(autouse=True)
def new_process():
    protocol.close_all()
    yield
    protocol.close_all()


def new_sink(broker: Any, partitions: int = 1, **kwargs: Any) -> KafkaSink:
    """An exactly-once sink of a new job, to a new topic, with a marker topic of its own."""
    topic = broker.new_topic("out", partitions)
    kwargs.setdefault("marker_topic", f"markers-{uuid.uuid4().hex[:8]}")
    return KafkaSink(broker.servers, topic, **kwargs).for_job(f"job-{uuid.uuid4().hex[:6]}")


def rows(*values: int, prefix: str = "k") -> pa.Table:
    return pa.Table.from_pylist([{"k": f"{prefix}{v}", "v": v} for v in values])


def values(broker: Any, topic: str, committed: bool = True) -> list[int]:
    return [r["value"]["v"] for r in broker.read(topic, committed=committed)]


def test_a_batch_and_its_marker_are_one_transaction(kafka_broker):
    sink = new_sink(kafka_broker, key="k")
    protocol.prepare([sink], None)
    out = protocol.commit_batch(sink, rows(1, 2), 0)
    assert (out.rows, out.refused) == (2, [])
    got = kafka_broker.read(sink.topic)
    assert [(r["key"], r["value"]) for r in got] == [("k1", {"k": "k1", "v": 1}), ("k2", {"k": "k2", "v": 2})]
    markers = kafka_broker.read(sink.marker_topic)
    assert [(m["key"], m["value"]) for m in markers] == [
        (sink.writer(0), {"writer": sink.writer(0), "batch": 0, "rows": 2, "topic": sink.topic})]
    assert protocol.read_top_marker(sink) == 0


def test_an_aborted_attempt_is_seen_only_by_read_uncommitted_readers(kafka_broker, monkeypatch):
    sink = new_sink(kafka_broker)
    protocol.prepare([sink], None)
    protocol.commit_batch(sink, rows(1), 0)

    def killed(point: str) -> None:
        raise RuntimeError(f"killed at {point}")

    monkeypatch.setattr(protocol, "fault_point", killed)
    with pytest.raises(RuntimeError, match="killed at sink.rows-written"):
        protocol.commit_batch(sink, rows(2, 3), 1)
    monkeypatch.undo()
    assert values(kafka_broker, sink.topic) == [1]
    assert values(kafka_broker, sink.topic, committed=False) == [1, 2, 3]  # the records reached the broker
    assert protocol.read_top_marker(sink) == 0
    # the failed producer is gone: the next attempt fences it, reads the marker and writes the batch once
    assert protocol.commit_batch(sink, rows(2, 3), 1).rows == 2
    assert values(kafka_broker, sink.topic) == [1, 2, 3]
    assert values(kafka_broker, sink.topic, committed=False) == [1, 2, 3, 2, 3]


def test_a_replayed_batch_writes_nothing(kafka_broker):
    sink = new_sink(kafka_broker)
    protocol.prepare([sink], None)
    protocol.commit_batch(sink, rows(1), 0)
    protocol.commit_batch(sink, rows(2), 1)
    assert protocol.commit_batch(sink, rows(9), 1).rows is None
    assert protocol.commit_batch(sink, rows(9), 0).rows is None
    # a new run whose checkpoint has committed batch 0 only: Kafka has batch 1, which it skips
    protocol.close_all()
    protocol.prepare([sink], 0)
    assert protocol.commit_batch(sink, rows(9), 1).rows is None
    assert protocol.commit_batch(sink, rows(3), 2).rows == 1
    assert values(kafka_broker, sink.topic) == [1, 2, 3]
    assert values(kafka_broker, sink.topic, committed=False) == [1, 2, 3]


def test_a_new_run_fences_its_zombie(kafka_broker, monkeypatch):
    sink = new_sink(kafka_broker)
    protocol.prepare([sink], None)
    protocol.commit_batch(sink, rows(1), 0)
    zombie = dict(protocol._producers)

    def new_run_starts(point: str) -> None:
        # the zombie's transaction is open with its records at the broker: a new run starts
        monkeypatch.setattr(protocol, "fault_point", lambda point: None)
        protocol._producers.clear()
        protocol._tops.clear()
        protocol.prepare([sink], 0)

    monkeypatch.setattr(protocol, "fault_point", new_run_starts)
    with pytest.raises(SinkError, match="fenced off by a newer run") as failed:
        protocol.commit_batch(sink, rows(66, 67), 1)
    assert "did not commit batch 1" in str(failed.value)
    assert protocol._producers[sink.transactional_id()] is not zombie[sink.transactional_id()]  # the new run's is kept
    assert protocol.commit_batch(sink, rows(2), 1).rows == 1
    assert values(kafka_broker, sink.topic) == [1, 2]
    assert [m["value"]["batch"] for m in kafka_broker.read(sink.marker_topic)] == [0, 1]


def test_a_second_run_in_the_same_process_writes_though_another_run_fenced_the_first(kafka_broker):
    from confluent_kafka import Producer

    sink = new_sink(kafka_broker)
    protocol.prepare([sink], None)
    protocol.commit_batch(sink, rows(1), 0)
    elsewhere = Producer({"bootstrap.servers": kafka_broker.servers, "transactional.id": sink.transactional_id()})
    elsewhere.init_transactions(10)  # another process's run of the job fences this one's producer
    protocol.prepare([sink], 0)  # this process runs the job again: with a producer of its own
    assert protocol.commit_batch(sink, rows(2), 1).rows == 1
    assert values(kafka_broker, sink.topic) == [1, 2]


def test_markers_beyond_the_checkpoint_are_refused(kafka_broker):
    sink = new_sink(kafka_broker)
    protocol.prepare([sink], None)
    for batch in range(3):
        protocol.commit_batch(sink, rows(batch), batch)
    protocol.close_all()
    with pytest.raises(SinkError) as refused:
        protocol.prepare([sink], None)
    text = str(refused.value)
    assert f"holds markers up to batch 2 of writer {sink.marker!r}" in text
    assert "the checkpoint has committed no batch" in text and "--fresh" in text
    with pytest.raises(SinkError, match="checkpoint has committed batches up to 0"):
        protocol.prepare([sink], 0)
    protocol.prepare([sink], 1)  # batch 2 committed to Kafka, not to Spark: a replay to skip


def test_a_missing_topic_is_refused_unless_the_sink_creates_it(kafka_broker):
    topic, other = (f"absent-{uuid.uuid4().hex[:8]}" for _ in range(2))
    markers = f"m-{uuid.uuid4().hex[:8]}"
    sink = KafkaSink(kafka_broker.servers, topic, marker_topic=markers).for_job("j")
    side = KafkaSink(kafka_broker.servers, other, marker_topic=markers).for_side_output("j", "late")
    with pytest.raises(SinkError) as refused:
        protocol.prepare([sink, side], None)
    text = str(refused.value)
    assert f"topics {topic!r}, {other!r} do not exist on Kafka at {kafka_broker.servers}" in text
    assert "create_topics=True" in text and "&create=true" in text
    assert topic not in kafka_broker.admin().list_topics(timeout=10).topics  # looking did not create it
    made = KafkaSink(kafka_broker.servers, topic, create_topics=True, partitions=3, marker_topic=markers).for_job("j")
    # the topic of a side output without a sink of its own is sparkstate's: created when missing
    protocol.prepare([made, made.side_table("dead_letters")], None)
    meta = kafka_broker.admin().list_topics(timeout=10).topics
    assert len(meta[topic].partitions) == 3
    assert len(meta[f"{topic}-dead_letters"].partitions) == 1
    assert len(meta[markers].partitions) == 1


def test_at_least_once_writes_a_replayed_batch_again(kafka_broker):
    sink = new_sink(kafka_broker, guarantee="at-least-once")
    protocol.prepare([sink], None)
    assert protocol.commit_batch(sink, rows(1, 2), 0).rows == 2
    assert protocol.commit_batch(sink, rows(1, 2), 0).rows == 2
    assert values(kafka_broker, sink.topic) == [1, 2, 1, 2]
    topics = kafka_broker.admin().list_topics(timeout=10).topics
    assert sink.marker_topic not in topics  # no transactions, no markers


def test_rows_that_cannot_be_records_are_dead_letters_and_the_batch_goes_on(kafka_broker):
    sink = new_sink(kafka_broker, options={"message.max.bytes": 2000})
    protocol.prepare([sink], None)
    data = pa.Table.from_pylist([
        {"k": "a", "x": 1.0, "s": "ok"},
        {"k": "b", "x": float("nan"), "s": "nan"},
        {"k": "c", "x": 2.0, "s": "y" * 5000},
        {"k": "d", "x": 3.0, "s": "ok"},
    ])
    out = protocol.commit_batch(sink, data, 0)
    assert out.rows == 2
    dead = sorted(out.refused, key=lambda d: d["reason"])
    assert len(dead) == 2
    assert dead[0]["reason"].startswith("row 1 cannot be a JSON record") and "NaN" in dead[0]["raw"]
    assert dead[1]["reason"].startswith("row 2 is 5,") and "message.max.bytes" in dead[1]["reason"]
    assert [r["value"]["k"] for r in kafka_broker.read(sink.topic)] == ["a", "d"]
    # a replay returns the same dead letters (the dispatcher writes them to their own writer)
    assert len(protocol.commit_batch(sink, data, 0).refused) == 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SECRET = "s3cret-Pa55word"
SASL = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
        "sasl.password": SECRET}


def test_a_broker_down_at_start_names_the_servers_and_never_the_password(monkeypatch):
    monkeypatch.setattr(client, "METADATA_TIMEOUT_S", 1.5)
    monkeypatch.setattr(protocol, "METADATA_TIMEOUT_S", 1.5)
    servers = f"127.0.0.1:{_free_port()}"
    for sink in (KafkaSink(servers, "out", options=SASL).for_job("j"),
                 parse_kafka_sink(f"kafka://alice:{SECRET}@{servers}/out").for_job("j")):
        assert SECRET not in repr(sink) and SECRET not in sink.describe()
        with pytest.raises(SinkError) as failed:
            protocol.prepare([sink], None)
        text = str(failed.value)
        assert f"cannot reach Kafka at {servers}" in text
        assert SECRET not in text and SECRET not in repr(failed.value)
        with pytest.raises(SinkError) as failed:
            protocol.commit_batch(sink, rows(1), 0)
        assert servers in str(failed.value) and SECRET not in str(failed.value)


def test_a_broker_lost_mid_batch_commits_nothing_and_the_next_run_writes_the_batch(monkeypatch):
    from kafka_server import LocalKafka

    broker = LocalKafka()
    try:
        broker.start()
        sink = new_sink(broker, options={"message.timeout.ms": 2000})
        protocol.prepare([sink], None)
        protocol.commit_batch(sink, rows(1), 0)
        broker.stop()
        monkeypatch.setattr(protocol, "COMMIT_TIMEOUT_S", 2.0)
        monkeypatch.setattr(protocol, "METADATA_TIMEOUT_S", 1.0)
        with pytest.raises(SinkError) as failed:
            protocol.commit_batch(sink, rows(2), 1)
        text = str(failed.value)
        assert f"writing batch 1 to topic {sink.topic!r} on Kafka at {broker.servers} failed" in text
        assert "the next run writes it again" in text
        monkeypatch.undo()
        broker.start()  # same port, same data
        protocol.close_all()
        protocol.prepare([sink], 0)
        assert protocol.commit_batch(sink, rows(2), 1).rows == 1
        assert values(broker, sink.topic) == [1, 2]
    finally:
        broker.remove()


def test_reading_the_markers_waits_for_a_transaction_open_on_the_marker_topic(kafka_broker):
    from confluent_kafka import Producer

    sink = new_sink(kafka_broker)
    protocol.prepare([sink], None)
    protocol.commit_batch(sink, rows(1), 0)
    other = Producer({"bootstrap.servers": kafka_broker.servers, "transactional.id": f"other-{uuid.uuid4().hex[:6]}"})
    other.init_transactions(10)
    other.begin_transaction()
    other.produce(sink.marker_topic, b'{"batch": 5}', b"another-writer")
    assert other.flush(10) == 0
    started = time.monotonic()
    with pytest.raises(SinkError, match="still open"):
        protocol.read_top_marker(sink, timeout_s=1.0)
    assert time.monotonic() - started < 8  # bounded
    threading.Timer(1.0, lambda: other.commit_transaction(10)).start()
    started = time.monotonic()
    assert protocol.read_top_marker(sink, timeout_s=20) == 0
    assert time.monotonic() - started >= 0.5  # it waited for the commit


def test_reset_makes_a_writer_start_over_and_the_records_stay(kafka_broker):
    sink = new_sink(kafka_broker)
    restored = replace(sink, restored_from="sp-1")
    protocol.prepare([sink, restored], None)
    for batch in range(3):
        protocol.commit_batch(sink, rows(batch), batch)
    protocol.commit_batch(restored, rows(7), 0)
    protocol.close_all()
    note = protocol.reset(sink, (None, "sp-1"))
    assert note is not None and f"kept the records of topic {sink.topic!r}" in note
    assert "cannot be deleted" in note
    assert protocol.read_top_marker(sink) is None
    assert protocol.read_top_marker(restored) is None
    assert kafka_broker.read(sink.marker_topic)[-1]["value"] == {
        "writer": restored.writer(0), "batch": None, "reset": True, "topic": sink.topic}
    protocol.close_all()
    protocol.prepare([sink], None)  # a new checkpoint: accepted
    assert protocol.commit_batch(sink, rows(10), 0).rows == 1
    assert values(kafka_broker, sink.topic) == [0, 1, 2, 7, 10]
    assert protocol.read_top_marker(sink) == 0
    # a writer with no markers and a topic with no records: nothing to reset, nothing to say
    empty = new_sink(kafka_broker)
    assert protocol.reset(empty) is None


def test_a_marker_sparkstate_did_not_write_is_refused(kafka_broker):
    sink = new_sink(kafka_broker)
    kafka_broker.produce(sink.marker_topic, [{"batch": "seven"}], key=lambda v: sink.writer(0))
    with pytest.raises(SinkError, match="that sparkstate did not write"):
        protocol.read_top_marker(sink)


def test_fresh_resets_the_kafka_writers_and_says_the_records_stay(kafka_broker, tmp_path):
    from sparkstate import Job, ListSource
    from sparkstate.connectors.database import bind_job_sinks
    from sparkstate.runtime.checkpoint.directory import CheckpointDir
    from sparkstate.runtime.checkpoint.fresh import start_fresh

    base = new_sink(kafka_broker)
    job = bind_job_sinks(Job(base.job).source(ListSource([[{"k": "a"}]], "k string")).sink(base))
    sink = job.sink_spec
    assert sink.marker == base.marker
    protocol.prepare([sink], None)
    protocol.commit_batch(sink, rows(1), 0)
    protocol.close_all()
    notes = start_fresh(job, CheckpointDir.open(tmp_path / "ckpt"))
    assert len(notes) == 1 and "--fresh kept the records of topic" in notes[0]
    assert protocol.read_top_marker(sink) is None
    protocol.prepare([sink], None)


def test_fresh_with_an_unreachable_broker_deletes_nothing(tmp_path, monkeypatch):
    import json

    from sparkstate import Job, ListSource
    from sparkstate.connectors.database import bind_job_sinks
    from sparkstate.runtime.checkpoint.directory import CheckpointDir
    from sparkstate.runtime.checkpoint.fresh import start_fresh

    monkeypatch.setattr(client, "METADATA_TIMEOUT_S", 1.0)
    servers = f"127.0.0.1:{_free_port()}"
    job = bind_job_sinks(Job("j").source(ListSource([[{"k": "a"}]], "k string")).sink(
        KafkaSink(servers, "out", options=SASL)))
    (tmp_path / "ckpt").mkdir()
    metadata = tmp_path / "ckpt" / CheckpointDir.METADATA_FILE
    metadata.write_text(json.dumps({"job": "j"}))
    with pytest.raises(SinkError, match=f"cannot reach Kafka at {servers}") as failed:
        start_fresh(job, CheckpointDir.open(tmp_path / "ckpt"))
    assert SECRET not in str(failed.value)
    assert metadata.exists()  # the checkpoint is kept


def test_a_restored_run_is_told_of_the_batches_written_after_the_savepoint(kafka_broker):
    """A savepoint records its Kafka writers and their last batches; a run restored from it
    gets its own writer (its batch ids start at 0 again) and is told that the topic already
    holds the batches the old writer wrote after the savepoint's, which it writes again."""
    from sparkstate import Job, ListSource
    from sparkstate.connectors.database import bind_job_sinks
    from sparkstate.jobs.running_sum import OUTPUT, RunningSum
    from sparkstate.runtime.io.sinks import database_writers, restore_warnings

    sink = new_sink(kafka_broker, key="k")
    job = bind_job_sinks(
        Job(sink.job).source(ListSource([[{"merchant_id": "m", "amount": 1.0}]], "merchant_id string, amount double"))
        .key_by("merchant_id").process(RunningSum(), output_schema=OUTPUT).sink(sink)
    )
    protocol.prepare([job.sink_spec], None)
    for batch in range(4):
        protocol.commit_batch(job.sink_spec, rows(batch), batch)
    recorded = database_writers(job, tops=True)
    assert recorded[0] == {"topic": sink.topic, "writer": sink.marker, "kafka": sink.describe(), "top_batch": 3}
    # rows the sink refuses go to <topic>-dead_letters, a writer of its own (no batch yet)
    assert [(e["topic"], e["top_batch"]) for e in recorded[1:]] == [(f"{sink.topic}-dead_letters", None)]

    restored = bind_job_sinks(job, restored_from="sp-1")
    assert restored.sink_spec.marker == f"{sink.marker}#sp-1"
    (note,) = restore_warnings(restored, {"batch": 1, "sinks": recorded})
    assert f"topic {sink.topic!r}" in note and f"holds batches 2 to 3 of writer {sink.marker!r}" in note
    assert restore_warnings(restored, {"batch": 3, "sinks": recorded}) == []


# ------------------------------------------------------------------ parts written by tasks


def batches(*values: int) -> list[pa.RecordBatch]:
    return rows(*values).to_batches()


def test_each_part_of_a_batch_is_a_transaction_of_its_own_and_a_replay_writes_only_the_parts_not_committed(
    kafka_broker, monkeypatch
):
    sink = new_sink(kafka_broker, 2, key="k")
    protocol.prepare([sink], None, {sink.marker: 2})
    assert protocol.write_part(sink, 0, 0, batches(1, 2)) == []
    assert protocol.write_part(sink, 1, 0, batches(3)) == []
    # batch 1: part 0 commits, part 1 dies with its transaction open (its records at the broker)
    assert protocol.write_part(sink, 0, 1, batches(4)) == []

    def killed(point: str) -> None:
        raise KeyboardInterrupt  # the task's process dies here: nothing after runs

    monkeypatch.setattr(protocol, "fault_point", killed)
    with pytest.raises(KeyboardInterrupt):
        protocol.write_part(sink, 1, 1, batches(55, 56))
    monkeypatch.setattr(protocol, "fault_point", lambda point: None)
    assert sorted(values(kafka_broker, sink.topic)) == [1, 2, 3, 4]  # read_committed: the open part is not there
    # the restart replays batch 1 with the same rows: part 0 finds its marker, part 1 writes its share
    protocol.close_all()
    protocol.prepare([sink], 0, {sink.marker: 2})
    assert protocol.write_part(sink, 0, 1, batches(4)) == []
    assert protocol.write_part(sink, 1, 1, batches(5, 6)) == []
    assert sorted(values(kafka_broker, sink.topic)) == [1, 2, 3, 4, 5, 6]
    assert protocol.read_part_tops(sink) == {0: 1, 1: 1}
    assert protocol.read_top_marker(sink) == 1
    assert 55 in values(kafka_broker, sink.topic, committed=False)  # aborted: seen by read_uncommitted readers only


def test_a_task_fences_an_earlier_attempt_of_its_part(kafka_broker, monkeypatch):
    sink = new_sink(kafka_broker, 1)
    protocol.prepare([sink], None, {sink.marker: 1})
    attempts: list[str] = []

    def second_attempt_starts(point: str) -> None:
        # the first attempt has its records at the broker; Spark starts the task again meanwhile
        if not attempts:
            attempts.append("retry")
            assert protocol.write_part(sink, 0, 0, batches(1, 2)) == []

    monkeypatch.setattr(protocol, "fault_point", second_attempt_starts)
    with pytest.raises(SinkError, match=r"writer '.*/p0' .* was fenced off .* did not commit batch 0"):
        protocol.write_part(sink, 0, 0, batches(1, 2))
    assert values(kafka_broker, sink.topic) == [1, 2]  # the batch's part once
    # a third attempt (the second failed after its commit): finds the part written
    assert protocol.write_part(sink, 0, 0, batches(1, 2)) == []
    assert values(kafka_broker, sink.topic) == [1, 2]


def test_a_part_finds_its_last_marker_behind_many_others_and_after_a_reset(kafka_broker):
    sink = new_sink(kafka_broker, 1)
    others = [replace(sink, job=f"other-{i}") for i in range(3)]
    protocol.prepare([sink, *others], None, {sink.marker: 2})
    protocol.write_part(sink, 1, 0, batches(1))
    protocol.write_part(sink, 1, 1, batches(2))
    for batch in range(120):  # 360 markers of other writers after it, in one transaction each
        for other in others:
            protocol.commit_batch(other, rows(), batch)
    assert protocol.read_part_top(sink, 1) == 1
    assert protocol.read_part_top(sink, 0) is None  # a part that wrote nothing
    assert protocol.write_part(sink, 1, 1, batches(2)) == []  # a replay: nothing again
    assert values(kafka_broker, sink.topic) == [1, 2]
    protocol.close_all()
    protocol.reset(sink, parts=2)
    assert protocol.read_part_top(sink, 1) is None and protocol.read_top_marker(sink) is None
    protocol.prepare([sink], None, {sink.marker: 2})  # the new checkpoint starts at batch 0 again
    protocol.write_part(sink, 1, 0, batches(9))
    assert values(kafka_broker, sink.topic) == [1, 2, 9]


def test_a_part_hands_back_the_rows_it_cannot_write_and_at_least_once_parts_write_without_markers(kafka_broker):
    sink = new_sink(kafka_broker, 1, key="k", options={"message.max.bytes": 2000})
    protocol.prepare([sink], None, {sink.marker: 1})
    data = pa.Table.from_pylist([{"k": "a", "v": 1.0}, {"k": "b", "v": float("nan")}, {"k": "c", "v": 3.0}])
    big = pa.Table.from_pylist([{"k": "d" * 3000, "v": 4.0}])
    dead = protocol.write_part(sink, 0, 0, [*data.to_batches(), *big.to_batches()])
    assert len(dead) == 2 and "record limit" in dead[1]["reason"]
    assert [r["value"]["k"] for r in kafka_broker.read(sink.topic)] == ["a", "c"]
    loose = replace(new_sink(kafka_broker, 1, key="k"), guarantee="at-least-once")
    protocol.prepare([loose], None, {loose.marker: 1})
    assert protocol.write_part(loose, 0, 0, batches(1)) == []
    assert protocol.write_part(loose, 0, 0, batches(1)) == []  # a replay writes again
    assert values(kafka_broker, loose.topic) == [1, 1]
    assert kafka_broker.read(loose.marker_topic) == []


def test_a_part_slower_than_the_users_transaction_timeout_is_named_so_and_its_replay_writes_it_once(kafka_broker):
    # the user's transaction.timeout.ms is the producer's (it was overridden with 60 s), and the
    # broker's abort of a part that took longer is named for what it is, with the fix
    sink = new_sink(kafka_broker, 1, options={"transaction.timeout.ms": 2000})
    protocol.prepare([sink], None, {sink.marker: 1})

    def slow_function() -> Any:  # the rows of a slow step: longer than the transaction may stay open
        yield from batches(1, 2)
        time.sleep(3)
        yield from batches(3)

    with pytest.raises(SinkError) as failed:
        protocol.write_part(sink, 0, 0, slow_function())
    text = str(failed.value)
    assert "the transaction of batch 0 of writer" in text and "is aborted: it stayed open" in text
    assert "transaction.timeout.ms=2000 (2 s" in text
    assert "options={'transaction.timeout.ms': N}" in text and "transaction.max.timeout.ms" in text
    assert "zombie" not in text and "fenced" not in text.split("(")[0]
    assert values(kafka_broker, sink.topic) == [] and protocol.read_part_top(sink, 0) is None
    # the replay, at the speed the timeout allows, writes the part once
    assert protocol.write_part(sink, 0, 0, batches(1, 2, 3)) == []
    assert values(kafka_broker, sink.topic) == [1, 2, 3]
    assert protocol.read_part_tops(sink) == {0: 0}


def test_the_transaction_timeout_is_15_minutes_within_the_brokers_largest_and_a_larger_one_is_refused(
    kafka_broker, monkeypatch
):
    # noida-db enforces transaction.max.timeout.ms (15 min) but does not describe it: refused by the producer
    too_long = new_sink(kafka_broker, 1, options={"transaction.timeout.ms": "3600000"})
    with pytest.raises(SinkError) as refused:
        protocol.prepare([too_long], None, {too_long.marker: 1})
    text = str(refused.value)
    assert "asks for transaction.timeout.ms=3600000, more than the broker" in text
    assert "transaction.max.timeout.ms" in text and "options={'transaction.timeout.ms': N}" in text
    sink = new_sink(kafka_broker, 1)  # and the default stands
    assert protocol.transaction_timeout_ms(sink) == 900_000 == protocol.DEFAULT_TRANSACTION_TIMEOUT_MS
    protocol.prepare([sink], None, {sink.marker: 1})
    assert protocol.write_part(protocol.with_transaction_timeout(sink), 0, 0, batches(1)) == []
    # a broker that says its largest (Apache Kafka does): the default is lowered to it, a larger
    # setting refused before any topic is made
    protocol.close_all()
    monkeypatch.setattr(protocol, "_broker_config",
                        lambda admin, sink, name: "300000" if name == "transaction.max.timeout.ms" else None)
    assert protocol.transaction_timeout_ms(sink) == 300_000
    assert protocol.with_transaction_timeout(sink).options["transaction.timeout.ms"] == 300_000
    above = replace(too_long, options={"transaction.timeout.ms": 600_000}, marker_topic=f"m-{uuid.uuid4().hex[:8]}")
    with pytest.raises(SinkError, match=r"transaction.timeout.ms=600000, more than .* transaction.max.timeout.ms=300000"):
        protocol.prepare([above], None)
    assert above.marker_topic not in kafka_broker.admin().list_topics(timeout=10).topics


def test_the_sink_settings_of_timeout_and_marker_replicas_from_a_url_and_refused_when_wrong():
    sink = parse_kafka_sink("kafka://h:9092/t?transaction.timeout.ms=120000&marker_replication=3")
    assert sink.transaction_timeout_ms == 120_000 and sink.marker_replication == 3
    assert sink.options == {"transaction.timeout.ms": "120000"}  # librdkafka's setting, passed on
    assert KafkaSink("h:9092", "t").transaction_timeout_ms is None
    from sparkstate.errors import JobDefinitionError

    for bad in ("0", "-5", "soon"):
        with pytest.raises(JobDefinitionError, match="transaction.timeout.ms must be a positive number"):
            KafkaSink("h:9092", "t", options={"transaction.timeout.ms": bad})
    with pytest.raises(JobDefinitionError, match="marker_replication must be a positive"):
        parse_kafka_sink("kafka://h:9092/t?marker_replication=many")
    with pytest.raises(JobDefinitionError, match="marker_replication must be a positive int"):
        KafkaSink("h:9092", "t", marker_replication=0)


def _topic_config(broker: Any, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = broker.admin()  # kept until the result is in: a dropped client cancels its requests
    return {k: v.value for k, v in admin.describe_configs([resource])[resource].result().items()}


def test_the_marker_topic_is_created_compacted_with_the_replicas_asked(kafka_broker):
    sink = new_sink(kafka_broker, 1)
    protocol.prepare([sink], None, {sink.marker: 1})
    config = _topic_config(kafka_broker, sink.marker_topic)
    assert config["cleanup.policy"] == "compact" and config["segment.ms"] == "3600000"
    meta = kafka_broker.admin().list_topics(timeout=10).topics[sink.marker_topic]
    assert [len(p.replicas) for p in meta.partitions.values()] == [1]  # min(3, brokers) of one broker
    # three replicas asked of a one-broker cluster: the broker's refusal, and how to ask for fewer
    three = new_sink(kafka_broker, 1, marker_replication=3)
    with pytest.raises(SinkError) as refused:
        protocol.prepare([three], None)
    text = str(refused.value)
    assert f"cannot create topic {three.marker_topic!r}" in text and "3 replicas" in text
    assert "marker_replication=N" in text


def test_an_existing_marker_topic_that_deletes_its_markers_is_warned_of_with_the_fix(kafka_broker, caplog):
    marker_topic = kafka_broker.new_topic("markers")  # the broker's defaults: cleanup.policy=delete
    sink = new_sink(kafka_broker, 1, marker_topic=marker_topic)
    with caplog.at_level("WARNING", logger="sparkstate.sinks"):
        protocol.prepare([sink], None, {sink.marker: 1})
    warned = [r.getMessage() for r in caplog.records if marker_topic in r.getMessage()]
    assert len(warned) == 1
    assert "has cleanup.policy=delete" in warned[0] and "retention.ms=604800000" in warned[0]
    assert "written twice" in warned[0] and "--add-config cleanup.policy=compact" in warned[0]
    assert protocol.write_part(sink, 0, 0, batches(1)) == []  # a warning: the job runs
    compacted = new_sink(kafka_broker, 1)
    caplog.clear()
    with caplog.at_level("WARNING", logger="sparkstate.sinks"):
        protocol.prepare([compacted], None, {compacted.marker: 1})
        protocol.close_all()
        protocol.prepare([compacted], None, {compacted.marker: 1})  # now existing, and compacted
    assert not [r for r in caplog.records if "cleanup.policy" in r.getMessage()]
