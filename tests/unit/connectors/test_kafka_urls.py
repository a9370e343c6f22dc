"""``kafka://`` URLs of the command line: ``--source`` (``kafka_source``, a seed job's
``text_source``) and ``--sink`` (``parse_sink``), their options, their errors, and
credentials that no description, repr or message shows."""

from __future__ import annotations

import pytest

from sparkstate.connectors.generator import UpiPayments
from sparkstate.connectors.kafka import KafkaSink, KafkaSource
from sparkstate.connectors.sinks import parse_sink
from sparkstate.errors import JobDefinitionError
from sparkstate.jobs import get_job
from sparkstate.jobs.registry import kafka_source

PAYMENTS = UpiPayments.schema_ddl
SECRET = "Pw-7f3a"


def test_a_kafka_source_url_reads_the_seed_jobs_columns():
    src = get_job("running-sum").text_source("kafka://127.0.0.1:9092/payments")
    assert isinstance(src, KafkaSource)
    assert (src.bootstrap_servers, src.topic, src.schema, src.time_column) == (
        "127.0.0.1:9092", ("payments",), PAYMENTS, "event_time")
    assert (src.format, src.starting, src.options) == ("json", "earliest", {})
    # a CLI run's checkpoint folder is named after the source: another topic, another checkpoint
    assert src.name == "kafka-payments"
    assert str(src.guarantee) == "exactly-once"


def test_source_options_and_librdkafka_settings():
    src = kafka_source(
        "kafka://h1:9092,h2:9092/pay.v2?format=csv&starting=latest&max_records=5000&fetch.max.bytes=1048576",
        PAYMENTS, "event_time")
    assert isinstance(src, KafkaSource)
    assert src.bootstrap_servers == "h1:9092,h2:9092" and src.topic == ("pay.v2",) and src.name == "kafka-pay.v2"
    assert (src.format, src.starting, src.max_records_per_batch) == ("csv", "latest", 5000)
    assert src.options == {"fetch.max.bytes": "1048576"}
    assert kafka_source("kafka://h:1/t?starting=1735689600000", PAYMENTS).starting == "timestamp:1735689600000"
    assert kafka_source("kafka://h:1/t?starting=2025-01-01T00:00:00Z", PAYMENTS).starting == "timestamp:1735689600000"


@pytest.mark.parametrize(("url", "message"), [
    ("kafka://h:1/t?maxrecords=5", "unknown option(s) maxrecords; a Kafka source takes format, starting, max_records, "
                                   "and librdkafka's settings by their dotted names"),
    ("kafka://h:1/t?format=raw", "format must be json or csv"),
    ("kafka://h:1/t?max_records=0", "max_records must be a positive number"),
    ("kafka://h:1/t?max_records=many", "max_records must be a positive number"),
    ("kafka://h:1/t?starting=yesterday", "starting='yesterday' is not a position"),
    ("kafka://h:1/", "expected kafka://HOST:PORT/TOPIC"),
    ("kafka://h:1/a/b", "expected kafka://HOST:PORT/TOPIC"),
    ("kafk://h:1/t", "unknown source 'kafk://h:1/t'; use socket://HOST:PORT or file:DIRECTORY (each with ?format=csv "
                     "for CSV); `sparkstate run --source` also takes kafka://HOST:PORT/TOPIC"),
])
def test_bad_source_urls_say_what_is_wrong(url, message):
    with pytest.raises(JobDefinitionError) as err:
        get_job("running-sum").text_source(url)
    assert message in str(err.value)


def test_a_kafka_sink_url():
    sink = parse_sink("kafka://127.0.0.1:9092/totals?key=merchant_id,device&create=true&partitions=4&job=demo"
                      "&compression.type=lz4")
    assert isinstance(sink, KafkaSink)
    assert (sink.bootstrap_servers, sink.topic, sink.key, sink.create_topics, sink.partitions, sink.job) == (
        "127.0.0.1:9092", "totals", ("merchant_id", "device"), True, 4, "demo")
    assert sink.options == {"compression.type": "lz4"} and sink.transactional
    assert "exactly-once: transactions, read_committed readers" in sink.describe()
    loose = parse_sink("kafka://h:1/out?guarantee=at-least-once")
    assert isinstance(loose, KafkaSink) and not loose.transactional and loose.describe().endswith("(json, at-least-once)")
    assert (loose.key, loose.create_topics, loose.partitions) == ((), False, 1)


@pytest.mark.parametrize(("url", "message"), [
    ("kafka://h:1/out?keys=a", "unknown option(s) keys; a Kafka sink takes key, guarantee, create, partitions, job"),
    ("kafka://h:1/out?guarantee=maybe", "guarantee must be one of exactly-once, at-least-once"),
    ("kafka://h:1/out?create=sure", "create must be true or false"),
    ("kafka://h:1/out?partitions=-1", "partitions must be a positive number"),
    ("kafka://h:1/sparkstate_batches", "the topic of sparkstate's batch markers"),
    ("kafka://h:1/bad%20name", "is not a Kafka topic name"),
    ("mqtt://h:1/out", "unknown sink 'mqtt://h:1/out'; use console"),
])
def test_bad_sink_urls_say_what_is_wrong(url, message):
    with pytest.raises(JobDefinitionError) as err:
        parse_sink(url)
    assert message in str(err.value)


def test_credentials_become_sasl_settings_and_are_never_shown():
    src = kafka_source(f"kafka://app:{SECRET}@broker:9093/payments?sasl.mechanism=SCRAM-SHA-256", PAYMENTS)
    sink = parse_sink(f"kafka://app:{SECRET}@broker:9093/totals?key=merchant_id")
    for spec in (src, sink):
        assert spec.options["sasl.username"] == "app" and spec.options["sasl.password"] == SECRET
        assert spec.options["security.protocol"] == "SASL_PLAINTEXT"
        assert SECRET not in spec.describe() and SECRET not in repr(spec)
    assert src.options["sasl.mechanism"] == "SCRAM-SHA-256" and sink.options["sasl.mechanism"] == "PLAIN"
    assert src.describe() == "kafka broker:9093/payments (json values)"


@pytest.mark.parametrize("url", [
    f"kafka://app:{SECRET}@h:1/t?bogus=1",  # an unknown option
    f"kafka://h:1/t?sasl.password={SECRET}&bogus=1",  # a password in the query
    f"kafka://app:{SECRET}@h:1/",  # no topic
    f"kafka:/app:{SECRET}@h:1/t",  # a mistyped scheme: an unknown source or sink
    f"kafka//app:{SECRET}@h:1/t",
    f"kafka://app:{SECRET}@h:1/t?max_records=x&partitions=x&create=x",
])
def test_no_error_shows_a_password(url):
    for parse in (get_job("running-sum").text_source, parse_sink):
        with pytest.raises(JobDefinitionError) as err:
            parse(url)
        assert SECRET not in str(err.value)
        assert "***" in str(err.value)
