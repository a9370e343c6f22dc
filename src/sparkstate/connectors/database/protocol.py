"""The transactional database sinks' protocol: exactly-once writes of micro-batches.

Flink's two-phase-commit sinks make a checkpoint's output visible only when the checkpoint
completes. Spark's contract is the mirror image: a micro-batch whose commit was not recorded
is run again after a restart with the *same* ``batch_id`` (``foreachBatch`` may see a batch id
twice). So every micro-batch is written in one database transaction that holds both its rows
and a marker row ``(job, batch_id)`` in ``sparkstate_batches``, whose ``job`` is the writer's
identity ``<job name>@<table>`` (:attr:`DatabaseSink.marker`):

1. insert the marker (``ON CONFLICT DO NOTHING``); if it was already there, the batch was
   committed by an earlier attempt: roll back and skip it;
2. insert the rows (append) or merge them by key (upsert);
3. commit: rows and marker become visible together, or neither does.

A reader of the table therefore sees each batch's effect exactly once, whatever crashed
where. The table is created from the job's output schema when missing, and an existing table
is checked against it first, with an error that names the missing, mistyped and unfillable
columns and how to fix them. Batches without rows write their marker too, so that the
markers account for every batch the checkpoint committed.

A row the database would refuse on every attempt (a NUL character in text, NaN in a JSON
value, a null upsert key) is not written: it comes back as a dead letter (the row and the
reason) for the job's dead-letter output, and the batch goes on. The refusals are found
before anything is sent, from the values alone, so a replayed batch finds the same ones.

A table sparkstate creates is recorded as the job's in ``sparkstate_tables`` (same
transaction), so that ``--fresh`` drops only tables the job created: one that existed before
keeps its rows (:func:`reset`).

The dialects (``dialects.py``) differ only in how they connect, name types, read the catalog
and load rows (PostgreSQL: ``COPY``; SQLite: ``executemany``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparkstate.connectors.database.arrow import is_nested, json_default, json_ready, nested_as_json
from sparkstate.connectors.database.dialects import Dialect, dialect_of, first_line, quote, quote_column
from sparkstate.connectors.sinks import MARKER_TABLE, DatabaseSink
from sparkstate.errors import SinkError
from sparkstate.fault_points import SINK_ROWS_WRITTEN, fault_point

log = logging.getLogger("sparkstate.sinks")
#: the tables sparkstate created, and for which job: the only ones ``reset`` drops
CREATED_TABLE = "sparkstate_tables"


@dataclass
class BatchOutcome:
    """What writing one micro-batch did."""

    #: rows written, or None when the batch had been committed before (a replay, skipped)
    rows: int | None
    #: rows not written, as dead letters ``{"raw": the row as JSON, "reason": why}``
    refused: list[dict] = field(default_factory=list)
    #: a replayed batch whose rows differ in number from its first commit's
    warning: str | None = None


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
                    "nothing of it was committed. Check that the server runs and can be reached, then run again: "
                    "the next run writes it again"
                ) from None
            raise SinkError(
                f"{dialect.where(sink)} refused {doing}: {first_line(exc)}; nothing of it was committed. "
                f"{dialect.advice(exc)}"
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


def _ensure_created_table(dialect: Dialect, conn: Any) -> None:
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {CREATED_TABLE} (table_name {dialect.sql_type(pa.string())} NOT NULL PRIMARY KEY,"
        f" job {dialect.sql_type(pa.string())} NOT NULL, created_at {dialect.now_column})"
    )


def _record_created(dialect: Dialect, conn: Any, sink: Any) -> None:
    """Record, in the transaction that creates it, that the job created the sink's table."""
    _ensure_created_table(dialect, conn)
    p = dialect.param
    conn.execute(f"DELETE FROM {CREATED_TABLE} WHERE table_name = {p}", (sink.table,))  # a table dropped since
    conn.execute(f"INSERT INTO {CREATED_TABLE} (table_name, job) VALUES ({p}, {p})", (sink.table, sink.job))


def _ensure_table(dialect: Dialect, conn: Any, sink: Any, schema: pa.Schema) -> None:
    """Create the sink's table from ``schema``, or check that the existing one fits it."""
    wanted = {f.name: dialect.sql_type(f.type) for f in schema}
    limit = dialect.name_bytes
    too_long = [n for n in wanted if limit is not None and len(n.encode()) > limit]
    if too_long:
        raise SinkError(
            f"{sink.describe()}: output column {too_long[0]!r} is {len(too_long[0].encode())} bytes long; "
            f"{dialect.label} keeps only the first {limit} bytes of a name, so the column would be created under "
            "a shorter name, which no later batch would find. Rename the column in the job's output schema "
            f"(at most {limit} bytes); nothing was written"
        )
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
        _record_created(dialect, conn, sink)
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


