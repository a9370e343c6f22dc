"""The transactional database sinks without Spark: the protocol on SQLite and on a real
PostgreSQL server (tests/postgres_server.py), the URL forms, and the faults."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import sqlite3
import threading
import time

import pyarrow as pa
import pytest
from postgres_server import closed_port

from sparkstate import (
    Job,
    KeyedProcessFunction,
    ListSource,
    MemorySink,
    ParquetSink,
    PostgresSink,
    SinkError,
    SqliteSink,
)
from sparkstate.connectors import database
from sparkstate.connectors.sinks import parse_sink
from sparkstate.errors import JobDefinitionError

UTC = dt.UTC


# --------------------------------------------------------------------------- helpers


class Db:
    """A sink factory and plain-driver reads of what the sink wrote (not through the sink)."""

    def __init__(self, kind: str, target: str):
        self.kind, self.target = kind, target

    def sink(self, table: str = "out", mode: str = "append", key=(), job: str = "job") -> object:
        cls = PostgresSink if self.kind == "postgresql" else SqliteSink
        return cls(self.target, table=table, mode=mode, key=key, job=job)

    def connect(self):
        if self.kind == "postgresql":
            import psycopg

            return psycopg.connect(self.target, autocommit=True)
        return sqlite3.connect(self.target, isolation_level=None)

    def sql(self, statement: str, params=()) -> list[tuple]:
        if self.kind == "sqlite":
            statement = statement.replace("%s", "?")
        conn = self.connect()
        try:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    def rows(self, table: str = "out", order: str = "1") -> list[tuple]:
        return self.sql(f'SELECT * FROM "{table}" ORDER BY {order}')

    def markers(self, job: str = "job", table: str = "out") -> list[tuple]:
        """The batches the job committed to ``table`` ([] also when no marker table was ever committed)."""
        if "batch_id" not in self.column_types("sparkstate_batches"):
            return []
        return self.sql(
            "SELECT batch_id, rows FROM sparkstate_batches WHERE job = %s ORDER BY batch_id", (f"{job}@{table}",)
        )

    def column_types(self, table: str) -> dict[str, str]:
        if self.kind == "postgresql":
            rows = self.sql(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
                (f'"{table}"',),
            )
        else:
            rows = [(r[1], r[2]) for r in self.sql(f'PRAGMA table_info("{table}")')]
        return dict(rows)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path) -> Db:
    if request.param == "sqlite":
        return Db("sqlite", str(tmp_path / "sink.db"))
    return Db("postgresql", request.getfixturevalue("postgres_db"))


def table(**columns) -> pa.Table:
    return pa.table(columns)


PAYMENTS = pa.schema([("merchant_id", pa.string()), ("count", pa.int64()), ("total", pa.float64())])


def payments(*rows) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(PAYMENTS.names, r)) for r in rows], schema=PAYMENTS)


# --------------------------------------------------------------------------- the protocol


def test_append_writes_rows_and_marker_in_one_transaction(db):
    sink = db.sink()
    database.prepare(sink, PAYMENTS, None)
    assert database.write(sink, payments(("m1", 1, 5.0), ("m2", 1, 2.5)), 0) == 2
    assert database.write(sink, payments(("m1", 2, 7.0)), 1) == 1
    assert db.rows(order="1, 2") == [("m1", 1, 5.0), ("m1", 2, 7.0), ("m2", 1, 2.5)]
    assert db.markers() == [(0, 2), (1, 1)]


def test_a_replayed_batch_is_recognised_and_skipped(db):
    sink = db.sink()
    batch = payments(("m1", 1, 5.0), ("m2", 1, 2.5))
    assert database.write(sink, batch, 7) == 2
    assert database.write(sink, batch, 7) is None  # Spark replays batch 7 after a crash
    assert len(db.rows()) == 2 and db.markers() == [(7, 2)]
    # another job identity is another writer: its batch 7 is its own
    assert database.write(db.sink(job="other"), batch, 7) == 2
    assert len(db.rows()) == 4


def test_upsert_keeps_one_row_per_key_and_the_last_row_of_a_batch_wins(db):
    sink = db.sink(mode="upsert", key=("merchant_id",))
    database.prepare(sink, PAYMENTS, None)
    assert database.write(sink, payments(("m1", 1, 5.0), ("m2", 1, 2.5), ("m1", 2, 7.0)), 0) == 2
    assert db.rows() == [("m1", 2, 7.0), ("m2", 1, 2.5)]
    assert database.write(sink, payments(("m2", 2, 3.5), ("m3", 1, 1.0)), 1) == 2
    assert database.write(sink, payments(("m2", 99, 99.0)), 1) is None  # replay: skipped, not re-applied
    assert db.rows() == [("m1", 2, 7.0), ("m2", 2, 3.5), ("m3", 1, 1.0)]
    assert db.markers() == [(0, 3), (1, 2)]  # the rows each batch gave the sink


def test_upsert_on_a_composite_key_and_on_key_only_rows(db):
    sink = db.sink(mode="upsert", key="merchant_id,count")
    database.write(sink, payments(("m1", 1, 5.0), ("m1", 2, 6.0), ("m1", 1, 8.0)), 0)
    assert db.rows(order="1, 2") == [("m1", 1, 8.0), ("m1", 2, 6.0)]
    keys_only = db.sink(table="keys", mode="upsert", key=("k",), job="keys")
    database.write(keys_only, table(k=["a", "b", "a"]), 0)
    assert db.rows("keys") == [("a",), ("b",)]


def test_upsert_turns_a_row_with_a_null_key_into_a_dead_letter_and_writes_the_rest(db):
    sink = db.sink(mode="upsert", key=("merchant_id",))
    outcome = database.commit_batch(sink, payments(("m1", 1, 5.0), (None, 1, 1.0)), 3)
    assert outcome.rows == 1 and db.rows() == [("m1", 1, 5.0)] and db.markers() == [(3, 2)]
    (dead,) = outcome.refused
    assert json.loads(dead["raw"]) == {"merchant_id": None, "count": 1, "total": 1.0}
    assert "key column merchant_id is null" in dead["reason"] and "batch 3" in dead["reason"]
    # the replay finds the same dead letter without writing anything
    again = database.commit_batch(sink, payments(("m1", 1, 5.0), (None, 1, 1.0)), 3)
    assert again.rows is None and again.refused == outcome.refused and again.warning is None


def test_the_table_is_created_from_the_output_schema(db):
    sink = db.sink(table="typed", mode="upsert", key=("id",))
    schema = pa.schema([
        ("id", pa.int64()), ("small", pa.int32()), ("x", pa.float64()), ("name", pa.string()), ("ok", pa.bool_()),
        ("at", pa.timestamp("us", tz="UTC")), ("tags", pa.map_(pa.string(), pa.float64())),
        ("info", pa.struct([("a", pa.int64())])),
    ])
    database.prepare(sink, schema, None)
    types = db.column_types("typed")
    if db.kind == "postgresql":
        assert types == {
            "id": "bigint", "small": "integer", "x": "double precision", "name": "text", "ok": "boolean",
            "at": "timestamp with time zone", "tags": "jsonb", "info": "jsonb",
        }
    else:
        assert types == {
            "id": "INTEGER", "small": "INTEGER", "x": "REAL", "name": "TEXT", "ok": "BOOLEAN",
            "at": "TIMESTAMP", "tags": "TEXT", "info": "TEXT",
        }
    # upsert's key became the primary key
    dialect = database.dialect_of(sink)
    conn = dialect.connect(sink)
    try:
        assert {"id"} in dialect.unique_keys(conn, "typed")
    finally:
        conn.close()


def test_every_supported_type_round_trips(db):
    at = dt.datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)
    wall = dt.datetime(2024, 5, 1, 8, 0)
    nested = pa.struct([("a", pa.int64()), ("b", pa.string()), ("m", pa.map_(pa.string(), pa.int64()))])
    data = pa.table({
        "i64": pa.array([2**62, None], pa.int64()),
        "i32": pa.array([-7, 3], pa.int32()),
        "f64": pa.array([0.1 + 0.2, None], pa.float64()),
        "s": pa.array(['a "quoted", comma\nnew line', ""], pa.string()),
        "s_null": pa.array([None, "x"], pa.string()),
        "b": pa.array([True, False], pa.bool_()),
        "ts": pa.array([at, None], pa.timestamp("us", tz="UTC")),
        "ntz": pa.array([wall, None], pa.timestamp("us")),
        "d": pa.array([dt.date(2024, 5, 1), None], pa.date32()),
        "dec": pa.array([decimal.Decimal("12.30"), None], pa.decimal128(10, 2)),
        "bin": pa.array([b"\x00\xffab", None], pa.binary()),
        "m": pa.array([[("k", 1.5), ("j", -2.0)], []], pa.map_(pa.string(), pa.float64())),
        "st": pa.array([{"a": 1, "b": "x", "m": [("u", 2)]}, None], nested),
        "l": pa.array([[1, 2, 3], None], pa.list_(pa.int64())),
    })
    if db.kind == "postgresql":  # instants must not depend on the session's time zone
        (name,) = db.sql("SELECT current_database()")[0]
        db.sql(f"ALTER DATABASE \"{name}\" SET TimeZone = 'Asia/Kolkata'")
    sink = db.sink(table="types")
    database.prepare(sink, data.schema, None)
    assert database.write(sink, data, 0) == 2
    by_i32 = {r[1]: r for r in db.rows("types")}
    full, sparse = by_i32[-7], by_i32[3]
    json_values = [{"k": 1.5, "j": -2.0}, {"a": 1, "b": "x", "m": {"u": 2}}, [1, 2, 3]]
    if db.kind == "postgresql":
        assert full == (
            2**62, -7, 0.1 + 0.2, 'a "quoted", comma\nnew line', None, True, at, wall, dt.date(2024, 5, 1),
            decimal.Decimal("12.30"), b"\x00\xffab", *json_values,
        )
        assert sparse == (None, 3, None, "", "x", False, None, None, None, None, None, {}, None, None)
        assert db.sql("SELECT to_char(ts AT TIME ZONE 'UTC', 'HH24:MI') FROM types WHERE i32 = -7") == [("12:30",)]
    else:
        assert full[:6] == (2**62, -7, 0.1 + 0.2, 'a "quoted", comma\nnew line', None, 1)
        assert full[6:8] == ("2024-05-01 12:30:15.123456Z", "2024-05-01 08:00:00.000000")  # ISO 8601, instants in UTC
        assert db.sql("SELECT datetime(ts) FROM types WHERE i32 = -7") == [("2024-05-01 12:30:15",)]
        assert full[8:11] == ("2024-05-01", "12.30", b"\x00\xffab")
        assert [json.loads(v) for v in full[11:]] == json_values
        assert sparse == (None, 3, None, "", "x", 0, None, None, None, None, None, "{}", None, None)


def test_doubles_keep_every_bit(db):
    import random

    rng = random.Random(7)
    values = [rng.uniform(-1e6, 1e6) for _ in range(500)] + [1e-300, 2.0**-1074, 1.7976931348623157e308, -0.0]
    sink = db.sink(table="doubles")
    database.write(sink, table(i=pa.array(range(len(values)), pa.int64()), x=values), 0)
    assert [r[1] for r in db.rows("doubles")] == values


def test_an_empty_batch_writes_its_marker(db):
    sink = db.sink()
    assert database.write(sink, payments(), 0) == 0
    assert db.markers() == [(0, 0)] and db.rows() == []
    assert database.write(sink, payments(), 0) is None  # and its replay is recognised


# --------------------------------------------------------------------------- faults


def test_an_existing_table_with_the_wrong_columns_is_refused_and_nothing_written(db):
    db.sql('CREATE TABLE "out" (merchant_id text, total text, note text NOT NULL, comment text)')
    db.sql("INSERT INTO \"out\" VALUES ('m0', 'x', 'kept', NULL)")
    sink = db.sink()
    with pytest.raises(SinkError) as failure:
        database.prepare(sink, PAYMENTS, None)
    message = str(failure.value)
    assert "table out" in message and "does not fit the job's output" in message
    assert "missing count (" in message  # the column the output has and the table lacks
    assert "mistyped total is" in message  # text where the output has doubles
    assert "extra note (" in message  # NOT NULL without a default: the sink could never fill it
    assert "comment" not in message  # nullable extra columns are fine
    assert 'ALTER TABLE "out" ADD COLUMN "count"' in message and "drop it" in message
    with pytest.raises(SinkError, match="does not fit"):
        database.write(sink, payments(("m1", 1, 5.0)), 0)
    assert db.rows() == [("m0", "x", "kept", None)] and db.markers() == []


def test_an_existing_table_that_fits_is_used_and_its_extra_columns_filled_by_default(db):
    default = "now()" if db.kind == "postgresql" else "CURRENT_TIMESTAMP"
    db.sql(
        f'CREATE TABLE "out" (merchant_id text, "count" bigint, total double precision, loaded_at timestamp DEFAULT {default})'
    )
    sink = db.sink()
    database.prepare(sink, PAYMENTS, None)
    database.write(sink, payments(("m1", 1, 5.0)), 0)
    (row,) = db.rows()
    assert row[:3] == ("m1", 1, 5.0) and row[3] is not None


def test_upsert_into_a_table_without_a_key_constraint_is_refused(db):
    db.sql('CREATE TABLE "out" (merchant_id text, "count" bigint, total double precision)')
    with pytest.raises(SinkError, match=r"no primary key or unique constraint on \(merchant_id\).*CREATE UNIQUE INDEX"):
        database.prepare(db.sink(mode="upsert", key=("merchant_id",)), PAYMENTS, None)
    with pytest.raises(SinkError, match="upsert key region is not among the output columns"):
        database.prepare(db.sink(mode="upsert", key=("region",)), PAYMENTS, None)


def test_a_batch_the_database_refuses_commits_nothing_and_its_retry_writes_once(db):
    db.sql('CREATE TABLE "out" (merchant_id text, "count" bigint, total double precision CHECK (total < 100))')
    sink = db.sink()
    with pytest.raises(SinkError) as failure:
        database.write(sink, payments(("m1", 1, 5.0), ("m2", 1, 500.0)), 4)
    assert "refused writing batch 4 to table out" in str(failure.value)
    assert "nothing of it was committed" in str(failure.value)
    assert db.rows() == [] and db.markers() == []  # not even the first row, nor the marker
    fixed = payments(("m1", 1, 5.0), ("m2", 1, 50.0))
    assert database.write(sink, fixed, 4) == 2 and database.write(sink, fixed, 4) is None
    assert len(db.rows()) == 2


def test_markers_ahead_of_the_checkpoint_are_refused(db):
    sink = db.sink()
    database.write(sink, payments(("m1", 1, 5.0)), 0)
    database.write(sink, payments(("m1", 2, 6.0)), 1)
    # the same checkpoint: batch 1 may be committed here but not yet in Spark's commit log
    database.prepare(sink, PAYMENTS, 0)
    database.prepare(sink, PAYMENTS, 1)
    # a new checkpoint would run batch 0 and 1 again and have them skipped as replays
    with pytest.raises(SinkError) as failure:
        database.prepare(sink, PAYMENTS, None)
    message = str(failure.value)
    assert "already holds batches up to 1 of writer 'job@out'" in message and "has committed no batch" in message
    assert "job=" in message and "--fresh" in message
    database.reset(sink)  # what --fresh does
    database.prepare(sink, PAYMENTS, None)
    assert db.markers() == [] and db.rows() == []


def test_unreachable_postgresql_names_host_and_port_and_the_fix():
    port = closed_port()
    sink = PostgresSink(f"postgresql://app:secret@127.0.0.1:{port}/shop", table="out", job="job")
    started = time.monotonic()
    with pytest.raises(SinkError) as failure:
        database.prepare(sink, PAYMENTS, None)
    message = str(failure.value)
    assert f"cannot connect to PostgreSQL at 127.0.0.1:{port} (database shop, user app)" in message
    assert "Connection refused" in message and "Start the server" in message
    assert "secret" not in message and "app:***@" in message
    assert time.monotonic() - started < 10


def test_sqlite_in_a_folder_that_cannot_exist_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    sink = SqliteSink(str(blocker / "sub" / "x.db"), table="out", job="job")
    with pytest.raises(SinkError, match="cannot open SQLite database .*x.db"):
        database.prepare(sink, PAYMENTS, None)


def end_the_writers_connection(url: str, sink, waiting: str) -> BaseException:
    """Write a batch in a thread, and when its server process is ``waiting`` (a condition on
    pg_stat_activity) end it; returns the error the write raised."""
    import psycopg

    failure: list[BaseException] = []

    def write() -> None:
        try:
            database.write(sink, payments(("m1", 1, 5.0)), 0)
        except BaseException as exc:
            failure.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    # a connection of its own: a transaction keeps its first snapshot of pg_stat_activity
    with psycopg.connect(url, autocommit=True) as watcher:
        for _ in range(200):
            found = watcher.execute(
                f"SELECT pid FROM pg_stat_activity WHERE {waiting} AND datname = current_database()"
            ).fetchall()
            if found:
                break
            time.sleep(0.05)
        assert found, f"the sink's connection never met {waiting}"
        watcher.execute("SELECT pg_terminate_backend(%s)", (found[0][0],))
    writer.join(30)
    assert len(failure) == 1 and isinstance(failure[0], SinkError), failure
    return failure[0]


def test_a_connection_lost_mid_batch_commits_nothing(postgres_db):
    """The server ends the sink's connection while it waits inside its transaction."""
    import psycopg

    db = Db("postgresql", postgres_db)
    sink = db.sink()
    database.prepare(sink, PAYMENTS, None)
    locker = psycopg.connect(postgres_db)
    locker.execute('LOCK TABLE "out" IN ACCESS EXCLUSIVE MODE')  # the sink's COPY will wait for it
    try:
        message = str(end_the_writers_connection(postgres_db, sink, "wait_event_type = 'Lock'"))
    finally:
        locker.rollback()
        locker.close()
    assert "lost the connection to PostgreSQL at 127.0.0.1" in message and "batch 0" in message
    assert db.rows() == [] and db.markers() == []  # the marker was inserted in the lost transaction
    assert database.write(sink, payments(("m1", 1, 5.0)), 0) == 1  # the replay writes it, once
    assert db.rows() == [("m1", 1, 5.0)]


