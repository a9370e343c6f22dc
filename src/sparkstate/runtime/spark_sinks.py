"""Attaching sparkstate's sink specs to a Spark ``DataStreamWriter``.

A job without side outputs writes straight to its sink (Spark's own file sink for Parquet).
A job with side outputs (late data, dead letters, the function's own tags) writes through
:func:`attach_dispatch`: each micro-batch is computed once, its side rows are split off by
tag and each part goes to its sink. Every part of batch ``n`` is written idempotently (Parquet
into ``batch_id=n`` folders, replaced on replay; a database in one transaction with a marker
that a replay finds), so a replayed batch does not double rows.

Database sinks collect each batch on the driver (``df.toArrow()``) and write it in one
transaction (``sparkstate.connectors.database``); :func:`open_database_sinks` checks them
before the query starts.
"""

from __future__ import annotations

import os
import pickle
import shutil
from typing import Any

from sparkstate.connectors import database
from sparkstate.connectors.sinks import ConsoleSink, DatabaseSink, ForeachBatchSink, MemorySink, NoopSink, ParquetSink
from sparkstate.errors import JobDefinitionError
from sparkstate.engine.output import python_rows
from sparkstate.runtime.checkpoint_dir import CheckpointDir


def _print_batch(sink: ConsoleSink, df: Any, batch_id: int, title: str = "") -> None:
    from rich.console import Console
    from rich.table import Table

    table = df if hasattr(df, "num_rows") else df.toArrow()
    if table.num_rows == 0:
        return
    shown = table.slice(0, sink.rows).to_pylist()
    view = Table(title=f"{title}batch {batch_id}: {table.num_rows:,} rows" + (f" (first {len(shown)})" if table.num_rows > len(shown) else ""),
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
    if isinstance(sink, DatabaseSink):
        return writer.foreachBatch(lambda df, batch_id: database.write(sink, df.toArrow(), batch_id))
    raise JobDefinitionError(
        f"unsupported sink {sink!r}; use ConsoleSink, ParquetSink, MemorySink, NoopSink, PostgresSink, SqliteSink "
        "or ForeachBatchSink"
    )


def open_database_sinks(job: Any, checkpoint: CheckpointDir, native: bool) -> Any:
    """Bind the job's database sinks to it and check each one before batch 0 (reachable,
    table created or fitting, markers agreeing with the checkpoint); returns the bound job.

    A job on the native path has no side outputs, so their tables are not created for it.
    """
    job = database.bind_job_sinks(job)
    sinks = database.job_database_sinks(job, with_side_outputs=not native)
    if sinks:
        last, _ = checkpoint.last_committed_offset()
        for sink, schema in sinks:
            database.prepare(sink, schema, last)
    return job


# --------------------------------------------------------------------------- side outputs


def write_batch(sink: Any, df: Any, batch_id: int) -> None:
    """Write one micro-batch's main rows (a batch DataFrame) to ``sink``, idempotently."""
    if isinstance(sink, MemorySink):
        sink.put(batch_id, python_rows(df.toArrow()))
    elif isinstance(sink, ParquetSink):
        df.write.mode("overwrite").parquet(os.path.join(sink.path, f"batch_id={batch_id}"))
    elif isinstance(sink, ConsoleSink):
        _print_batch(sink, df, batch_id)
    elif isinstance(sink, NoopSink):
        df.write.format("noop").mode("overwrite").save()
    elif isinstance(sink, ForeachBatchSink):
        sink.fn(df, batch_id)
    elif isinstance(sink, DatabaseSink):
        database.write(sink, df.toArrow(), batch_id)
    else:
        raise JobDefinitionError(f"unsupported sink {sink!r}")


def write_side(sink: Any, name: str, rows: list, schema: Any, spark: Any, batch_id: int) -> None:
    """Write one batch's rows of side output ``name`` (Python rows) to ``sink``."""
    import pyarrow as pa

    from sparkstate.engine.output import arrow_table

    if isinstance(sink, NoopSink):
        return
    if schema is not None:
        table = arrow_table(rows, schema, schema.arrow)
    else:
        table = pa.Table.from_pylist(rows)
    if isinstance(sink, MemorySink):
        sink.put(batch_id, python_rows(table) if rows else [])
    elif isinstance(sink, ParquetSink):
        import pyarrow.parquet as pq

        folder = os.path.join(sink.path, f"batch_id={batch_id}")
        shutil.rmtree(folder, ignore_errors=True)  # a replayed batch replaces its first attempt
        if rows:
            os.makedirs(folder, exist_ok=True)
            pq.write_table(table, os.path.join(folder, "part-00000.parquet"))
    elif isinstance(sink, ConsoleSink):
        _print_batch(sink, table, batch_id, title=f"{name}: ")
    elif isinstance(sink, ForeachBatchSink):
        if rows:
            sink.fn(spark.createDataFrame(table), batch_id)
    elif isinstance(sink, DatabaseSink):
        database.write(sink, table, batch_id)
    else:
        raise JobDefinitionError(f"unsupported sink {sink!r} for side output {name!r}")


def attach_dispatch(job: Any, writer: Any, default_dir: str, counts: dict[int, dict[str, int]]) -> Any:
    """Configure ``writer`` to split each batch into the main sink and the side-output sinks.

    Side outputs without a sink of their own go to a table beside the main one when the main
    sink is a database (``<table>_<name>``), else to Parquet under ``default_dir/<name>``;
    ``counts[batch_id]`` gets the number of side rows written per side output.
    """
    from pyspark.sql import functions as F

    from sparkstate.runtime.spark_processor import SIDE_COLUMN, SIDE_ROW_COLUMN

    names = job.side_output_names
    schemas = {n: job.side_output_schema(n) for n in names}
    sinks = {n: s or ParquetSink(os.path.join(default_dir, n)) for n, s in database.side_sinks(job).items()}

    def dispatch(df: Any, batch_id: int) -> None:
        # computed once: a second evaluation would run the stateful operator again
        df = df.persist()
        try:
            side = df.where(F.col(SIDE_COLUMN).isNotNull()).select(SIDE_COLUMN, SIDE_ROW_COLUMN).toArrow()
            write_batch(job.sink_spec, df.where(F.col(SIDE_COLUMN).isNull()).drop(SIDE_COLUMN, SIDE_ROW_COLUMN), batch_id)
            by_name: dict[str, list] = {n: [] for n in names}
            for name, blob in zip(side.column(0).to_pylist(), side.column(1).to_pylist()):
                by_name.setdefault(name, []).append(pickle.loads(blob))
            for name, rows in by_name.items():
                write_side(sinks.get(name) or NoopSink(), name, rows, schemas.get(name), df.sparkSession, batch_id)
            counts[batch_id] = {name: len(rows) for name, rows in by_name.items()}
        finally:
            df.unpersist()

    return writer.foreachBatch(dispatch)
