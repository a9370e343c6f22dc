"""The transactional database sinks' protocol: exactly-once writes of micro-batches.

Flink's two-phase-commit sinks make a checkpoint's output visible only when the checkpoint
completes. Spark's contract is the mirror image: a micro-batch whose commit was not recorded
is run again after a restart with the *same* ``batch_id`` (``foreachBatch`` may see a batch id
twice). So every micro-batch is written in one database transaction that holds both its rows
and a marker row ``(job, batch_id)`` in ``sparkstate_batches``:

1. insert the marker (``ON CONFLICT DO NOTHING``); if it was already there, the batch was
   committed by an earlier attempt: roll back and skip it;
2. insert the rows (append) or merge them by key (upsert);
3. commit: rows and marker become visible together, or neither does.

A reader of the table therefore sees each batch's effect exactly once, whatever crashed
where. The table is created from the job's output schema when missing, and an existing table
is checked against it first, with an error that names the missing, mistyped and unfillable
columns and how to fix them. Batches without rows write nothing (replaying one writes
nothing either).

The dialects (``dialects.py``) differ only in how they connect, name types, read the catalog
and load rows (PostgreSQL: ``COPY``; SQLite: ``executemany``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparkstate.connectors.database.arrow import nested_as_json
from sparkstate.connectors.database.dialects import Dialect, dialect_of, first_line, quote, quote_column
from sparkstate.connectors.sinks import DatabaseSink
from sparkstate.errors import SinkError
from sparkstate.fault_points import SINK_ROWS_WRITTEN, fault_point

MARKER_TABLE = "sparkstate_batches"


@contextmanager
def _session(sink: Any, doing: str) -> Iterator[tuple[Dialect, Any]]:
    """A connection to the sink's database; a driver error rolls back and becomes a
    :class:`SinkError` that names the database, what failed and that nothing was committed."""
    if not isinstance(sink, DatabaseSink) or not sink.table or not sink.job:
        raise SinkError(f"{sink!r} is not a database sink bound to a job (call sink.for_job(name) first)")
    dialect = dialect_of(sink)
    conn = dialect.connect(sink)
    try:
        yield dialect, conn
    except BaseException as exc:
        try:
            conn.rollback()
        except Exception:
            pass
        if isinstance(exc, dialect.errors):
            if dialect.lost(conn, exc):
                raise SinkError(
                    f"lost the connection to {dialect.where(sink)} while {doing}: {first_line(exc)}; "
                    "nothing of it was committed, and a restart writes it again"
                ) from None
            raise SinkError(
                f"{dialect.where(sink)} refused {doing}: {first_line(exc)}; nothing of it was committed"
            ) from None
        raise
    finally:
        try:
            conn.close()
        except Exception:
            pass


def _ensure_marker_table(dialect: Dialect, conn: Any) -> None:
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {MARKER_TABLE} (job {dialect.sql_type(pa.string())} NOT NULL,"
        f" batch_id {dialect.sql_type(pa.int64())} NOT NULL, rows {dialect.sql_type(pa.int64())} NOT NULL,"
        f" committed_at {dialect.now_column}, PRIMARY KEY (job, batch_id))"
    )


def _ensure_table(dialect: Dialect, conn: Any, sink: Any, schema: pa.Schema) -> None:
    """Create the sink's table from ``schema``, or check that the existing one fits it."""
    wanted = {f.name: dialect.sql_type(f.type) for f in schema}
    missing_key = [k for k in sink.key if k not in wanted]
    if missing_key:
        raise SinkError(
            f"{sink.describe()}: upsert key {', '.join(missing_key)} is not among the output columns ({', '.join(wanted)})"
        )
    existing = dialect.columns(conn, sink.table)
    table = quote(sink.table)
    if existing is None:
        defs = [f"{quote_column(n)} {t}" for n, t in wanted.items()]
        if sink.key:
            defs.append(f"PRIMARY KEY ({', '.join(map(quote_column, sink.key))})")
        conn.execute(f"CREATE TABLE {table} ({', '.join(defs)})")
        return
    have = {c.name: c for c in existing}
    problems, fixes = [], []
    missing = [n for n in wanted if n not in have]
    if missing:
        problems.append("missing " + ", ".join(f"{n} ({wanted[n]})" for n in missing))
        fixes.append(f"ALTER TABLE {table} ADD COLUMN {quote_column(missing[0])} {wanted[missing[0]]}")
    mistyped = [n for n in wanted if n in have and not dialect.accepts(wanted[n], have[n].type)]
    if mistyped:
        problems.append("mistyped " + ", ".join(f"{n} is {have[n].type}, the output needs {wanted[n]}" for n in mistyped))
    extra = [c for c in existing if c.name not in wanted and c.required]
    if extra:
        problems.append(
            "extra " + ", ".join(f"{c.name} ({c.type} NOT NULL, no default)" for c in extra)
            + " that the output cannot fill"
        )
        fixes.append(f"ALTER TABLE {table} DROP COLUMN {quote_column(extra[0].name)}")
    if problems:
        raise SinkError(
            f"table {sink.table} in {dialect.where(sink)} does not fit the job's output "
            f"({', '.join(f'{n} {t}' for n, t in wanted.items())}): {'; '.join(problems)}. "
            f"Fix the table (e.g. {'; '.join(fixes) or 'change the column types'}), drop it so that sparkstate creates it "
            "from the output schema, or write to another table (table=...); nothing was written"
        )
    if sink.mode == "upsert" and set(sink.key) not in dialect.unique_keys(conn, sink.table):
        raise SinkError(
            f"table {sink.table} in {dialect.where(sink)} has no primary key or unique constraint on "
            f"({', '.join(sink.key)}), which upsert needs to find a key's row. Add one (e.g. CREATE UNIQUE INDEX ON "
            f"{table} ({', '.join(map(quote_column, sink.key))})), or drop the table so that sparkstate creates it; "
            "nothing was written"
        )