def _true_rows(mask: Any) -> list[int]:
    """The indices where ``mask`` is true (null is false). An empty batch's mask is not given
    to ``indices_nonzero``: before pyarrow 26.0.1 it crashes the process (SIGSEGV) on an empty
    chunked array (apache/arrow#51018)."""
    if len(mask) == 0:
        return []
    return pc.indices_nonzero(pc.fill_null(mask, False)).to_pylist()


def _refused_rows(dialect: Dialect, sink: Any, data: pa.Table) -> dict[int, str]:
    """The rows of ``data`` that the database would refuse on every attempt, by index, with
    the reason (before JSON encoding: NUL characters in text, null upsert keys)."""
    refused: dict[int, str] = {}

    def refuse(mask: Any, reason: str) -> None:
        for i in _true_rows(mask):
            refused.setdefault(i, reason)

    if sink.mode == "upsert":
        for k in sink.key:
            if k in data.column_names:
                refuse(pc.is_null(data.column(k)), f"key column {k} is null, and upsert needs a value in every key column")
    for f, column in zip(data.schema, data.columns):
        if dialect.loses_nan and pa.types.is_floating(f.type):
            refuse(pc.is_nan(column), f"column {f.name} holds NaN, which {dialect.label} would store as NULL")
        if dialect.refuses_nul and (pa.types.is_string(f.type) or pa.types.is_large_string(f.type)):
            refuse(
                pc.match_substring(column, "\x00"),
                f"column {f.name} holds a NUL character (\\x00), which {dialect.label} text cannot store",
            )
    return refused


#: a NUL character in JSON text: ``\u0000`` not itself escaped (``\\u0000`` is a backslash and "u0000")
_JSON_NUL = r"(^|[^\\])(\\\\)*\\u0000"


def _storable(dialect: Dialect, sink: Any, data: pa.Table, batch_id: int) -> tuple[pa.Table, list[dict]]:
    """The batch as the database stores it (nested values as JSON text, and for upsert one
    row per key, the last: a key's later rows of a batch supersede its earlier ones), and the
    rows it would refuse, as dead letters."""
    refused = _refused_rows(dialect, sink, data)
    nested = [f.name for f in data.schema if is_nested(f.type)]
    stored = nested_as_json(data, refused)
    if dialect.refuses_nul:
        for name in nested:
            mask = pc.match_substring_regex(stored.column(name), _JSON_NUL)
            for i in _true_rows(mask):
                refused.setdefault(
                    i, f"column {name} holds a NUL character (\\u0000 in JSON), which {dialect.label} jsonb cannot store"
                )
    dead = []
    if refused:
        keep = pa.array([i not in refused for i in range(data.num_rows)])
        where = f"table {sink.table} in {dialect.where(sink)}"
        ready = {f.name: json_ready(f.type) for f in data.schema}
        for i in sorted(refused):
            row = data.slice(i, 1).to_pylist()[0]
            for n, v in row.items():
                convert = ready[n]
                if v is not None and convert is not None:
                    row[n] = convert(v)
            raw = json.dumps(row, default=json_default, ensure_ascii=False)
            dead.append({"raw": raw, "reason": f"{where} cannot store this row of batch {batch_id}: {refused[i]}"})
        stored = stored.filter(keep)
    if sink.mode != "upsert" or stored.num_rows == 0:
        return stored, dead
    row_index = "__sparkstate_row"
    indexed = stored.append_column(row_index, pa.array(range(stored.num_rows), pa.int64()))
    last = indexed.group_by(list(sink.key), use_threads=False).aggregate([(row_index, "max")])
    if last.num_rows == stored.num_rows:
        return stored, dead
    keep_last = last.column(f"{row_index}_max")
    return stored.take(pc.take(keep_last, pc.sort_indices(keep_last))), dead  # in arrival order


def _top_marker(dialect: Dialect, conn: Any, identity: str) -> int | None:
    return conn.execute(f"SELECT max(batch_id) FROM {MARKER_TABLE} WHERE job = {dialect.param}", (identity,)).fetchone()[0]


