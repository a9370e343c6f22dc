"""Attaching sparkstate's sink specs to a Spark ``DataStreamWriter``."""

from __future__ import annotations

from typing import Any

from sparkstate.connectors.sinks import ConsoleSink, ForeachBatchSink, MemorySink, NoopSink, ParquetSink
from sparkstate.errors import JobDefinitionError
from sparkstate.runtime.output import python_rows


def attach(sink: Any, writer: Any) -> Any:
    """Configure ``writer`` (``df.writeStream``) for ``sink``; returns the writer."""
    if isinstance(sink, MemorySink):
        # one action per batch: a second one would run the stateful operator twice
        return writer.foreachBatch(lambda df, batch_id: sink.put(batch_id, python_rows(df.toArrow())))
    if isinstance(sink, ParquetSink):
        return writer.format("parquet").option("path", sink.path)
    if isinstance(sink, ConsoleSink):
        return writer.format("console").option("numRows", sink.rows).option("truncate", sink.truncate)
    if isinstance(sink, NoopSink):
        return writer.format("noop")
    if isinstance(sink, ForeachBatchSink):
        return writer.foreachBatch(sink.fn)
    raise JobDefinitionError(f"unsupported sink {sink!r}; use ConsoleSink, ParquetSink, MemorySink, NoopSink or ForeachBatchSink")
