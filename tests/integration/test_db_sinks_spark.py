"""Database sinks under real Spark: restarts, replays and faults give each row exactly once.

A crash after a batch's database commit but before Spark records the batch is simulated the
way it happens: the batch's entry in the checkpoint's commit log is missing, so the restarted
query runs that batch again with the same id, and the sink must recognise it.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from pathlib import Path

import pytest
from postgres_server import LocalPostgres, closed_port
from spark_helpers import FAST, harness_like_spark, same_rows

from sparkstate import (
    Job,
    JobFailedError,
    KeyedProcessFunction,
    ListSource,
    MemorySink,
    PostgresSink,
    SinkError,
    SqliteSink,
)
from sparkstate.jobs import JOBS

MAX_BATCH = 2_000


def forget_last_commit(checkpoint: Path) -> int:
    """Leave the checkpoint as a crash right after the sink committed its last batch would
    have: the batch planned in the offset log, missing from the commit log, nothing planned
    after it. Returns the batch's id; the restart runs it again with that id.

    A run stopped mid-batch has already left that state (its batch planned, not committed,
    and maybe in the sink): that batch is the one to run again, and no commit is removed,
    since Spark never plans a batch before the one ahead of it is committed."""
    def ids(log: str) -> list[int]:
        return [int(p.name) for p in (checkpoint / log).iterdir() if p.name.isdigit()]

    last, planned = max(ids("commits")), max(ids("offsets"))
    if planned > last:
        return planned
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    return last


def running_sum(events: int = 12_000):
    return JOBS["running-sum"].job(events=events, merchants=300, max_batch=MAX_BATCH)


def pg_rows(url: str, table: str) -> list[dict]:
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(url, row_factory=dict_row) as conn:
        return conn.execute(f'SELECT * FROM "{table}"').fetchall()


def pg_markers(url: str, job: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT batch_id, rows FROM sparkstate_batches WHERE job = %s ORDER BY batch_id", (job,)).fetchall()


def last_per_key(rows: list[dict], key: str) -> list[dict]:
    latest: dict = {}
    for r in rows:
        latest[r[key]] = r
    return list(latest.values())


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_running_sum_into_postgresql_stopped_crashed_and_restarted_is_exactly_once(mode, spark, postgres_db, checkpoint):
    key = ("merchant_id",) if mode == "upsert" else ()
    job = running_sum().sink(PostgresSink(postgres_db, mode=mode, key=key)).with_settings(**FAST)
    first = job.run(checkpoint_dir=checkpoint, spark=spark, until=lambda r: r.batches >= 2)
    assert not first.completed or first.events < 12_000
    replayed = forget_last_commit(checkpoint)
    second = job.run(checkpoint_dir=checkpoint, spark=spark)
    assert second.completed
    assert replayed in [p["batchId"] for p in second.progress]  # Spark ran that batch again...

    expected = harness_like_spark(job, MAX_BATCH)
    rows = pg_rows(postgres_db, "running_sum")
    markers = pg_markers(postgres_db, "running-sum@running_sum")
    assert [b for b, _ in markers] == list(range(len(markers)))  # ...and the sink kept its first commit only
    if mode == "append":
        assert len(rows) == 12_000 and sum(n for _, n in markers) == 12_000
        same_rows(rows, expected)
    else:
        assert len(rows) == 300
        same_rows(rows, last_per_key(expected, "merchant_id"))


def test_session_windows_into_sqlite_with_side_tables_restarted_midway(spark, tmp_path, checkpoint):
    settings = {"events": 20_000, "users": 300, "active_users": 40, "shift_minutes": 3, "events_per_second": 5}
    path = tmp_path / "sessions.db"
    job = JOBS["sessions"].job(max_batch=5_000, **settings).sink(SqliteSink(str(path))).with_settings(**FAST)
    job.run(checkpoint_dir=checkpoint, spark=spark, until=lambda r: r.batches >= 2)
    forget_last_commit(checkpoint)
    assert job.run(checkpoint_dir=checkpoint, spark=spark).completed

    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    # side outputs without a sink of their own went to tables beside the main one
    assert tables == {"sessions", "sessions_dead_letters", "sessions_late_data", "sparkstate_batches", "sparkstate_tables"}
    rows = [dict(r) for r in conn.execute("SELECT * FROM sessions")]

    def epoch_ms(text: str) -> int:
        return int(dt.datetime.fromisoformat(text).timestamp() * 1000)

    for r in rows:  # SQLite keeps timestamps as ISO 8601 text and maps as JSON
        for c in ("window_start", "window_end", "last_event"):
            r[c] = epoch_ms(r[c])
        r["event_counts"] = json.loads(r["event_counts"])
    expected = harness_like_spark(job, 5_000)
    assert len(rows) == len(expected) > 100
    same_rows(rows, expected)
    jobs = {r[0] for r in conn.execute("SELECT DISTINCT job FROM sparkstate_batches")}
    assert "sessions@sessions" in jobs


def test_an_unreachable_database_stops_the_job_before_its_first_batch(spark, checkpoint):
    port = closed_port()
    job = running_sum(2_000).sink(PostgresSink(f"postgresql://postgres@127.0.0.1:{port}/shop")).with_settings(**FAST)
    with pytest.raises(SinkError) as failure:
        job.run(checkpoint_dir=checkpoint, spark=spark)
    message = str(failure.value)
    assert f"cannot connect to PostgreSQL at 127.0.0.1:{port}" in message and "Start the server" in message
    assert not (checkpoint / "commits").exists()


def test_a_table_with_the_wrong_columns_stops_the_job_and_keeps_its_rows(spark, postgres_db, checkpoint):
    import psycopg

    with psycopg.connect(postgres_db) as conn:
        conn.execute("CREATE TABLE running_sum (merchant_id text, total text)")
        conn.execute("INSERT INTO running_sum VALUES ('m0', 'kept')")
    job = running_sum(2_000).sink(PostgresSink(postgres_db)).with_settings(**FAST)
    with pytest.raises(SinkError) as failure:
        job.run(checkpoint_dir=checkpoint, spark=spark)
    message = str(failure.value)
    assert "table running_sum" in message and "missing count (bigint)" in message
    assert "mistyped total is text, the output needs double precision" in message
    assert pg_rows(postgres_db, "running_sum") == [{"merchant_id": "m0", "total": "kept"}]
    assert not (checkpoint / "commits").exists()


def test_a_database_lost_mid_run_fails_the_batch_and_the_restart_loses_nothing(spark, checkpoint):
    server = LocalPostgres()
    try:
        url = server.start()
        job = running_sum().sink(PostgresSink(url)).with_settings(**FAST)

        def stop_the_server(result) -> bool:
            if result.batches >= 2 and server.url:
                server.stop()
                server.address = None
            return False

        with pytest.raises(JobFailedError) as failure:
            job.run(checkpoint_dir=checkpoint, spark=spark, until=stop_the_server)
        message = " ".join(str(failure.value).split())
        assert "SinkError" in message and "PostgreSQL at 127.0.0.1" in message
        assert "The failing batch committed nothing" in message

        server.start()  # same data, same port
        before = pg_markers(url, "running-sum@running_sum")
        assert 2 <= len(before) < 6
        assert job.run(checkpoint_dir=checkpoint, spark=spark).completed
        rows = pg_rows(url, "running_sum")
        assert len(rows) == 12_000
        same_rows(rows, harness_like_spark(job, MAX_BATCH))
        assert pg_markers(url, "running-sum@running_sum")[: len(before)] == before  # committed batches were kept as they were
    finally:
        server.remove()


class Notes(KeyedProcessFunction):
    """Passes each event's text and tags on; PostgreSQL cannot store some of them."""

    def process_element(self, e, ctx):
        yield {"k": ctx.get_current_key(), "note": e["note"], "tags": {e["tag"]: 1.0}}


