"""The transactional Kafka sink under real Spark (the broker is noida-db, see tests/kafka_server.py).

One job's life on one checkpoint, with the output topic read with ``read_committed`` after each
step: a first run of two micro-batches; a crash simulated right after the Kafka commit of the
second, before Spark's commit (its entry in the commit log removed, as ``test_db_sinks_spark``
does), so the restart runs it again and the sink must skip it; the rest of the stream; a run
restored from a savepoint, which writes under an identity of its own; and ``--fresh``.

The protocol's own cases (fencing, aborts, dead letters, refusals) are unit tests:
``tests/unit/connectors/test_kafka_sink.py``.
"""

from __future__ import annotations

from collections import Counter

from spark_helpers import FAST
from test_db_sinks_spark import forget_last_commit

from sparkstate import Job, KafkaSink, KeyedProcessFunction, ListSource, ValueStateDescriptor
from sparkstate.connectors.kafka import protocol
from sparkstate.runtime.savepoints.take import take_savepoint

#: one event per key and batch, so each row's total is the same however a batch is ordered;
#: batch 1 holds an event without a key: a dead letter
BATCHES = [[{"k": k, "v": 10 * i + j} for j, k in enumerate("abc")] for i in range(3)]
BATCHES[1].append({"k": None, "v": 99})
OUTPUT = "k string, v bigint, total bigint"


class Total(KeyedProcessFunction):
    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, event, ctx):
        total = self.total.value() + event["v"]
        self.total.update(total)
        yield (ctx.get_current_key(), event["v"], total)


def job(sink: KafkaSink, batches: list, end: bool = True) -> Job:
    source = ListSource(batches, "k string, v bigint", end_of_input=end)
    return (Job("kafka-sink").source(source).key_by("k").process(Total(), output_schema=OUTPUT).sink(sink)
            .with_settings(**FAST, key_groups=4))


def expected(batches: list) -> list[tuple]:
    totals: Counter = Counter()
    out = []
    for batch in batches:
        for e in batch:
            if e["k"] is not None:
                totals[e["k"]] += e["v"]
                out.append((e["k"], e["v"], totals[e["k"]]))
    return out


def written(broker, topic: str) -> list[tuple]:
    records = broker.read(topic)
    assert all(r["key"] == r["value"]["k"] for r in records)  # keyed by the key column
    return [(r["value"]["k"], r["value"]["v"], r["value"]["total"]) for r in records]


def test_kafka_sink_restarted_replayed_restored_and_started_over(spark, kafka_broker, tmp_path):
    topic = kafka_broker.new_topic("totals", 2)
    sink = KafkaSink(kafka_broker.servers, topic, key="k")
    checkpoint = tmp_path / "checkpoint"
    protocol.close_all()

    first = job(sink, BATCHES[:2], end=False).run(checkpoint_dir=checkpoint, spark=spark)
    assert first.completed
    assert sorted(written(kafka_broker, topic)) == sorted(expected(BATCHES[:2]))
    # a crash after batch 1's Kafka commit, before Spark's: a restart (a new process) runs it again
    replayed = forget_last_commit(checkpoint)
    protocol.close_all()
    second = job(sink, BATCHES).run(checkpoint_dir=checkpoint, spark=spark)
    assert second.completed and replayed in [p["batchId"] for p in second.progress]
    assert sorted(written(kafka_broker, topic)) == sorted(expected(BATCHES))  # each batch once
    # each partition of a batch wrote its part in a transaction of its own, with a marker:
    # the replayed batch found every part's marker and wrote nothing again
    markers = [m["value"] for m in kafka_broker.read(sink.marker_topic)
               if m["value"]["writer"].startswith(f"kafka-sink@{topic}/p")]
    parts = {m["writer"] for m in markers}
    assert parts == {f"kafka-sink@{topic}/p{i}" for i in range(2)}, parts
    for part in parts:
        batches = [m["batch"] for m in markers if m["writer"] == part]
        assert batches == sorted(set(batches)) and batches[:3] == [0, 1, 2]
    # the event without a key: a dead letter, in <topic>-dead_letters, once
    dead = kafka_broker.read(f"{topic}-dead_letters")
    assert len(dead) == 1 and '"v": 99' in dead[0]["value"]["raw"].replace('"v":99', '"v": 99')

    # restored from a savepoint of batch 1: batch 2 is written again, by a writer of its own
    savepoint = take_savepoint(str(checkpoint), target=str(tmp_path / "savepoint"), batch=1, spark=spark)
    protocol.close_all()
    restored = job(sink, BATCHES).run(checkpoint_dir=tmp_path / "restored", spark=spark,
                                     from_savepoint=savepoint["location"])
    assert restored.completed
    writers = {m["value"]["writer"] for m in kafka_broker.read(sink.marker_topic)}
    own = {w.rpartition("/")[0] for w in writers if w.startswith(f"kafka-sink@{topic}#")}
    assert len(own) == 1, writers
    again = Counter(written(kafka_broker, topic)) - Counter(expected(BATCHES))
    assert sorted(again.elements()) == sorted(expected(BATCHES)[6:])

    # --fresh: the checkpoint starts over, the topic's records stay (said so), every batch is written again
    protocol.close_all()
    before = len(kafka_broker.read(topic))
    fresh = job(sink, BATCHES).run(checkpoint_dir=checkpoint, spark=spark, fresh=True)
    assert fresh.completed
    assert any(f"--fresh kept the records of topic {topic!r}" in w for w in fresh.warnings), fresh.warnings
    assert sorted(written(kafka_broker, topic)[before:]) == sorted(expected(BATCHES))
