"""Sources and sinks."""

from sparkstate.connectors.generator import UpiPayments
from sparkstate.connectors.sinks import ConsoleSink, ForeachBatchSink, MemorySink, NoopSink, ParquetSink, parse_sink
from sparkstate.connectors.sources import DataFrameSource, ListSource

__all__ = [
    "ConsoleSink",
    "DataFrameSource",
    "ForeachBatchSink",
    "ListSource",
    "MemorySink",
    "NoopSink",
    "ParquetSink",
    "UpiPayments",
    "parse_sink",
]