# --------------------------------------------------------------------------- specs and URLs


def test_parse_sink_reads_database_urls(tmp_path):
    pg = parse_sink("postgresql://app:pw@db.local:5433/shop?table=totals&mode=upsert&key=merchant_id,day&sslmode=disable")
    assert isinstance(pg, PostgresSink)
    assert (pg.table, pg.mode, pg.key, pg.job) == ("totals", "upsert", ("merchant_id", "day"), None)
    assert pg.url == "postgresql://app:pw@db.local:5433/shop?sslmode=disable"  # libpq's options stay in the URL
    assert "pw" not in pg.describe() and "app:***@db.local" in pg.describe()
    assert parse_sink("postgres://u@h/db").table is None  # bound to the job's name later
    lite = parse_sink(f"sqlite://{tmp_path}/out.db?table=t&job=nightly")
    assert isinstance(lite, SqliteSink) and lite.path == f"{tmp_path}/out.db" and (lite.table, lite.job) == ("t", "nightly")
    assert parse_sink("sqlite:rel/out.db").path == "rel/out.db"
    assert parse_sink("parquet:///abs/out") == ParquetSink("/abs/out")
    assert parse_sink("parquet:rel/out") == ParquetSink("rel/out")


@pytest.mark.parametrize(
    ("url", "path", "shown"),
    [
        ("sqlite:////data/x.db", "//data/x.db", "sqlite:////data/x.db"),
        ("sqlite:///data/x.db", "/data/x.db", "sqlite:///data/x.db"),
        ("sqlite:data/x.db", "data/x.db", "sqlite:data/x.db"),
    ],
)
def test_a_sqlite_path_is_shown_as_the_url_that_names_it(url, path, shown):
    """An absolute path shown as sqlite:{path} read as a host when it began with "//"
    (sqlite:////data/x.db was shown as sqlite://data/x.db): shown is the URL that names it."""
    sink = parse_sink(url)
    assert isinstance(sink, SqliteSink) and sink.path == path
    assert sink.describe() == f"{shown} table=<job name> mode=append"
    assert parse_sink(shown).path == path  # what is shown reads back as the same file
    assert SqliteSink("/data/x.db").describe().startswith("sqlite:///data/x.db ")


