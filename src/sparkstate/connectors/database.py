"""The transactional database sinks: one protocol, one small dialect per database.

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

The dialects differ only in how they connect, name types, read the catalog and load rows
(PostgreSQL: ``COPY``; SQLite: ``executemany``).
"""

from __future__ import annotations

import io
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from sparkstate.connectors.sinks import DatabaseSink, PostgresSink, SqliteSink, _mask
from sparkstate.errors import SinkError

MARKER_TABLE = "sparkstate_batches"


@dataclass(frozen=True)
class Column:
    """A column of an existing table, as its database declares it."""

    name: str
    type: str
    #: NOT NULL without a default: a row that leaves it out is refused
    required: bool


def quote(name: str) -> str:
    """A quoted identifier; ``schema.table`` quotes each part."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))


def _quote_column(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _first_line(exc: BaseException) -> str:
    """The driver's message on one line (the job's failure report reads one line)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:500]


def _sentence(exc: BaseException) -> str:
    text = _first_line(exc)
    return text if text.endswith((".", "?", "!")) else text + "."


# --------------------------------------------------------------------------- dialects


class Dialect:
    """What one database does its own way; everything else is the shared protocol below."""

    label = "database"
    #: the driver's parameter placeholder
    param = "?"
    #: the driver's exception base classes
    errors: tuple[type[BaseException], ...] = ()
    #: column type and default of the marker's commit time
    now_column = ""

    def where(self, sink: Any) -> str:
        raise NotImplementedError

    def connect(self, sink: Any) -> Any:
        raise NotImplementedError

    def begin(self, conn: Any) -> None:
        """Open the batch's transaction (drivers that open one implicitly do nothing)."""

    def sql_type(self, t: pa.DataType) -> str:
        raise NotImplementedError

    def accepts(self, wanted: str, actual: str) -> bool:
        """Whether a column declared ``actual`` can hold every value of type ``wanted``."""
        raise NotImplementedError

    def columns(self, conn: Any, table: str) -> list[Column] | None:
        """The table's columns in order, or None when there is no such table."""
        raise NotImplementedError

    def unique_keys(self, conn: Any, table: str) -> list[set[str]]:
        """The column sets of the table's primary key and unique constraints."""
        raise NotImplementedError

    def insert(self, conn: Any, sink: Any, data: pa.Table) -> None:
        """Load ``data`` into the sink's table (append) or merge it by key (upsert)."""
        raise NotImplementedError

    def lost(self, conn: Any, exc: BaseException) -> bool:
        """Whether ``exc`` means the connection itself is gone."""
        return False


def _is_nested(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) or pa.types.is_map(t) or pa.types.is_list(t) or pa.types.is_large_list(t)


#: Arrow type families in the order they are tried, by the name the dialects' type tables use
_TYPE_FAMILIES = (
    ("boolean", (pa.types.is_boolean,)),
    ("smallint", (pa.types.is_int8, pa.types.is_int16, pa.types.is_uint8)),
    ("integer", (pa.types.is_int32, pa.types.is_uint16)),
    ("bigint", (pa.types.is_int64, pa.types.is_uint32)),
    ("real", (pa.types.is_float16, pa.types.is_float32)),
    ("double", (pa.types.is_float64,)),
    ("text", (pa.types.is_string, pa.types.is_large_string)),
    ("binary", (pa.types.is_binary, pa.types.is_large_binary)),
    ("date", (pa.types.is_date,)),
    ("json", (_is_nested,)),
)


def _sql_type_name(t: pa.DataType, names: dict[str, str]) -> str:
    """Map an Arrow type to one of ``names``' entries (shared by the dialects' type tables)."""
    if pa.types.is_timestamp(t):
        return names["timestamptz"] if t.tz else names["timestamp"]
    if pa.types.is_decimal(t):
        return names["decimal"].format(p=t.precision, s=t.scale)
    for family, tests in _TYPE_FAMILIES:
        if any(test(t) for test in tests):
            return names[family]
    raise SinkError(f"a database sink cannot store Arrow type {t}")


