"""What each database does its own way: connecting, naming types, reading the catalog and
loading rows (PostgreSQL: ``COPY``; SQLite: ``executemany``). Everything else is the shared
protocol (``sparkstate.connectors.database.protocol``)."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparkstate.connectors.credentials import mask
from sparkstate.connectors.database.arrow import is_nested, utc_wall_clock
from sparkstate.connectors.sinks import POSTGRES_NAME_BYTES, PostgresSink, SqliteSink
from sparkstate.errors import SinkError


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


def quote_column(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def first_line(exc: BaseException) -> str:
    """The driver's message on one line (the job's failure report reads one line)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:500]


def sentence(exc: BaseException) -> str:
    text = first_line(exc)
    return text if text.endswith((".", "?", "!")) else text + "."


def upsert_statement(sink: Any, names: list[str], rows_sql: str) -> str:
    """``INSERT ... ON CONFLICT (key) DO UPDATE`` (the same SQL in PostgreSQL and SQLite)."""
    cols = ", ".join(map(quote_column, names))
    key = ", ".join(map(quote_column, sink.key))
    rest = [n for n in names if n not in sink.key]
    action = (
        "DO UPDATE SET " + ", ".join(f"{quote_column(n)} = excluded.{quote_column(n)}" for n in rest) if rest else "DO NOTHING"
    )
    return f"INSERT INTO {quote(sink.table)} ({cols}) {rows_sql} ON CONFLICT ({key}) {action}"


_RESUMES = "the next run resumes with this batch"
_RERUN = f"Run again once the cause is fixed; {_RESUMES}"


class Dialect:
    """What one database does its own way; everything else is the shared protocol."""

    label = "database"
    #: the driver's parameter placeholder
    param = "?"
    #: the driver's exception base classes
    errors: tuple[type[BaseException], ...] = ()
    #: column type and default of the marker's commit time
    now_column = ""
    #: the longest name (in bytes) the database keeps whole, or None
    name_bytes: int | None = None
    #: whether text refuses the NUL character (and JSON its escape, ``\\u0000``)
    refuses_nul = False
    #: whether a floating-point column loses NaN (SQLite stores it as NULL)
    loses_nan = False

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

    def advice(self, exc: BaseException) -> str:
        """What to do about a refused batch (a failure of the database, not of one row)."""
        return _RERUN


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
    ("json", (is_nested,)),
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
    name_bytes = POSTGRES_NAME_BYTES
    refuses_nul = True
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
            timeout: dict[str, Any] = {} if t["connect_timeout"] else {"connect_timeout": 10}
            return psycopg.connect(sink.url, **timeout)
        except psycopg.Error as exc:
            raise SinkError(
                f"cannot connect to PostgreSQL at {t['host']}:{t['port']} (database {t['dbname']}, user {t['user']}): "
                f"{sentence(exc)} Start the server, or fix the host, port, database or user in the sink URL "
                f"({mask(sink.url)}); nothing was written"
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
        assert sink.table is not None, "the sink is bound to its job (for_job)"
        cols = ", ".join(quote_column(c) for c in data.column_names)
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
                data = data.set_column(i, f.name, utc_wall_clock(data.column(i)))
        options = csv.WriteOptions(include_header=False)
        conn.execute("SET LOCAL TimeZone = 'UTC'")  # this transaction only
        with conn.cursor() as cur, cur.copy(statement) as copy:
            for batch in data.to_batches(max_chunksize=65_536):
                buffer = io.BytesIO()
                csv.write_csv(batch, buffer, options)
                copy.write(buffer.getvalue())

    def lost(self, conn: Any, exc: BaseException) -> bool:
        return bool(getattr(conn, "broken", False) or getattr(conn, "closed", False))

    def advice(self, exc: BaseException) -> str:
        state = getattr(exc, "sqlstate", None) or ""
        if state == "53100":
            return f"The server's disk is full: free space on it, then run again; {_RESUMES}"
        if state.startswith("53"):
            return f"The server ran out of a resource (memory or connections, SQLSTATE {state}): {_RERUN[0].lower()}{_RERUN[1:]}"
        if state.startswith(("57", "08")):
            return f"The server is shutting down or unreachable (SQLSTATE {state}): start it, then run again; {_RESUMES}"
        if state == "25006" or state.startswith("42"):
            return (
                f"The sink's database user may lack a permission, or the database is read-only (SQLSTATE {state}): "
                f"grant it or choose another database, then run again; {_RESUMES}"
            )
        return _RERUN


class SqliteDialect(Dialect):
    label = "SQLite"
    loses_nan = True
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
                f"cannot open SQLite database {path}: {sentence(exc)} "
                "Choose a file in a folder you can write to (sqlite:///ABSOLUTE/PATH.db); nothing was written"
            ) from None

    def begin(self, conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE")  # take the write lock now, not at the first insert

    def advice(self, exc: BaseException) -> str:
        text = str(exc).lower()
        if "full" in text:
            return f"The disk holding the database file is full: free space on it, then run again; {_RESUMES}"
        if "locked" in text or "busy" in text:
            return f"Another process held the database's write lock for over 30 s: stop it, then run again; {_RESUMES}"
        if "readonly" in text or "read-only" in text:
            return f"The database file or its folder cannot be written: fix its permissions, then run again; {_RESUMES}"
        return _RERUN

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
        rows = conn.execute(
            'SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_info(?, ?)', (name, schema)
        ).fetchall()
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
        assert sink.table is not None, "the sink is bound to its job (for_job)"
        names = data.column_names
        values = "VALUES (" + ", ".join("?" * len(names)) + ")"
        if sink.mode == "append":
            statement = f"INSERT INTO {quote(sink.table)} ({', '.join(map(quote_column, names))}) {values}"
        else:
            statement = upsert_statement(sink, names, values)
        columns = []
        for f, column in zip(data.schema, data.columns):
            if pa.types.is_timestamp(f.type) and f.type.tz:
                # ISO 8601 in UTC, "2024-05-01 12:00:00.000000Z", which SQLite's date functions read
                column = pc.binary_join_element_wise(utc_wall_clock(column).cast(pa.string()), "Z", "")
            elif pa.types.is_timestamp(f.type) or pa.types.is_date(f.type) or pa.types.is_decimal(f.type):
                column = column.cast(pa.string())  # ISO 8601 without a zone; exact decimals
            columns.append(column.to_pylist())
        conn.executemany(statement, zip(*columns))


_DIALECTS: dict[type, type[Dialect]] = {PostgresSink: PostgresDialect, SqliteSink: SqliteDialect}


def dialect_of(sink: Any) -> Dialect:
    return _DIALECTS[type(sink)]()