@pytest.mark.parametrize(
    "spec, message",
    [
        ("postgresql://u@h/db?mode=upsert", "upsert needs the key columns"),
        ("postgresql://u@h/db?mode=merge", "mode must be 'append' or 'upsert'"),
        ("postgresql://u@h/db?key=a", "applies to mode='upsert' only"),
        ("postgresql://u@h/db?table=bad-name", "is not a plain table name"),
        ("postgresql://u@h/db?table=a&table=b", "gives table= twice"),
        ("postgresql://u@h:5432", "names no database"),
        ("postgresql://u@h/db?bogus=1", "cannot read the URL"),
        ("sqlite://host/x.db", "a SQLite URL has no host"),
        ("sqlite:///x.db?sslmode=require", "unknown option 'sslmode'"),
        ("sqlite://", "names no database file"),
        ("mysql://u@h/db", "unknown sink"),
    ],
)
def test_parse_sink_explains_bad_urls(spec, message):
    with pytest.raises(JobDefinitionError, match=message):
        parse_sink(spec)


class Passthrough(KeyedProcessFunction):
    def process_element(self, e, ctx):
        yield {"shop": e["shop"]}


def test_sinks_bind_to_the_job_and_side_outputs_get_their_own_tables(tmp_path):
    from sparkstate import TumblingEventTimeWindows, WatermarkStrategy, agg

    source = ListSource([[{"ts": 1, "shop": "a", "amount": 1.0}]], "ts bigint, shop string, amount double")
    job = (
        Job("per-minute")
        .source(source, watermark=WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("ts"))
        .key_by("shop")
        .window(TumblingEventTimeWindows.of(60_000))
        .aggregate(agg.count("n"))
        .sink(SqliteSink(str(tmp_path / "x.db")))
        .dead_letters(SqliteSink(str(tmp_path / "dl.db"), table="bad_events"))
    )
    bound = database.bind_job_sinks(job)
    assert (bound.sink_spec.table, bound.sink_spec.job) == ("per_minute", "per-minute")
    sides = database.side_sinks(bound)
    assert (sides["dead_letters"].path, sides["dead_letters"].table, sides["dead_letters"].job) == (
        str(tmp_path / "dl.db"), "bad_events", "per-minute/dead_letters",
    )
    late = sides["late_data"]  # no sink of its own: a table beside the main one
    assert (late.path, late.table, late.job, late.mode) == (
        str(tmp_path / "x.db"), "per_minute_late_data", "per-minute/late_data", "append"
    )
    tables = {s.table: schema.names for s, schema in database.job_database_sinks(bound)}
    assert tables == {
        "per_minute": ["shop", "window_start", "window_end", "n"],
        "bad_events": ["raw", "reason"],
        "per_minute_late_data": ["ts", "shop", "amount"],
    }
    # without a dead-letter output of its own, a database main sink's refused rows go to a table
    # beside it, written only when there are some (schema None: not every batch); --fresh resets it too
    plain = database.bind_job_sinks(
        Job("plain").source(source).key_by("shop").process(Passthrough(), output_schema="shop string")
        .sink(SqliteSink(str(tmp_path / "x.db")))
    )
    assert [(s.table, schema is None) for s, schema in database.job_database_sinks(plain)] == [
        ("plain", False), ("plain_dead_letters", True),
    ]
    # without a database main sink, side outputs keep their default (Parquet in the checkpoint)
    assert database.side_sinks(database.bind_job_sinks(job.sink(MemorySink())))["late_data"] is None