def _storable(data: pa.Table, sink: Any, batch_id: int) -> pa.Table:
    """The batch as the database stores it: nested values as JSON text, and for upsert one
    row per key (the last one: a key's later rows of a batch supersede its earlier ones)."""
    data = nested_as_json(data)
    if sink.mode != "upsert":
        return data
    for k in sink.key:
        if k in data.column_names and data.column(k).null_count:
            raise SinkError(
                f"{sink.describe()}: key column {k} is null in {data.column(k).null_count} rows of batch {batch_id}; "
                "upsert needs a value in every key column"
            )
    row = "__sparkstate_row"
    indexed = data.append_column(row, pa.array(range(data.num_rows), pa.int64()))
    last = indexed.group_by(list(sink.key), use_threads=False).aggregate([(row, "max")])
    if last.num_rows == data.num_rows:
        return data
    keep = last.column(f"{row}_max")
    return data.take(pc.take(keep, pc.sort_indices(keep)))  # in arrival order


def prepare(sink: Any, schema: pa.Schema | None, last_committed: int | None) -> None:
    """Check a sink before a job's first batch: the database is reachable, the marker table
    exists, the table exists or is created from ``schema`` and fits it, and the markers agree
    with the checkpoint (``last_committed``: its last committed batch id, or None).

    A marker beyond ``last_committed + 1`` means this job identity already wrote batches that
    this checkpoint has not run (another checkpoint, or one deleted since): its batches with
    those ids would be skipped as replays, so the run is refused instead.
    """
    with _session(sink, f"preparing table {sink.table}") as (dialect, conn):
        dialect.begin(conn)
        _ensure_marker_table(dialect, conn)
        if schema is not None:
            _ensure_table(dialect, conn, sink, schema)
        p = dialect.param
        top = conn.execute(f"SELECT max(batch_id) FROM {MARKER_TABLE} WHERE job = {p}", (sink.job,)).fetchone()[0]
        if top is not None and (last_committed is None or top > last_committed + 1):
            have = "has committed no batch" if last_committed is None else f"has committed batches up to {last_committed}"
            raise SinkError(
                f"{dialect.where(sink)} already holds batches up to {top} of job {sink.job!r} (table {sink.table}), "
                f"but the checkpoint {have}: they came from another checkpoint, and this run's batches with the same "
                "ids would be skipped. Give this run another job name (job=...), or remove the old output "
                f"(DELETE FROM {MARKER_TABLE} WHERE job = '{sink.job}' and the table's rows; `sparkstate run --fresh` "
                "drops both)"
            )
        conn.commit()


def write(sink: Any, data: pa.Table, batch_id: int) -> int | None:
    """Write micro-batch ``batch_id`` in one transaction with its marker.

    Returns the rows written, or None when the batch had been committed before (a replay,
    skipped). A batch without rows writes nothing.
    """
    if data.num_rows == 0:
        return 0
    schema = data.schema  # the table is checked against the output's types, before JSON encoding
    data = _storable(data, sink, batch_id)
    with _session(sink, f"writing batch {batch_id} to table {sink.table}") as (dialect, conn):
        dialect.begin(conn)
        _ensure_marker_table(dialect, conn)
        _ensure_table(dialect, conn, sink, schema)
        p = dialect.param
        new = conn.execute(
            f"INSERT INTO {MARKER_TABLE} (job, batch_id, rows) VALUES ({p}, {p}, {p}) ON CONFLICT (job, batch_id) DO NOTHING",
            (sink.job, batch_id, data.num_rows),
        ).rowcount
        if new != 1:
            conn.rollback()
            return None
        dialect.insert(conn, sink, data)
        fault_point(SINK_ROWS_WRITTEN)
        conn.commit()
    return data.num_rows


def reset(sink: Any) -> None:
    """Drop the sink's table and forget its job's batches (``sparkstate run --fresh``)."""
    with _session(sink, f"dropping table {sink.table}") as (dialect, conn):
        dialect.begin(conn)
        _ensure_marker_table(dialect, conn)
        conn.execute(f"DROP TABLE IF EXISTS {quote(sink.table)}")
        conn.execute(f"DELETE FROM {MARKER_TABLE} WHERE job = {dialect.param}", (sink.job,))
        conn.commit()


def count_rows(sink: Any) -> int:
    """Rows in the sink's table (0 when it does not exist)."""
    with _session(sink, f"counting the rows of table {sink.table}") as (dialect, conn):
        if dialect.columns(conn, sink.table) is None:
            return 0
        return int(conn.execute(f"SELECT count(*) FROM {quote(sink.table)}").fetchone()[0])
