"""Kafka in and out without Spark's Kafka connector: a replayable source whose offsets live in
the checkpoint, and a transactional sink (librdkafka through ``confluent-kafka``)."""

from sparkstate.connectors.kafka.sink import KafkaSink
from sparkstate.connectors.kafka.source import KafkaSource

__all__ = ["KafkaSink", "KafkaSource"]