# --------------------------------------------------------------------------- rows a database refuses


def test_rows_the_database_cannot_store_become_dead_letters_and_the_batch_goes_on(db):
    """PostgreSQL refuses NUL in text and in JSON; JSON has no NaN or infinity (neither
    database gets text that no JSON reader accepts). Each such row is a dead letter with
    the row and the reason; the others are written, with the batch's marker."""
    data = pa.table({
        "k": pa.array(["good", "nul", "nan", "inf", "json-nul", "escaped"]),
        "note": pa.array(["ok", "a\x00b", "ok", "ok", "ok", "ok"]),
        "m": pa.array(
            [[("x", 1.0)], [("x", 1.0)], [("x", float("nan"))], [("x", float("-inf"))], [("x\x00y", 2.0)], [("\\u0000", 3.0)]],
            pa.map_(pa.string(), pa.float64()),
        ),
    })
    sink = db.sink()
    outcome = database.commit_batch(sink, data, 5)
    reasons = {json.loads(d["raw"])["k"]: d["reason"] for d in outcome.refused}
    refused_by_both = {"nan", "inf"}
    if db.kind == "postgresql":
        assert set(reasons) == refused_by_both | {"nul", "json-nul"}
        assert "column note holds a NUL character" in reasons["nul"]
        assert "column m holds a NUL character (\\u0000 in JSON)" in reasons["json-nul"]
    else:  # SQLite stores NUL characters
        assert set(reasons) == refused_by_both
    assert "column m holds NaN or infinity" in reasons["nan"] and "batch 5" in reasons["nan"]
    assert "table out in " in reasons["nan"]
    written = {r[0] for r in db.rows()}
    assert written == {"good", "nul", "json-nul", "escaped"} - set(reasons)
    assert outcome.rows == len(written) and db.markers() == [(5, 6)]
    # SQLite would store NaN in a double column as NULL: a dead letter there, kept in PostgreSQL
    nan = database.commit_batch(db.sink(table="doubles"), table(k=["a", "b"], x=[1.0, float("nan")]), 0)
    assert nan.rows == (2 if db.kind == "postgresql" else 1)
    if db.kind == "sqlite":
        assert "column x holds NaN, which SQLite would store as NULL" in nan.refused[0]["reason"]
    # the raw record keeps the row's values, NUL shown as JSON's \u0000
    if db.kind == "postgresql":
        assert json.loads(next(d["raw"] for d in outcome.refused if "note holds" in d["reason"]))["note"] == "a\x00b"


