"""Exactly-once under real crashes: a job killed with SIGKILL again and again, restarted from
its checkpoint each time, leaves the same rows in its database as a run that was never killed.

The job runs as `sparkstate run` in its own process group (driver, JVM, Python workers); see
``crash.CrashLoop`` for where the kills land. The reference is the same job on the same input,
run once without interruption on the test session's Spark.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from crash import CrashLoop
from spark_helpers import same_rows
from sparkstate import MemorySink
from sparkstate.jobs import JOBS

KILLS = 5
MAX_BATCH = 5_000
#: few key groups: a small batch's cost is mostly per key group, and these runs are small
#: the killed runs read at most RATE events/s, so that each is killed long before the input ends;
#: the final run (which may read faster: the rate only shapes batches) reads the rest at full speed
RATE = ["--rate", "5000"]
FLAGS = ["--max-batch", str(MAX_BATCH), "--key-groups", "8", "--trigger", "200 milliseconds", "--quiet"]


def uninterrupted(spark, tmp_path: Path, name: str, **settings) -> list[dict]:
    sink = MemorySink()
    job = JOBS[name].job(max_batch=MAX_BATCH, **settings).sink(sink).with_settings(trigger_interval="100 milliseconds")
    assert job.run(checkpoint_dir=tmp_path / "reference", spark=spark).completed
    return sink.rows()


def report(loop: CrashLoop, rows: int) -> None:
    between = sum(k.between_sink_and_spark for k in loop.history)
    print(
        f"\n{len(loop.history)} kills ({between} between the sink's commit and Spark's), "
        f"{len(loop.replayed)} batches replayed {loop.replayed}, {rows:,} rows compared"
    )


def check_loop(loop: CrashLoop, done) -> None:
    assert done.returncode == 0, done.stdout[-3000:]
    assert len(loop.history) >= KILLS
    assert loop.replayed, "a kill mid-batch leaves a planned batch for the restart to run again"
    assert any(k.between_sink_and_spark for k in loop.history), [vars(k) for k in loop.history]


def test_running_sum_into_postgresql_survives_sigkills(tmp_path, spark, postgres_db):
    import psycopg

    def sink_batches() -> int:
        try:
            with psycopg.connect(postgres_db, connect_timeout=2) as conn:
                found = conn.execute("SELECT max(batch_id) FROM sparkstate_batches WHERE job = 'running-sum'").fetchone()
        except psycopg.Error:  # the marker table does not exist yet
            return -1
        return -1 if found is None or found[0] is None else found[0]

    settings = {"events": 150_000, "merchants": 400}
    ckpt = tmp_path / "checkpoint"
    command = ["run", "running-sum", "--events", "150000", "--merchants", "400", *FLAGS, "--checkpoint", str(ckpt),
               "--sink", f"{postgres_db}?table=running_sum"]
    loop = CrashLoop([*command, *RATE], ckpt, tmp_path, sink_batches, kills=KILLS, final_args=command)
    done = loop.run()
    check_loop(loop, done)

    with psycopg.connect(postgres_db) as conn:
        cur = conn.execute("SELECT * FROM running_sum")
        names = [d.name for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
        markers = [b for (b,) in conn.execute("SELECT batch_id FROM sparkstate_batches WHERE job = 'running-sum' ORDER BY 1")]
    assert markers == sorted(set(markers)), "one marker per batch with rows, none twice"
    expected = uninterrupted(spark, tmp_path, "running-sum", **settings)
    same_rows(rows, [{k: r[k] for k in names} for r in expected])  # no duplicate, no gap, same values
    report(loop, len(rows))


def test_windowed_job_into_sqlite_survives_sigkills(tmp_path, spark):
    db = tmp_path / "out.db"

    last = [-1]

    def sink_batches() -> int:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.05) as conn:
                (found,) = conn.execute("SELECT max(batch_id) FROM sparkstate_batches WHERE job = 'upi-per-minute'").fetchone()
            last[0] = -1 if found is None else found
        except sqlite3.Error:  # not created yet, or locked by the writer this instant
            pass
        return last[0]

    settings = {"events": 150_000, "merchants": 300}
    ckpt = tmp_path / "checkpoint"
    command = ["run", "upi-per-minute", "--events", "150000", "--merchants", "300", *FLAGS, "--checkpoint", str(ckpt),
               "--window-path", "python", "--sink", f"sqlite:///{db}?table=upi_per_minute"]
    loop = CrashLoop([*command, *RATE], ckpt, tmp_path, sink_batches, kills=KILLS, seed=11, final_args=command)
    done = loop.run()
    check_loop(loop, done)

    with sqlite3.connect(db) as conn:
        # timestamps are ISO 8601 text in SQLite; strftime gives their epoch seconds back
        rows = conn.execute(
            "SELECT merchant_id, CAST(strftime('%s', window_start) AS INTEGER) * 1000, payments, total FROM upi_per_minute"
        ).fetchall()
        markers = [b for (b,) in conn.execute("SELECT batch_id FROM sparkstate_batches WHERE job = 'upi-per-minute' ORDER BY 1")]
    assert markers == sorted(set(markers)), "one marker per batch with rows, none twice"
    expected = uninterrupted(spark, tmp_path, "upi-per-minute", **settings)
    got = {(m, start): (n, total) for m, start, n, total in rows}
    assert rows and len(got) == len(rows) == len(expected), "every window once"
    for r in expected:
        n, total = got[(r["merchant_id"], r["window_start"])]
        assert n == r["payments"] and abs(total - r["total"]) <= 1e-9 * max(1.0, abs(total))
    report(loop, len(rows))