def test_rows_postgresql_refuses_become_dead_letters_and_the_job_goes_on(spark, postgres_db, checkpoint):
    batches = [
        [{"k": "a", "note": "fine", "tag": "x"}, {"k": "b", "note": "nul \x00 inside", "tag": "x"}],
        [{"k": "c", "note": "fine", "tag": "nul \x00 in JSON"}, {"k": "d", "note": "fine", "tag": "x"}],
    ]
    source = ListSource(batches, "k string, note string, tag string")
    out = "k string, note string, tags map<string,double>"
    job = Job("notes").source(source).key_by("k").process(Notes(), output_schema=out).with_settings(**FAST)
    # no dead-letter output declared: a database main sink's refused rows go to the table beside it
    result = job.sink(PostgresSink(postgres_db)).run(checkpoint_dir=checkpoint, spark=spark)
    assert result.completed
    assert sorted(r["k"] for r in pg_rows(postgres_db, "notes")) == ["a", "d"]
    dead = {json.loads(r["raw"])["k"]: r["reason"] for r in pg_rows(postgres_db, "notes_dead_letters")}
    assert set(dead) == {"b", "c"}
    assert "column note holds a NUL character" in dead["b"]
    assert "column tags holds a NUL character (\\u0000 in JSON)" in dead["c"]
    assert sum(p.get("sideOutputs", {}).get("dead_letters", 0) for p in result.progress) == 2  # counted
    assert result.output_rows == 2  # rows out: what the table took, not what it refused
    assert [b for b, _ in pg_markers(postgres_db, "notes@notes")] == [0, 1]

    # with a dead-letter sink of its own, they go there
    mem = MemorySink()
    again = job.sink(PostgresSink(postgres_db, table="notes2")).dead_letters(mem)
    assert again.run(checkpoint_dir=checkpoint.parent / "second", spark=spark).completed
    assert sorted(json.loads(r["raw"])["k"] for r in mem.rows()) == ["b", "c"]


def test_a_replayed_batch_with_other_rows_ends_the_run_with_a_warning(spark, tmp_path, checkpoint):
    """A source that is not replayable gives a re-run batch other rows: the table keeps the
    first commit, and the run says which batch differed."""
    path = tmp_path / "notes.db"
    out = "k string, note string, tags map<string,double>"

    def job(second_batch: list[dict]):
        batches = [[{"k": "a", "note": "x", "tag": "t"}], second_batch]
        source = ListSource(batches, "k string, note string, tag string")
        return Job("notes").source(source).key_by("k").process(Notes(), output_schema=out).sink(SqliteSink(str(path)))

    first = job([{"k": "b", "note": "x", "tag": "t"}]).with_settings(**FAST)
    assert first.run(checkpoint_dir=checkpoint, spark=spark).completed
    assert forget_last_commit(checkpoint) == 1
    changed = job([{"k": "b", "note": "x", "tag": "t"}, {"k": "c", "note": "x", "tag": "t"}]).with_settings(**FAST)
    result = changed.run(checkpoint_dir=checkpoint, spark=spark)
    assert any("batch 1 ran again with 2 rows for table notes, but its first commit had 1" in w for w in result.warnings)
    with sqlite3.connect(path) as conn:
        assert sorted(k for (k,) in conn.execute("SELECT k FROM notes")) == ["a", "b"]