def test_a_replayed_batch_with_other_rows_is_skipped_with_a_warning_naming_it(db):
    sink = db.sink()
    assert database.commit_batch(sink, payments(("m1", 1, 5.0), ("m2", 1, 2.5)), 4).warning is None
    same = database.commit_batch(sink, payments(("m1", 1, 5.0), ("m2", 1, 2.5)), 4)
    assert same.rows is None and same.warning is None
    other = database.commit_batch(sink, payments(("m1", 1, 5.0)), 4)  # a source that is not replayable
    assert other.rows is None
    assert "batch 4 ran again with 1 rows for table out, but its first commit had 2" in other.warning
    assert db.markers() == [(4, 2)] and len(db.rows()) == 2


def test_a_dead_letter_holding_a_nul_character_is_kept_escaped(db):
    """A text line with a NUL character is a dead letter; the dead-letter table keeps it."""
    from sparkstate.api.functions import DEAD_LETTERS
    from sparkstate.api.schema import Schema
    from sparkstate.runtime.io.sinks import spark_sink

    sink = db.sink(table="out_dead_letters")
    rows = [{"raw": "a\x00b", "reason": "not JSON"}]
    outcome = spark_sink(sink).write_side("dead_letters", rows, Schema.of(DEAD_LETTERS.schema), None, 0)
    assert outcome.rows == 1 and not outcome.refused
    assert db.rows("out_dead_letters") == [("a\\u0000b", "not JSON")]