class PostgresDialect(Dialect):
    label = "PostgreSQL"
    param = "%s"
    now_column = "timestamp with time zone NOT NULL DEFAULT now()"
    _types = {
        "boolean": "boolean", "smallint": "smallint", "integer": "integer", "bigint": "bigint",
        "real": "real", "double": "double precision", "text": "text", "binary": "bytea",
        "timestamptz": "timestamp with time zone", "timestamp": "timestamp without time zone",
        "date": "date", "decimal": "numeric({p},{s})", "json": "jsonb",
    }
    #: declared types (format_type's spelling) that hold every value of the wanted type
    _accepts = {
        "smallint": ("smallint", "integer", "bigint", "numeric"),
        "integer": ("integer", "bigint", "numeric"),
        "bigint": ("bigint", "numeric"),
        "real": ("real", "double precision"),
        "double precision": ("double precision",),
        "text": ("text", "character varying"),
        "boolean": ("boolean",),
        "timestamp with time zone": ("timestamp with time zone",),
        "timestamp without time zone": ("timestamp without time zone",),
        "date": ("date", "timestamp without time zone", "timestamp with time zone"),
        "bytea": ("bytea",),
        "jsonb": ("jsonb", "json"),
        "numeric": ("numeric",),
    }

    def __init__(self) -> None:
        import psycopg

        self.errors = (psycopg.Error,)

    @staticmethod
    def _target(sink: PostgresSink) -> dict:
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(sink.url)
        return {
            "host": info.get("host") or os.environ.get("PGHOST") or "/var/run/postgresql",
            "port": info.get("port") or os.environ.get("PGPORT") or "5432",
            "dbname": info.get("dbname") or os.environ.get("PGDATABASE") or info.get("user") or "(the user's)",
            "user": info.get("user") or os.environ.get("PGUSER") or "(the OS user)",
            "connect_timeout": info.get("connect_timeout"),
        }

    def where(self, sink: PostgresSink) -> str:
        t = self._target(sink)
        return f"PostgreSQL at {t['host']}:{t['port']} (database {t['dbname']})"

    def connect(self, sink: PostgresSink) -> Any:
        import psycopg

        t = self._target(sink)
        try:
            # an unreachable host fails within the timeout instead of hanging the job
            return psycopg.connect(sink.url, **({} if t["connect_timeout"] else {"connect_timeout": 10}))
        except psycopg.Error as exc:
            raise SinkError(
                f"cannot connect to PostgreSQL at {t['host']}:{t['port']} (database {t['dbname']}, user {t['user']}): "
                f"{_sentence(exc)} Start the server, or fix the host, port, database or user in the sink URL "
                f"({_mask(sink.url)}); nothing was written"
            ) from None

    def sql_type(self, t: pa.DataType) -> str:
        return _sql_type_name(t, self._types)

    def accepts(self, wanted: str, actual: str) -> bool:
        base = wanted.split("(")[0]
        return any(actual == a or actual.startswith(a + "(") for a in self._accepts.get(base, (wanted,)))

    def columns(self, conn: Any, table: str) -> list[Column] | None:
        oid = conn.execute("SELECT to_regclass(%s)::oid", (quote(table),)).fetchone()[0]
        if oid is None:
            return None
        rows = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod),"
            " attnotnull AND NOT atthasdef AND attidentity = '' AND attgenerated = ''"
            " FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (oid,),
        ).fetchall()
        return [Column(name, kind, bool(required)) for name, kind, required in rows]

    def unique_keys(self, conn: Any, table: str) -> list[set[str]]:
        rows = conn.execute(
            "SELECT array_agg(a.attname::text) FROM pg_index i"
            " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
            " WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL"
            " GROUP BY i.indexrelid",
            (quote(table),),
        ).fetchall()
        return [set(r[0]) for r in rows]

    def insert(self, conn: Any, sink: PostgresSink, data: pa.Table) -> None:
        cols = ", ".join(_quote_column(c) for c in data.column_names)
        if sink.mode == "append":
            self._copy(conn, f"COPY {quote(sink.table)} ({cols}) FROM STDIN (FORMAT csv)", data)
            return
        conn.execute(
            f"CREATE TEMPORARY TABLE sparkstate_upsert ON COMMIT DROP AS SELECT {cols} FROM {quote(sink.table)} WITH NO DATA"
        )
        self._copy(conn, f"COPY sparkstate_upsert ({cols}) FROM STDIN (FORMAT csv)", data)
        conn.execute(upsert_statement(sink, data.column_names, f"SELECT {cols} FROM sparkstate_upsert"))

    @staticmethod
    def _copy(conn: Any, statement: str, data: pa.Table) -> None:
        """COPY in CSV, written by Arrow in C (NULL as an unquoted empty field, strings always
        quoted). Instants go as UTC wall-clock time read in a UTC session; bytea as hex text."""
        import pyarrow.csv as csv

        for i, f in enumerate(data.schema):
            if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type):
                hexed = [None if v is None else "\\x" + v.hex() for v in data.column(i).to_pylist()]
                data = data.set_column(i, f.name, pa.array(hexed, pa.string()))
            elif pa.types.is_timestamp(f.type):
                data = data.set_column(i, f.name, _utc_wall_clock(data.column(i)))
        options = csv.WriteOptions(include_header=False)
        conn.execute("SET LOCAL TimeZone = 'UTC'")  # this transaction only
        with conn.cursor() as cur, cur.copy(statement) as copy:
            for batch in data.to_batches(max_chunksize=65_536):
                buffer = io.BytesIO()
                csv.write_csv(batch, buffer, options)
                copy.write(buffer.getvalue())

    def lost(self, conn: Any, exc: BaseException) -> bool:
        return bool(getattr(conn, "broken", False) or getattr(conn, "closed", False))


