"""Sources and sinks."""

from sparkstate.connectors.enrichment import MerchantProfiles, Purchases
from sparkstate.connectors.generator import ClickEvents, Generator, TaxiRides, UpiPayments
from sparkstate.connectors.kafka import KafkaSink, KafkaSource
from sparkstate.connectors.nexmark import NexmarkAuctions, NexmarkBids, NexmarkPersons
from sparkstate.connectors.sinks import (
    ConsoleSink,
    ForeachBatchSink,
    MemorySink,
    NoopSink,
    ParquetSink,
    PostgresSink,
    SqliteSink,
    parse_sink,
)
from sparkstate.connectors.sources import DataFrameSource, FileSource, ListSource, SocketSource

__all__ = [
    "ClickEvents",
    "ConsoleSink",
    "DataFrameSource",
    "FileSource",
    "ForeachBatchSink",
    "Generator",
    "KafkaSink",
    "KafkaSource",
    "ListSource",
    "MemorySink",
    "MerchantProfiles",
    "NexmarkAuctions",
    "NexmarkBids",
    "NexmarkPersons",
    "NoopSink",
    "ParquetSink",
    "PostgresSink",
    "Purchases",
    "SocketSource",
    "SqliteSink",
    "TaxiRides",
    "UpiPayments",
    "parse_sink",
]