# --------------------------------------------------------------------------- marker identity and gaps


def test_two_tables_of_one_job_name_keep_their_batches_apart(db):
    a, b = db.sink(table="a"), db.sink(table="b")
    for sink in (a, b):
        database.prepare(sink, PAYMENTS, None)
    assert database.write(a, payments(("m1", 1, 5.0)), 0) == 1
    assert database.write(b, payments(("m2", 1, 6.0)), 0) == 1  # not skipped as a's batch 0
    assert db.rows("a") == [("m1", 1, 5.0)] and db.rows("b") == [("m2", 1, 6.0)]
    assert db.markers(table="a") == [(0, 1)] and db.markers(table="b") == [(0, 1)]
    database.reset(a)  # --fresh on one deployment leaves the other's markers
    assert db.markers(table="a") == [] and db.markers(table="b") == [(0, 1)]


def test_markers_of_the_job_name_alone_are_adopted_by_a_running_checkpoint(db):
    """Markers written before the identity named the table carry on: a checkpoint that has
    committed batches takes them (copied), so its replay of the next batch is recognised."""
    database.prepare(db.sink(), PAYMENTS, None)
    for batch in (0, 1):
        db.sql("INSERT INTO sparkstate_batches (job, batch_id, rows) VALUES ('job', %s, 1)", (batch,))
    sink = db.sink()
    database.prepare(sink, PAYMENTS, 0)
    assert db.markers() == [(0, 1), (1, 1)]
    assert database.write(sink, payments(("m1", 1, 5.0)), 1) is None
    # a new checkpoint does not inherit them
    other = db.sink(table="other")
    database.prepare(other, PAYMENTS, None)
    assert db.markers(table="other") == []