def _adopt_legacy_markers(dialect: Dialect, conn: Any, sink: Any) -> bool:
    """Markers written before the identity named the table (``job`` alone) become this
    sink's, copied (another table's writer of the same job name may need them too)."""
    p = dialect.param
    copied = conn.execute(
        f"INSERT INTO {MARKER_TABLE} (job, batch_id, rows, committed_at) "
        f"SELECT {p}, batch_id, rows, committed_at FROM {MARKER_TABLE} WHERE job = {p}",
        (sink.marker, sink.job),
    ).rowcount
    return bool(copied)


def prepare(
    sink: Any, schema: pa.Schema | None, last_committed: int | None, every_batch: bool = True, may_be_new: bool = False
) -> None:
    """Check a sink before a job's first batch: the database is reachable, the marker table
    exists, the table exists or is created from ``schema`` and fits it, and the markers agree
    with the checkpoint (``last_committed``: its last committed batch id, or None).

    A marker beyond ``last_committed + 1`` means this writer already wrote batches that
    this checkpoint has not run (another checkpoint, or one deleted since): its batches with
    those ids would be skipped as replays, so the run is refused instead. A sink that gets
    ``every_batch`` (each batch writes its marker, even an empty one) must also hold the
    marker of ``last_committed``: without it the database lost committed batches (restored
    from an older backup), and the run is refused rather than going on with a gap.
    ``may_be_new``: a writer without any marker is let through (a side output's table: before
    markers named the table, batches without rows wrote none, and most of a side output's
    batches have none).
    """
    with _session(sink, f"preparing table {sink.table}") as (dialect, conn):
        dialect.begin(conn)
        _ensure_marker_table(dialect, conn)
        if schema is not None:
            _ensure_table(dialect, conn, sink, schema)
        top = _top_marker(dialect, conn, sink.marker)
        adopted = top is None and last_committed is not None and _adopt_legacy_markers(dialect, conn, sink)
        if adopted:
            top = _top_marker(dialect, conn, sink.marker)
        if top is not None and (last_committed is None or top > last_committed + 1):
            have = "has committed no batch" if last_committed is None else f"has committed batches up to {last_committed}"
            raise SinkError(
                f"{dialect.where(sink)} already holds batches up to {top} of writer {sink.marker!r} "
                f"(job {sink.job!r}, table {sink.table}), but the checkpoint {have}: they came from another "
                "checkpoint, and this run's batches with the same ids would be skipped. Give this run another job "
                f"name (job=...), or remove the old output (DELETE FROM {MARKER_TABLE} WHERE job = '{sink.marker}' "
                "and the table's rows; `sparkstate run --fresh` drops both)"
            )
        missing = top is None and not may_be_new
        if every_batch and not adopted and last_committed is not None and (missing or (top is not None and top < last_committed)):
            held = "no marker" if top is None else f"markers up to batch {top} only"
            raise SinkError(
                f"{dialect.where(sink)} holds {held} of writer {sink.marker!r} (table {sink.table}), but the "
                f"checkpoint has committed batches up to {last_committed}, each written with its marker: the database "
                "lost batches the checkpoint counts as written (restored from an older backup?), and going on would "
                "leave their rows missing for good. Restore the database, or start over (`sparkstate run --fresh`, or "
                "a new checkpoint and table). If the table is new to this checkpoint and is meant to start now, "
                f"record that: INSERT INTO {MARKER_TABLE} (job, batch_id, rows) VALUES ('{sink.marker}', "
                f"{last_committed}, 0)"
            )
        conn.commit()


