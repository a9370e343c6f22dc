"""Attaching sparkstate's sink specs to a Spark ``DataStreamWriter``."""

from __future__ import annotations

from typing import Any

from sparkstate.connectors.sinks import ConsoleSink, ForeachBatchSink, MemorySink, NoopSink, ParquetSink
from sparkstate.errors import JobDefinitionError
from sparkstate.runtime.output import python_rows


def _print_batch(sink: ConsoleSink, df: Any, batch_id: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = df.toArrow()
    if table.num_rows == 0:
        return
    shown = table.slice(0, sink.rows).to_pylist()
    view = Table(title=f"batch {batch_id}: {table.num_rows:,} rows" + (f" (first {len(shown)})" if table.num_rows > len(shown) else ""),
                 title_justify="left")
    for name in table.column_names:
        view.add_column(name, overflow="ellipsis" if sink.truncate else "fold", max_width=40 if sink.truncate else None)
    for row in shown:
        view.add_row(*[str(v) for v in row.values()])
    Console(highlight=False).print(view)


def attach(sink: Any, writer: Any) -> Any:
    """Configure ``writer`` (``df.writeStream``) for ``sink``; returns the writer."""
    if isinstance(sink, MemorySink):
        # one action per batch: a second one would run the stateful operator twice
        return writer.foreachBatch(lambda df, batch_id: sink.put(batch_id, python_rows(df.toArrow())))
    if isinstance(sink, ParquetSink):
        return writer.format("parquet").option("path", sink.path)
    if isinstance(sink, ConsoleSink):
        # Spark's own console sink prints from the JVM, whose output goes to the log file
        return writer.foreachBatch(lambda df, batch_id: _print_batch(sink, df, batch_id))
    if isinstance(sink, NoopSink):
        return writer.format("noop")
    if isinstance(sink, ForeachBatchSink):
        return writer.foreachBatch(sink.fn)
    raise JobDefinitionError(f"unsupported sink {sink!r}; use ConsoleSink, ParquetSink, MemorySink, NoopSink or ForeachBatchSink")