def test_a_checkpoint_ahead_of_the_markers_is_refused(db):
    sink = db.sink()
    database.prepare(sink, PAYMENTS, None)
    for batch in range(3):
        database.write(sink, payments() if batch == 1 else payments(("m1", batch, 1.0)), batch)
    database.prepare(sink, PAYMENTS, 2)
    database.prepare(sink, PAYMENTS, 1)  # batch 2 written, its commit in Spark's log not yet
    # the database restored from a backup taken after batch 0
    db.sql("DELETE FROM sparkstate_batches WHERE batch_id > 0")
    with pytest.raises(SinkError) as failure:
        database.prepare(sink, PAYMENTS, 2)
    message = str(failure.value)
    assert "holds markers up to batch 0 only of writer 'job@out'" in message
    assert "checkpoint has committed batches up to 2" in message and "older backup" in message
    assert "INSERT INTO sparkstate_batches (job, batch_id, rows) VALUES ('job@out', 2, 0)" in message
    db.sql("DELETE FROM sparkstate_batches")
    with pytest.raises(SinkError, match="holds no marker of writer 'job@out'"):
        database.prepare(sink, PAYMENTS, 2)
    # a sink that only gets some batches (refused rows' dead letters) is not held to every batch
    database.prepare(sink, PAYMENTS, 2, every_batch=False)
    # a side output's table may have no marker at all (none was written for batches without rows)
    database.prepare(sink, PAYMENTS, 2, may_be_new=True)
    db.sql("INSERT INTO sparkstate_batches (job, batch_id, rows) VALUES ('job@out', 0, 0)")
    with pytest.raises(SinkError, match="holds markers up to batch 0 only"):
        database.prepare(sink, PAYMENTS, 2, may_be_new=True)  # but one that has markers must have them all
    db.sql("DELETE FROM sparkstate_batches")
    db.sql("INSERT INTO sparkstate_batches (job, batch_id, rows) VALUES ('job@out', 2, 0)")  # what the message says
    database.prepare(sink, PAYMENTS, 2)


# --------------------------------------------------------------------------- tables and names


@pytest.mark.parametrize(
    "spec, message",
    [
        ("postgresql://u@h/db?table=pg_temp.x", "pg_temp is a temporary schema"),
        ("postgresql://u@h/db?table=pg_temp_3.x", "pg_temp_3 is a temporary schema"),
        ("sqlite:///tmp/x.db?table=temp.x", "temp is a temporary schema"),
        ("sqlite:///tmp/x.db?table=TEMP.x", "TEMP is a temporary schema"),
        ("postgresql://u@h/db?table=sparkstate_batches", "sparkstate_batches is the table of sparkstate's batch markers"),
        ("sqlite:///tmp/x.db?table=main.Sparkstate_Batches", "the table of sparkstate's batch markers"),
        ("postgresql://u@h/db?table=" + "t" * 64, "is 64 bytes; PostgreSQL keeps only the first 63"),
    ],
)
def test_tables_that_would_lose_rows_are_refused(spec, message):
    with pytest.raises(JobDefinitionError, match=message):
        parse_sink(spec)