def commit_batch(sink: Any, data: pa.Table, batch_id: int) -> BatchOutcome:
    """Write micro-batch ``batch_id`` in one transaction with its marker (an empty batch
    writes its marker alone). Rows the database would refuse come back as dead letters; a
    replay (the marker is there) writes nothing and warns when its row count differs from
    the first commit's."""
    schema = data.schema  # the table is checked against the output's types, before JSON encoding
    received = data.num_rows
    with _session(sink, f"writing batch {batch_id} to table {sink.table}") as (dialect, conn):
        stored, dead = _storable(dialect, sink, data, batch_id)
        dialect.begin(conn)
        _ensure_marker_table(dialect, conn)
        _ensure_table(dialect, conn, sink, schema)
        p = dialect.param
        new = conn.execute(
            f"INSERT INTO {MARKER_TABLE} (job, batch_id, rows) VALUES ({p}, {p}, {p}) ON CONFLICT (job, batch_id) DO NOTHING",
            (sink.marker, batch_id, received),
        ).rowcount
        if new != 1:
            first = conn.execute(
                f"SELECT rows FROM {MARKER_TABLE} WHERE job = {p} AND batch_id = {p}", (sink.marker, batch_id)
            ).fetchone()[0]
            conn.rollback()
            if first == received:
                return BatchOutcome(None, dead)
            warning = (
                f"batch {batch_id} ran again with {received} rows for table {sink.table}, but its first commit had "
                f"{first}: the source gave this batch different input the second time (it is not replayable), or the "
                "job's output depends on processing time. The table keeps the first commit's rows; this run's were "
                "skipped"
            )
            log.warning(warning)
            return BatchOutcome(None, dead, warning)
        if stored.num_rows:
            dialect.insert(conn, sink, stored)
        fault_point(SINK_ROWS_WRITTEN)
        try:
            conn.commit()
        except dialect.errors as exc:
            if not dialect.lost(conn, exc):
                raise
            raise SinkError(
                f"lost the connection to {dialect.where(sink)} while committing batch {batch_id} to table "
                f"{sink.table}: {first_line(exc)}. Whether the commit went through is unknown; the next run settles "
                f"it: it finds the batch's marker in {MARKER_TABLE} if the commit went through (and skips the batch), "
                "and writes the batch again if not"
            ) from None
    return BatchOutcome(stored.num_rows, dead)


def write(sink: Any, data: pa.Table, batch_id: int) -> int | None:
    """Write micro-batch ``batch_id`` (see :func:`commit_batch`); returns the rows written,
    or None when the batch had been committed before (a replay, skipped)."""
    return commit_batch(sink, data, batch_id).rows


def reset(sink: Any, restored_ids: tuple[str | None, ...] = ()) -> str | None:
    """Forget the job's batches, and drop the sink's table when the job created it
    (``sparkstate run --fresh``). The batches forgotten are those of the sink's writer and of
    its writers restored from the savepoints ``restored_ids`` (None: the writer of a checkpoint
    that was not restored): the old checkpoint's and the one the new run starts. Returns what
    was kept and why, or None."""
    from dataclasses import replace

    with _session(sink, f"starting table {sink.table} over") as (dialect, conn):
        dialect.begin(conn)
        _ensure_marker_table(dialect, conn)
        _ensure_created_table(dialect, conn)
        p = dialect.param
        row = conn.execute(f"SELECT job FROM {CREATED_TABLE} WHERE table_name = {p}", (sink.table,)).fetchone()
        kept = None
        if row is not None and row[0] == sink.job:
            conn.execute(f"DROP TABLE IF EXISTS {quote(sink.table)}")
            conn.execute(f"DELETE FROM {CREATED_TABLE} WHERE table_name = {p}", (sink.table,))
        elif dialect.columns(conn, sink.table) is not None:
            who = "existed before sparkstate wrote to it" if row is None else f"was created by job {row[0]!r}"
            kept = (f"--fresh kept table {sink.table} in {dialect.where(sink)}: it {who}, and --fresh drops only tables "
                    f"the job created. Its rows stay, and this run appends to them (its earlier batches' rows too); "
                    f"delete them yourself if they must go")
        writers = {sink.marker, *(replace(sink, restored_from=i).marker for i in restored_ids)}
        for writer in sorted(writers):
            conn.execute(f"DELETE FROM {MARKER_TABLE} WHERE job = {p}", (writer,))
        conn.commit()
    return kept


def top_marker(sink: Any, writer: str | None = None) -> int | None:
    """The last batch id the writer ``writer`` (default: the sink's) committed to the sink's
    database, or None when it has none."""
    with _session(sink, f"reading the batch markers of table {sink.table}") as (dialect, conn):
        if dialect.columns(conn, MARKER_TABLE) is None:
            return None
        top = _top_marker(dialect, conn, writer or sink.marker)
    return None if top is None else int(top)


def count_rows(sink: Any) -> int:
    """Rows in the sink's table (0 when it does not exist)."""
    with _session(sink, f"counting the rows of table {sink.table}") as (dialect, conn):
        if dialect.columns(conn, sink.table) is None:
            return 0
        return int(conn.execute(f"SELECT count(*) FROM {quote(sink.table)}").fetchone()[0])
