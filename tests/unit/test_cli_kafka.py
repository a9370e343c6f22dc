"""The command line's Kafka parts without Spark: `sparkstate produce` against the real test
broker (noida-db, ``kafka_broker``), `explain` with Kafka URLs, and the refusals of `run`."""

from __future__ import annotations

import time
import uuid

import pytest
from click.testing import CliRunner

from sparkstate.cli import main
from sparkstate.connectors.generator import UpiPayments
from sparkstate.connectors.kafka import KafkaSink
from sparkstate.connectors.kafka.protocol import ensure_topics
from sparkstate.errors import SinkError

SECRET = "Pw-9c1e"


def squashed(text: str) -> str:
    return " ".join(text.split())


def topics(broker) -> set[str]:
    return set(broker.admin().list_topics(timeout=10).topics)


def test_produce_writes_the_payment_generators_events_keyed_by_merchant(kafka_broker):
    topic = f"payments-{uuid.uuid4().hex[:8]}"
    before = time.time() * 1000
    done = CliRunner().invoke(main, ["produce", f"kafka://{kafka_broker.servers}/{topic}", "--events", "3000",
                                     "--merchants", "40", "--partitions", "3", "--create"], terminal_width=250)
    assert done.exit_code == 0, done.output
    out = squashed(done.output)
    assert f"wrote 3,000 events to kafka://{kafka_broker.servers}/{topic} (3 partitions)" in out
    assert "keyed by merchant_id (40 merchants, seed 7)" in out

    records = kafka_broker.read(topic)
    assert len(records) == 3000
    assert {r["partition"] for r in records} == {0, 1, 2}
    assert all(r["key"] == r["value"]["merchant_id"] for r in records)
    by_key: dict[str, set[int]] = {}
    for r in records:
        by_key.setdefault(r["key"], set()).add(r["partition"])
    assert all(len(parts) == 1 for parts in by_key.values())  # a merchant's payments stay in order in one partition

    # the generator's payments, event times moved to now: the last at most now, none 5 s before the first
    events = UpiPayments(events=3000, merchants=40).events_as_dicts()
    in_order = sorted(records, key=lambda r: (r["partition"], r["offset"]))
    for key in list(by_key)[:5]:
        mine = [r["value"] for r in in_order if r["key"] == key]
        theirs = [e for e in events if e["merchant_id"] == key]
        assert [{k: v for k, v in m.items() if k != "event_time"} for m in mine] == [
            {k: v for k, v in e.items() if k != "event_time"} for e in theirs]
    import datetime as dt

    stamps = [dt.datetime.fromisoformat(r["value"]["event_time"]).timestamp() * 1000 for r in records]
    assert max(stamps) <= time.time() * 1000 and min(stamps) >= before - 3000 - 5000 - 1000
    assert all(isinstance(r["value"]["event_time"], str) and r["value"]["event_time"].endswith("Z") for r in records)


def test_produce_at_a_rate_follows_the_clock(kafka_broker):
    topic = kafka_broker.new_topic("paced", 1)
    started = time.time()
    done = CliRunner().invoke(main, ["produce", f"kafka://{kafka_broker.servers}/{topic}", "--events", "2000",
                                     "--rate", "4000", "--quiet"], terminal_width=250)
    took = time.time() - started
    assert done.exit_code == 0, done.output
    assert took >= 0.45, f"2,000 events at 4,000/s took {took:.2f} s"
    assert "wrote 2,000 events" in done.output and "/ 2,000 events" not in done.output  # --quiet: no progress
    import datetime as dt

    stamps = sorted(dt.datetime.fromisoformat(r["value"]["event_time"]).timestamp() for r in kafka_broker.read(topic))
    # event times at the rate (0.5 s apart first to last, less up to 5 s of the generator's disorder)
    assert stamps[-1] - started < 1.0 and stamps[-1] - stamps[0] < 0.5 + 5.0 + 0.01


def test_produce_refuses_a_missing_topic_without_create_and_makes_none(kafka_broker):
    topic = f"missing-{uuid.uuid4().hex[:8]}"
    done = CliRunner().invoke(main, ["produce", f"kafka://{kafka_broker.servers}/{topic}", "--events", "10"],
                              terminal_width=250)
    assert done.exit_code == 1
    assert f"topic '{topic}' does not exist on Kafka at {kafka_broker.servers}: add --create" in squashed(done.output)
    assert topic not in topics(kafka_broker)  # looking for the topic did not create it on the broker