def test_postgresql_names_over_63_bytes_are_refused_before_anything_is_written(postgres_db):
    # a table of 51 bytes is fine, but its dead letters' table would be 64: refused when bound
    main = PostgresSink(postgres_db, table="t" * 51, job="job")
    with pytest.raises(JobDefinitionError, match="table name 't+_dead_letters' is 64 bytes.*at most 50 bytes"):
        main.side_table("dead_letters")
    assert SqliteSink("x.db", table="t" * 100).side_table("dead_letters").table == "t" * 100 + "_dead_letters"
    db = Db("postgresql", postgres_db)
    long_column = "c" * 64
    schema = pa.schema([("k", pa.string()), (long_column, pa.int64())])
    with pytest.raises(SinkError, match=f"output column '{long_column}' is 64 bytes long; PostgreSQL keeps only"):
        database.prepare(db.sink(), schema, None)
    assert "out" not in db.column_types("out") and db.markers() == []
    database.prepare(db.sink(), pa.schema([("é" * 31, pa.int64())]), None)  # 62 bytes: fine


def test_a_connection_lost_while_committing_says_the_outcome_is_unknown(postgres_db):
    """The commit runs a deferred constraint trigger that sleeps; the server ends the
    connection then. Whether the commit went through is unknown to the sink, and the message
    says so (the marker settles it on the re-run)."""
    db = Db("postgresql", postgres_db)
    sink = db.sink()
    database.prepare(sink, PAYMENTS, None)
    db.sql("CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(30); RETURN NULL; END $$")
    db.sql(
        'CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON "out" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow()'
    )
    message = " ".join(str(end_the_writers_connection(postgres_db, sink, "wait_event = 'PgSleep'")).split())
    assert "while committing batch 0 to table out" in message and "is unknown" in message
    assert "nothing of it was committed" not in message and "marker" in message


# --------------------------------------------------------------------------- secrets


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:S3cret@h:5432/db",
        "postgresql://app@h:5432/db?password=S3cret",
        "postgresql://app@h:5432/db?sslmode=require&sslpassword=S3cret&connect_timeout=3",
        "host=h port=5432 dbname=db user=app password=S3cret",
        "host=h dbname=db password = 'S3 cret \\' more' user=app",
        "host=h dbname=db sslpassword=S3cret",
    ],
)
def test_every_credential_form_libpq_takes_is_masked_in_descriptions_and_reprs(url):
    from sparkstate.connectors.credentials import mask

    sink = PostgresSink(url, table="out", job="job")
    job = Job("j").sink(sink)
    for text in (sink.describe(), repr(sink), repr(job), mask(url), str(sink)):
        assert "S3" not in text and "cret" not in text, text
    assert "***" in sink.describe()
    assert "db" in repr(sink) and "postgresql://" not in repr(sink)  # no URL in the repr at all


def test_a_url_libpq_cannot_read_is_reported_without_its_password():
    with pytest.raises(JobDefinitionError) as failure:
        PostgresSink("host=h password=S3c ret", table="out")  # unquoted: "ret" is a word without "="
    assert "S3c" not in str(failure.value) and "ret" not in str(failure.value)
    with pytest.raises(JobDefinitionError) as failure:
        PostgresSink("postgresql://app:S3cret@h/db?bogus=1", table="out")
    assert "S3cret" not in str(failure.value) and "app:***@h/db" in str(failure.value)


def test_a_failure_of_the_database_names_the_cause_and_the_fix(db, tmp_path):
    """Not a row's fault: the batch fails, saying what to do, and the next run resumes."""
    import psycopg.errors

    dialect = database.dialect_of(db.sink())
    if db.kind == "postgresql":
        full = psycopg.errors.DiskFull("could not extend file: No space left on device")
        assert "disk is full: free space on it" in dialect.advice(full)
        assert "start it" in dialect.advice(psycopg.errors.AdminShutdown("terminating connection"))
    else:
        assert "disk holding the database file is full" in dialect.advice(sqlite3.OperationalError("database or disk is full"))
    if db.kind == "sqlite":
        return
    # a read-only database, for real: the batch fails with the cause and the fix, and writes nothing
    (name,) = db.sql("SELECT current_database()")[0]
    db.sql(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    with pytest.raises(SinkError) as failure:
        database.write(db.sink(), payments(("m1", 1, 5.0)), 0)
    with db.connect() as conn:
        conn.execute("SET default_transaction_read_only = off")
        conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = off')
    message = str(failure.value)
    assert "nothing of it was committed" in message and "then run again" in message, message
    assert "the next run resumes with this batch" in message and "read-only" in message
