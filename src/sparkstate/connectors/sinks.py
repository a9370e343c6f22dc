"""Sink specs: where a job's output goes. The Spark binding is ``sparkstate.runtime.io.sinks``.

Exactly-once holds for ``ParquetSink`` (Spark's file sink commits each batch in its
``_spark_metadata`` log), ``MemorySink`` (a replayed batch replaces its earlier copy) and the
transactional database sinks ``PostgresSink`` and ``SqliteSink`` (each batch's rows and a
``(job, batch_id)`` marker commit in one transaction; a replayed batch finds its marker and is
skipped; see ``sparkstate.connectors.database``).
"""

from __future__ import annotations

import re
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Self

from sparkstate.connectors.credentials import mask, mask_quoted, query_parameters, split_query


@dataclass
class ConsoleSink:
    """Print up to ``rows`` rows of every micro-batch (Spark's console sink)."""

    rows: int = 20
    truncate: bool = True

    def describe(self) -> str:
        return "console"


@dataclass
class ParquetSink:
    """Append every micro-batch to Parquet files under ``path`` (exactly once)."""

    path: str

    def describe(self) -> str:
        return f"parquet:{self.path}"


@dataclass
class NoopSink:
    """Discard the output (benchmarks)."""

    def describe(self) -> str:
        return "noop"


@dataclass
class MemorySink:
    """Collect the output in this process, batch by batch; for tests and small jobs.

    A batch replayed after a failure replaces the first attempt, so ``rows()`` holds every
    output row exactly once. Timestamps are returned as epoch milliseconds.
    """

    batches: dict[int, list[dict]] = field(default_factory=dict)
    _lock: Any = field(default_factory=threading.Lock, repr=False)

    def describe(self) -> str:
        return "memory"

    def put(self, batch_id: int, rows: list[dict]) -> None:
        with self._lock:
            self.batches[batch_id] = rows

    def rows(self) -> list[dict]:
        with self._lock:
            return [r for b in sorted(self.batches) for r in self.batches[b]]

    def clear(self) -> None:
        with self._lock:
            self.batches.clear()


@dataclass
class ForeachBatchSink:
    """Call ``fn(dataframe, batch_id)`` for every micro-batch (Spark's ``foreachBatch``)."""

    fn: Callable[[Any, int], None]

    def describe(self) -> str:
        return f"foreach_batch:{getattr(self.fn, '__name__', 'fn')}"


# --------------------------------------------------------------------------- databases

SINK_MODES = ("append", "upsert")
#: the table of the transactional sinks' batch markers (one per database)
MARKER_TABLE = "sparkstate_batches"
_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?$")