class SqliteDialect(Dialect):
    label = "SQLite"
    now_column = "TIMESTAMP NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%fZ', 'now'))"
    # SQLite has no timestamp, JSON or decimal storage: ISO 8601 text (UTC with Z), JSON
    # text, and decimal text (NUMERIC affinity would turn 1.10 into the double 1.1)
    _types = {
        "boolean": "BOOLEAN", "smallint": "INTEGER", "integer": "INTEGER", "bigint": "INTEGER",
        "real": "REAL", "double": "REAL", "text": "TEXT", "binary": "BLOB",
        "timestamptz": "TIMESTAMP", "timestamp": "TIMESTAMP", "date": "DATE", "decimal": "TEXT",
        "json": "TEXT",
    }
    #: the type affinities (SQLite's storage rules for a declared type) that hold the values
    _accepts = {
        "INTEGER": ("INTEGER", "NUMERIC"), "BOOLEAN": ("INTEGER", "NUMERIC"), "REAL": ("REAL", "NUMERIC"),
        "TEXT": ("TEXT",), "BLOB": ("BLOB",), "TIMESTAMP": ("TEXT", "NUMERIC"), "DATE": ("TEXT", "NUMERIC"),
    }

    def __init__(self) -> None:
        import sqlite3

        self.errors = (sqlite3.Error,)

    def where(self, sink: SqliteSink) -> str:
        return f"SQLite database {os.path.abspath(sink.path)}"

    def connect(self, sink: SqliteSink) -> Any:
        import sqlite3

        path = os.path.abspath(sink.path)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            # no implicit transactions: begin() opens each batch's one transaction itself
            return sqlite3.connect(path, timeout=30, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise SinkError(
                f"cannot open SQLite database {path}: {_sentence(exc)} "
                "Choose a file in a folder you can write to (sqlite:///ABSOLUTE/PATH.db); nothing was written"
            ) from None

    def begin(self, conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE")  # take the write lock now, not at the first insert

    def sql_type(self, t: pa.DataType) -> str:
        return _sql_type_name(t, self._types)

    @staticmethod
    def _affinity(declared: str) -> str:
        d = declared.upper()
        if "INT" in d:
            return "INTEGER"
        if any(s in d for s in ("CHAR", "CLOB", "TEXT")):
            return "TEXT"
        if "BLOB" in d or not d:
            return "BLOB"
        if any(s in d for s in ("REAL", "FLOA", "DOUB")):
            return "REAL"
        return "NUMERIC"

    def accepts(self, wanted: str, actual: str) -> bool:
        return self._affinity(actual) in self._accepts.get(wanted, (self._affinity(wanted),))

    @staticmethod
    def _split(table: str) -> tuple[str, str]:
        schema, _, name = table.rpartition(".")
        return schema or "main", name

    def columns(self, conn: Any, table: str) -> list[Column] | None:
        schema, name = self._split(table)
        rows = conn.execute('SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_info(?, ?)', (name, schema)).fetchall()
        if not rows:
            return None
        # an INTEGER PRIMARY KEY is the rowid: SQLite fills it in
        rowid = [r for r in rows if r[4]] if sum(1 for r in rows if r[4]) == 1 else []
        return [
            Column(n, kind, bool(notnull) and dflt is None and not (rowid and rowid[0][0] == n and kind.upper() == "INTEGER"))
            for n, kind, notnull, dflt, _ in rows
        ]

    def unique_keys(self, conn: Any, table: str) -> list[set[str]]:
        schema, name = self._split(table)
        keys = []
        pk = [r[0] for r in conn.execute("SELECT name FROM pragma_table_info(?, ?) WHERE pk > 0", (name, schema))]
        if pk:
            keys.append(set(pk))
        indexes = conn.execute(
            'SELECT name FROM pragma_index_list(?, ?) WHERE "unique" AND NOT partial', (name, schema)
        ).fetchall()
        for (index,) in indexes:
            cols = [r[0] for r in conn.execute("SELECT name FROM pragma_index_info(?, ?)", (index, schema))]
            if cols and None not in cols:
                keys.append(set(cols))
        return keys

    def insert(self, conn: Any, sink: SqliteSink, data: pa.Table) -> None:
        names = data.column_names
        values = "VALUES (" + ", ".join("?" * len(names)) + ")"
        if sink.mode == "append":
            statement = f"INSERT INTO {quote(sink.table)} ({', '.join(map(_quote_column, names))}) {values}"
        else:
            statement = upsert_statement(sink, names, values)
        columns = []
        for f, column in zip(data.schema, data.columns):
            if pa.types.is_timestamp(f.type) and f.type.tz:
                # ISO 8601 in UTC, "2024-05-01 12:00:00.000000Z", which SQLite's date functions read
                column = pc.binary_join_element_wise(_utc_wall_clock(column).cast(pa.string()), "Z", "")
            elif pa.types.is_timestamp(f.type) or pa.types.is_date(f.type) or pa.types.is_decimal(f.type):
                column = column.cast(pa.string())  # ISO 8601 without a zone; exact decimals
            columns.append(column.to_pylist())
        conn.executemany(statement, zip(*columns))


_DIALECTS: dict[type, type[Dialect]] = {PostgresSink: PostgresDialect, SqliteSink: SqliteDialect}


def dialect_of(sink: Any) -> Dialect:
    return _DIALECTS[type(sink)]()


# --------------------------------------------------------------------------- the protocol


def upsert_statement(sink: Any, names: list[str], rows_sql: str) -> str:
    """``INSERT ... ON CONFLICT (key) DO UPDATE`` (the same SQL in PostgreSQL and SQLite)."""
    cols = ", ".join(map(_quote_column, names))
    key = ", ".join(map(_quote_column, sink.key))
    rest = [n for n in names if n not in sink.key]
    action = "DO UPDATE SET " + ", ".join(f"{_quote_column(n)} = excluded.{_quote_column(n)}" for n in rest) if rest else "DO NOTHING"
    return f"INSERT INTO {quote(sink.table)} ({cols}) {rows_sql} ON CONFLICT ({key}) {action}"


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
                    f"lost the connection to {dialect.where(sink)} while {doing}: {_first_line(exc)}; "
                    "nothing of it was committed, and a restart writes it again"
                ) from None
            raise SinkError(
                f"{dialect.where(sink)} refused {doing}: {_first_line(exc)}; nothing of it was committed"
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
        defs = [f"{_quote_column(n)} {t}" for n, t in wanted.items()]
        if sink.key:
            defs.append(f"PRIMARY KEY ({', '.join(map(_quote_column, sink.key))})")
        conn.execute(f"CREATE TABLE {table} ({', '.join(defs)})")
        return
    have = {c.name: c for c in existing}
    problems, fixes = [], []
    missing = [n for n in wanted if n not in have]
    if missing:
        problems.append("missing " + ", ".join(f"{n} ({wanted[n]})" for n in missing))
        fixes.append(f"ALTER TABLE {table} ADD COLUMN {_quote_column(missing[0])} {wanted[missing[0]]}")
    mistyped = [n for n in wanted if n in have and not dialect.accepts(wanted[n], have[n].type)]
    if mistyped:
        problems.append("mistyped " + ", ".join(f"{n} is {have[n].type}, the output needs {wanted[n]}" for n in mistyped))
    extra = [c for c in existing if c.name not in wanted and c.required]
    if extra:
        problems.append(
            "extra " + ", ".join(f"{c.name} ({c.type} NOT NULL, no default)" for c in extra)
            + " that the output cannot fill"
        )
        fixes.append(f"ALTER TABLE {table} DROP COLUMN {_quote_column(extra[0].name)}")
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
            f"{table} ({', '.join(map(_quote_column, sink.key))})), or drop the table so that sparkstate creates it; "
            "nothing was written"
        )


def _json_ready(t: pa.DataType) -> Callable[[Any], Any] | None:
    """What turns Arrow's Python value of type ``t`` into JSON-ready values (maps as dicts,
    at any depth), or None when ``to_pylist`` already gives them. Arrow's own
    ``maps_as_pydicts`` is about four times slower than converting the pairs here."""
    if pa.types.is_map(t):
        item = _json_ready(t.item_type)
        if item is None:
            return dict
        return lambda v: {k: None if x is None else item(x) for k, x in v}
    if pa.types.is_struct(t):
        fields = [(t.field(i).name, _json_ready(t.field(i).type)) for i in range(t.num_fields)]
        if all(f is None for _, f in fields):
            return None
        return lambda v: {n: v[n] if f is None or v[n] is None else f(v[n]) for n, f in fields}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = _json_ready(t.value_type)
        if inner is None:
            return None
        return lambda v: [None if x is None else inner(x) for x in v]
    return None


def _utc_wall_clock(column: Any) -> Any:
    """A timestamp column with a time zone as the same instants without one (UTC wall-clock
    time): Arrow formats those about 20 times faster, and the stored values are UTC anyway."""
    t = column.type
    return column.cast(pa.timestamp(t.unit)) if pa.types.is_timestamp(t) and t.tz else column


def _json_default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)  # Decimal and anything else exact as text