def test_the_sinks_check_of_a_missing_topic_creates_none(kafka_broker):
    """A metadata request that names a missing topic makes the broker create it unless the
    client says not to: the sink's check of its topics must not create the topic it refuses."""
    topic = f"absent-{uuid.uuid4().hex[:8]}"
    sink = KafkaSink(kafka_broker.servers, topic)
    with pytest.raises(SinkError, match=f"topic '{topic}' does not exist"):
        ensure_topics(sink, [(topic, 1, False)])
    assert topic not in topics(kafka_broker)
    ensure_topics(sink, [(topic, 3, True)])
    assert len(kafka_broker.admin().list_topics(topic, timeout=10).topics[topic].partitions) == 3


def test_produce_never_prints_the_password(kafka_broker):
    topic = kafka_broker.new_topic("secret", 1)
    runner = CliRunner()
    done = runner.invoke(main, ["produce", f"kafka://app:{SECRET}@{kafka_broker.servers}/{topic}", "--events", "100"],
                         terminal_width=250)
    assert done.exit_code == 0, done.output
    assert f"kafka://app:***@{kafka_broker.servers}/{topic}" in done.output
    missing = runner.invoke(main, ["produce", f"kafka://app:{SECRET}@{kafka_broker.servers}/nope-{topic}", "--events",
                                   "1"], terminal_width=250)
    bad = runner.invoke(main, ["produce", f"kafka://h:1/{topic}?sasl.password={SECRET}&rate=5", "--events", "1"],
                        terminal_width=250)
    assert missing.exit_code == 1 and "does not exist" in missing.output
    assert bad.exit_code == 1 and "unknown option(s) rate; a Kafka topic to produce to takes only librdkafka's settings" \
        in squashed(bad.output)
    for result in (done, missing, bad):
        assert SECRET not in result.output


def test_explain_shows_the_kafka_source_and_sink_guarantees():
    done = CliRunner().invoke(main, ["explain", "running-sum", "--source", f"kafka://app:{SECRET}@h:9092/payments",
                                     "--sink", "kafka://h:9092/totals?key=merchant_id"], terminal_width=250)
    assert done.exit_code == 0, done.output
    out = squashed(done.output)
    assert "source: kafka h:9092/payments (json values) (exactly-once: replayable (per-partition Kafka offsets in the " \
           "checkpoint))" in out
    assert "sink: kafka h:9092/totals (json, key merchant_id, exactly-once: transactions, read_committed readers)" in out
    # a Kafka source's malformed records are dead letters, written beside the main topic
    assert "side outputs: dead_letters -> kafka h:9092/totals-dead_letters (json, exactly-once" in out
    loose = CliRunner().invoke(main, ["explain", "running-sum", "--sink", "kafka://h:9092/totals?guarantee=at-least-once"],
                               terminal_width=250)
    assert "sink: kafka h:9092/totals (json, at-least-once)" in squashed(loose.output)
    assert SECRET not in done.output


def test_run_on_a_kafka_source_refuses_generator_options_and_bad_urls_before_spark():
    url = f"kafka://app:{SECRET}@h:9092/payments"
    bad = CliRunner().invoke(main, ["run", "running-sum", "--source", url, "--max-batch", "10"], terminal_width=250)
    assert bad.exit_code == 1
    assert "--max-batch: generator options do not apply with --source kafka://app:***@h:9092/payments" in squashed(
        bad.output)
    assert "?max_records=N in its URL" in squashed(bad.output) and SECRET not in bad.output
    bad = CliRunner().invoke(main, ["run", "running-sum", "--source", url + "?max_record=5"], terminal_width=250)
    assert bad.exit_code == 1 and "unknown option(s) max_record" in squashed(bad.output) and SECRET not in bad.output


def test_the_kafka_guides_reader_sees_committed_transactions_only(kafka_broker):
    """The Kafka guide's ``read_committed`` as a reader runs it, on a topic holding a committed
    and an aborted transaction and records written without one; a read_uncommitted reader sees
    the aborted records too, as the guide says."""
    from docs_examples import DOCS, python_blocks, run_blocks

    blocks = [b for b in python_blocks(DOCS / "guides" / "kafka.md") if "def read_committed" in b.code]
    assert len(blocks) == 1
    namespace = run_blocks(blocks)
    topic = kafka_broker.new_topic("readme", 2)
    kafka_broker.produce(topic, [{"n": i} for i in range(5)], transactional_id=f"t-{topic}")
    kafka_broker.produce(topic, [{"n": -i} for i in range(1, 4)], transactional_id=f"t-{topic}", abort=True)
    kafka_broker.produce(topic, [{"n": 9}])
    values = namespace["read_committed"](kafka_broker.servers, topic, idle_s=1.0)
    assert sorted(v["n"] for v in values) == [0, 1, 2, 3, 4, 9]
    # what the guide says read_uncommitted readers see: the aborted records too
    assert sorted(r["value"]["n"] for r in kafka_broker.read(topic, committed=False)) == [-3, -2, -1, 0, 1, 2, 3, 4, 9]