def default_table(job_name: str) -> str:
    """The table a job writes when none is named: its name with ``-`` (or any other
    character that would need quoting) turned into ``_``."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", job_name)
    return name if re.match(r"[A-Za-z_]", name) else f"_{name}"


@dataclass(frozen=True, kw_only=True)
class DatabaseSink:
    """What the transactional database sinks share: the table, the mode and the job identity.

    ``mode="append"`` inserts every output row; ``mode="upsert"`` keeps one row per ``key``
    (``INSERT ... ON CONFLICT (key) DO UPDATE``), and when a key appears more than once in one
    micro-batch the last of its rows wins. ``job`` names the writer in the marker table
    (default: the job's name); two deployments of one job into one database need two names.
    ``table`` defaults to the job's name with ``-`` as ``_``. These are keyword arguments:
    ``PostgresSink(url, table="totals", mode="upsert", key=("merchant_id",))``.
    """

    table: str | None = None
    mode: str = "append"
    #: the upsert key: column names, or one string "a,b" (a tuple of names once constructed)
    key: tuple[str, ...] | str = ()
    job: str | None = None
    #: set by the run, not by users: the savepoint the job's checkpoint was restored from. A
    #: restored checkpoint's batch ids start at 0 again, so its writer has an identity of its own
    restored_from: str | None = None

    def __post_init__(self) -> None:
        from sparkstate.errors import JobDefinitionError

        self._check_target()
        key = self.key
        if isinstance(key, str):
            key = tuple(k.strip() for k in key.split(",") if k.strip())
        elif key is None:
            key = ()
        else:
            key = tuple(key)
        object.__setattr__(self, "key", key)
        if self.mode not in SINK_MODES:
            raise JobDefinitionError(f"{self.describe()}: mode must be 'append' or 'upsert', got {self.mode!r}")
        if self.mode == "upsert" and not key:
            raise JobDefinitionError(
                f"{self.describe()}: upsert needs the key columns that identify a row, e.g. key=('merchant_id',) "
                "(in a URL: &key=merchant_id)"
            )
        if self.mode == "append" and key:
            raise JobDefinitionError(
                f"{self.describe()}: key={key!r} applies to mode='upsert' only; drop it or add mode='upsert'"
            )
        if not all(isinstance(k, str) and k for k in key) or len(set(key)) != len(key):
            raise JobDefinitionError(f"{self.describe()}: key must name distinct columns, got {key!r}")
        if self.table is not None and not (isinstance(self.table, str) and _TABLE_NAME.match(self.table)):
            raise JobDefinitionError(
                f"{self.describe()}: table {self.table!r} is not a plain table name "
                "(letters, digits and _, optionally schema.table)"
            )
        if self.job is not None and not (isinstance(self.job, str) and self.job.strip()):
            raise JobDefinitionError(f"{self.describe()}: job must be a non-empty name, got {self.job!r}")
        if self.table is not None:
            self._check_table(self.table)

    def _check_table(self, table: str) -> None:
        """Refuse tables whose rows would not last or would not be the job's alone: the
        marker table, and tables of a temporary schema (dropped with the connection, while
        the batches' markers stay)."""
        from sparkstate.errors import JobDefinitionError

        schema, _, name = table.rpartition(".")
        if name.lower() == MARKER_TABLE:
            raise JobDefinitionError(
                f"{self.describe()}: {MARKER_TABLE} is the table of sparkstate's batch markers; "
                "write the output to another table (table=...)"
            )
        if schema and self._temporary_schema(schema.lower()):
            raise JobDefinitionError(
                f"{self.describe()}: {schema} is a temporary schema: its tables vanish when the connection that "
                "wrote them closes (after every batch), while the batches' markers stay, so the rows would be lost; "
                "write to a table of a permanent schema"
            )

    def _temporary_schema(self, schema: str) -> bool:
        return False

    @property
    def marker(self) -> str:
        """The writer's identity in the marker table: the job and the table, so that two
        deployments of one job name into two tables of one database keep apart; a checkpoint
        restored from a savepoint adds ``#<savepoint id>`` (its batch ids start at 0 again)."""
        return f"{self.job}@{self.table}" + (f"#{self.restored_from}" if self.restored_from else "")

    def _check_target(self) -> None:
        """Raise a :class:`JobDefinitionError` when the database's address is unusable."""

    def describe(self) -> str:
        """One line for ``explain`` and progress output (each database's sink writes its own)."""
        raise NotImplementedError

    def _options(self) -> str:
        parts = [f"table={self.table or '<job name>'}", f"mode={self.mode}"]
        if self.key:
            parts.append("key=" + ",".join(self.key))
        if self.job:
            parts.append(f"job={self.job}")
        return " ".join(parts)

    def for_job(self, job_name: str) -> Self:
        """This sink bound to a job: table and marker identity filled in from its name."""
        return replace(self, table=self.table or default_table(job_name), job=self.job or job_name)

    def for_side_output(self, job_name: str, name: str, main: Any = None) -> Self:
        """This sink bound to side output ``name`` of a job whose main sink is ``main``.

        Without a table of its own it writes ``<main table>_<name>``; its marker identity is
        ``<job>/<name>``, so the side output's batches are recognised apart from the main rows'.
        """
        base = main.table if isinstance(main, DatabaseSink) and main.table else default_table(job_name)
        return replace(self, table=self.table or f"{base}_{name}", job=f"{self.job or job_name}/{name}")

    def side_table(self, name: str) -> Self:
        """Where side output ``name`` goes when it has no sink of its own: an append-only table
        ``<table>_<name>`` in the same database (this sink must be bound)."""
        return replace(self, table=f"{self.table}_{name}", mode="append", key=(), job=f"{self.job}/{name}")


#: PostgreSQL keeps the first 63 bytes of a name (NAMEDATALEN - 1) and drops the rest silently
POSTGRES_NAME_BYTES = 63


@dataclass(frozen=True, repr=False)
class PostgresSink(DatabaseSink):
    """Write each micro-batch to a PostgreSQL table in one transaction, exactly once.

    ``url`` is a libpq URL (``postgresql://user:password@host:5432/db``). The table is created
    from the output schema when missing and checked against it when it exists. Rows go in with
    ``COPY``; upserts go through a temporary table and ``INSERT ... ON CONFLICT``.
    """

    url: str

    def _check_target(self) -> None:
        from sparkstate.errors import JobDefinitionError

        if not isinstance(self.url, str) or not self.url.strip():
            raise JobDefinitionError(f"PostgresSink needs a URL such as postgresql://user@localhost:5432/db, got {self.url!r}")
        from sparkstate.extras import require

        require("postgres", "PostgresSink")
        import psycopg.conninfo

        try:
            info = psycopg.conninfo.conninfo_to_dict(self.url)
        except psycopg.Error as exc:
            # libpq quotes the text it could not read, which may be a piece of a password, and so
            # may be what follows a keyword string's password (``password=se cret``)
            shown = repr(mask(self.url)) if "://" in self.url else "(a keyword string, not shown: it may hold a password)"
            problem = mask_quoted(mask(str(exc))).strip()
            raise JobDefinitionError(f"PostgresSink: cannot read the URL {shown}: {problem}") from None
        misread = _misread(self.url, info) if "://" in self.url else None
        if misread:
            # not shown: libpq's reading of it is what would show a piece of the password as a host or port
            raise JobDefinitionError(
                f"PostgresSink: libpq reads the URL (not shown: it may hold a password) with {misread}, as it ends "
                "a user name and password at the first '@' or '/': percent-encode '/', '@', '%' and spaces in a user "
                "name or password ('/' is %2F, '@' is %40), e.g. postgresql://app:pa%2Fss@db/prod"
            )

    def _check_table(self, table: str) -> None:
        from sparkstate.errors import JobDefinitionError

        super()._check_table(table)
        for part in table.split("."):
            size = len(part.encode())
            if size > POSTGRES_NAME_BYTES:
                raise JobDefinitionError(
                    f"{self.describe()}: table name {part!r} is {size} bytes; PostgreSQL keeps only the first "
                    f"{POSTGRES_NAME_BYTES} bytes of a name, so it would write to another table than the one named "
                    "(and side-output tables <table>_late_data and <table>_dead_letters would collide). "
                    f"Choose a table name of at most {POSTGRES_NAME_BYTES - len('_dead_letters')} bytes (table=...)"
                )

    def _temporary_schema(self, schema: str) -> bool:
        return schema == "pg_temp" or schema.startswith("pg_temp_")

    def describe(self) -> str:
        return f"{mask(self.url)} {self._options()}"

    def __repr__(self) -> str:
        # no URL: it may hold a password in a form no mask knows; where it goes is host, port and database
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(self.url)
        where = f"{info.get('host') or 'localhost'}:{info.get('port') or 5432}/{info.get('dbname') or ''}"
        return (
            f"PostgresSink(<{where}>, table={self.table!r}, mode={self.mode!r}, key={self.key!r}, job={self.job!r})"
        )


@dataclass(frozen=True)
class SqliteSink(DatabaseSink):
    """Write each micro-batch to a table of the SQLite file ``path`` in one transaction,
    exactly once; the embedded database sink (no server). The file and its folder are
    created when missing."""

    path: str

    def _check_target(self) -> None:
        from sparkstate.errors import JobDefinitionError

        if not isinstance(self.path, str) or not self.path.strip():
            raise JobDefinitionError(f"SqliteSink needs the path of a database file, got {self.path!r}")

    def _temporary_schema(self, schema: str) -> bool:
        return schema == "temp"

    def describe(self) -> str:
        # the URL that names the file: sqlite:////data/x.db is /data/x.db's (sqlite://data/x.db would name a host)
        url = f"sqlite://{self.path}" if self.path.startswith("/") else f"sqlite:{self.path}"
        return f"{url} {self._options()}"


def _misread(url: str, info: dict[str, Any]) -> str | None:
    """What shows that libpq does not read ``url`` as the user meant: an ``@`` after the user's
    part (libpq's ends at the first ``@`` before a ``/``, so a raw ``/`` or a second ``@`` in a
    password makes the rest a host, port or database), or a port that is not a number."""
    _, rest = _libpq_split(url)
    if "@" in rest.partition("?")[0]:
        return "an '@' in the host or database name"
    if any(p.strip() and not p.strip().isdigit() for p in str(info.get("port") or "").split(",")):
        return "a port that is not a number"
    return None


def _libpq_split(url: str) -> tuple[str, str]:
    """``scheme://user:password@`` and the rest of a libpq URL, split where libpq splits them:
    at the first ``@`` before any ``/`` (a password may hold ``?`` and ``#``)."""
    scheme, _, rest = url.partition("://")
    cut = min((i for i in (rest.find("@"), rest.find("/")) if i >= 0), default=-1)
    if cut >= 0 and rest[cut] == "@":
        return f"{scheme}://{rest[: cut + 1]}", rest[cut + 1:]
    return f"{scheme}://", rest


_SINK_OPTIONS = ("table", "mode", "key", "job")


def _database_sink(spec: str) -> Any:
    """``postgresql://...`` or ``sqlite:...`` with sink options (table, mode, key, job) in the query.

    A PostgreSQL URL is split where libpq splits it (:func:`_libpq_split`), not where ``urllib``
    would: a password may hold ``?`` and ``#``. The query's other parameters go to libpq as written."""
    from sparkstate.errors import JobDefinitionError

    if spec.startswith("sqlite:"):
        try:
            parts = urllib.parse.urlsplit(spec)
        except ValueError as exc:  # "[" without "]": Python reads it as an IPv6 host
            raise JobDefinitionError(f"sink {mask(spec)!r}: {exc}; use sqlite:///ABSOLUTE/PATH.db") from None
        options, rest = _sink_options(spec, parts.query)
        if parts.netloc:
            raise JobDefinitionError(
                f"sink {mask(spec)!r}: a SQLite URL has no host; use sqlite:///ABSOLUTE/PATH.db or sqlite:RELATIVE/PATH.db"
            )
        if rest:
            raise JobDefinitionError(
                f"sink {spec!r}: unknown option {urllib.parse.unquote_plus(rest[0].partition('=')[0])!r}; "
                f"a SQLite sink takes {', '.join(_SINK_OPTIONS)}"
            )
        if not parts.path:
            raise JobDefinitionError(f"sink {spec!r} names no database file; use sqlite:///ABSOLUTE/PATH.db?table=NAME")
        return SqliteSink(parts.path, **options)
    user, rest_of_url = _libpq_split(spec)
    address, _, query = rest_of_url.partition("?")
    options, rest = _sink_options(spec, query)
    if not address.partition("/")[2].strip("/"):
        raise JobDefinitionError(
            f"sink {mask(spec)!r} names no database; use postgresql://USER@HOST:PORT/DATABASE?table=NAME"
        )
    # options libpq knows (sslmode, connect_timeout...) stay in the URL
    return PostgresSink(user + address + ("?" + "&".join(rest) if rest else ""), **options)


def _sink_options(spec: str, query: str) -> tuple[dict[str, str], list[str]]:
    """The sink options of a URL's ``query`` (decoded), and its other parameters as written."""
    from sparkstate.errors import JobDefinitionError

    options: dict[str, str] = {}
    rest = []
    for piece, (name, value) in zip(split_query(query), query_parameters(query)):
        if name in _SINK_OPTIONS:
            if name in options:
                raise JobDefinitionError(f"sink {mask(spec)!r} gives {name}= twice")
            options[name] = value
        else:
            rest.append(piece)
    return options, rest


#: what a ``kafka://`` sink URL may set beside librdkafka's settings (names with a dot)
KAFKA_SINK_OPTIONS = ("key", "guarantee", "create", "partitions", "job")


def parse_sink(spec: str) -> Any:
    """A sink from a CLI string: ``console``, ``noop``, ``memory``, ``parquet:PATH``
    (``parquet:///ABSOLUTE/PATH``), ``postgresql://USER@HOST:PORT/DB?table=T&mode=upsert&key=a,b``,
    ``sqlite:///PATH.db?table=T`` or
    ``kafka://HOST:PORT/TOPIC?key=a,b&guarantee=at-least-once&create=true&partitions=N``."""
    from sparkstate.errors import JobDefinitionError

    if spec == "console":
        return ConsoleSink()
    if spec == "noop":
        return NoopSink()
    if spec == "memory":
        return MemorySink()
    for prefix in ("parquet://", "parquet:"):
        if spec.startswith(prefix) and len(spec) > len(prefix):
            return ParquetSink(spec[len(prefix):])
    if spec.startswith(("postgresql://", "postgres://", "sqlite:")):
        return _database_sink(spec)
    if spec.startswith("kafka://"):
        from sparkstate.connectors.kafka.sink import parse_kafka_sink
        from sparkstate.connectors.kafka.source import parse_kafka_url
        from sparkstate.connectors.sources import refuse_unknown_kafka_options

        refuse_unknown_kafka_options(spec, parse_kafka_url(spec)[2], KAFKA_SINK_OPTIONS, "sink")
        return parse_kafka_sink(spec)
    raise JobDefinitionError(
        f"unknown sink {mask(spec)!r}; use console, noop, memory, parquet:PATH, "
        "postgresql://USER@HOST:PORT/DB?table=NAME, sqlite:///PATH.db?table=NAME or "
        "kafka://HOST:PORT/TOPIC[?key=COLS&create=true]"
    )