def _storable(data: pa.Table, sink: Any, batch_id: int) -> pa.Table:
    """The batch as the database stores it: nested values as JSON text, and for upsert one
    row per key (the last one: a key's later rows of a batch supersede its earlier ones)."""
    for i, f in enumerate(data.schema):
        if _is_nested(f.type):
            values = data.column(i).to_pylist()
            ready = _json_ready(f.type)
            if ready is not None:
                values = [None if v is None else ready(v) for v in values]
            encode = json.JSONEncoder(default=_json_default, ensure_ascii=False).encode  # one encoder, not one a value
            texts = [None if v is None else encode(v) for v in values]
            data = data.set_column(i, f.name, pa.array(texts, pa.string()))
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


# --------------------------------------------------------------------------- a job's sinks


def bind_job_sinks(job: Any) -> Any:
    """``job`` with its database sinks bound: table and marker identity filled in from the
    job's name (see :meth:`DatabaseSink.for_job` and :meth:`DatabaseSink.for_side_output`)."""
    from dataclasses import replace

    main = job.sink_spec
    if isinstance(main, DatabaseSink):
        main = main.for_job(job.name)
    sides = tuple(
        (n, s.for_side_output(job.name, n, main) if isinstance(s, DatabaseSink) else s) for n, s in job.side_sinks
    )
    return replace(job, sink_spec=main, side_sinks=sides)


def side_sinks(job: Any) -> dict[str, Any]:
    """Each side output's sink, for a bound job: its own, or when the main sink is a database
    a table beside the main one; None where neither applies (the caller's default)."""
    own = dict(job.side_sinks)
    main = job.sink_spec
    return {
        n: own.get(n) or (main.side_table(n) if isinstance(main, DatabaseSink) else None) for n in job.side_output_names
    }


def job_database_sinks(job: Any, with_side_outputs: bool = True) -> list[tuple[Any, pa.Schema | None]]:
    """The database sinks of a bound job, each with the Arrow schema of what it receives."""
    out = []
    if isinstance(job.sink_spec, DatabaseSink):
        out.append((job.sink_spec, job.output.arrow if job.output is not None else None))
    if with_side_outputs:
        for name, sink in side_sinks(job).items():
            if isinstance(sink, DatabaseSink):
                schema = job.side_output_schema(name)
                out.append((sink, schema.arrow if schema is not None else None))
    return out
