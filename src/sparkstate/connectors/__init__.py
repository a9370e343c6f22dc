"""Sources and sinks."""

from sparkstate.connectors.generator import ClickEvents, Generator, TaxiRides, UpiPayments
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
from sparkstate.connectors.sources import DataFrameSource, ListSource

__all__ = [
    "ClickEvents",
    "ConsoleSink",
    "DataFrameSource",
    "ForeachBatchSink",
    "Generator",
    "ListSource",
    "MemorySink",
    "NoopSink",
    "ParquetSink",
    "PostgresSink",
    "SqliteSink",
    "TaxiRides",
    "UpiPayments",
    "parse_sink",
]
