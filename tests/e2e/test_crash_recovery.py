"""Exactly-once under real crashes: a job killed with SIGKILL again and again, restarted from
its checkpoint each time, leaves the same rows in its database as a run that was never killed.

The job runs as `sparkstate run` in its own process group (driver, JVM, Python workers); see
``crash.CrashLoop`` for where the kills land: at random times, and held at the risky moments
(the sink's transaction open, the sink committed before Spark's commit log, Spark's offsets
written, the state store half written). The reference is the same job on the same input, run
once without interruption on the test session's Spark. The two loops run side by side.

A third loop runs Kafka to Kafka (``test_kafka_to_kafka_survives_sigkill_at_every_moment``):
its output topic, read with ``read_committed``, must hold each row once.

Each job is killed 5 times (each moment once). The long mode kills more and feeds more input:

    SPARKSTATE_CRASH_KILLS=20 .venv/bin/python -m pytest tests/e2e/test_crash_recovery.py -s

``-s`` shows each loop's summary: kills per moment, replays, rows compared, duplicates, gaps.
"""

from __future__ import annotations

import math
import os
import sqlite3
import sys
from collections import Counter
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from crash import RANDOM, SINK_DONE, SINK_TX, CrashLoop
from kafka_crash_job import KAFKA_EVENTS, kafka_expected, kafka_last_batch, kafka_payments, sink
from spark_helpers import same_rows

from sparkstate import MemorySink
from sparkstate.jobs import JOBS

#: kills per job: 5 in the suite, more in the long mode (SPARKSTATE_CRASH_KILLS=20)
KILLS = int(os.environ.get("SPARKSTATE_CRASH_KILLS") or 5)
#: each killed run reads some 5,000 to 20,000 events: the input grows with the kills, so that
#: the last kill comes before its end
EVENTS = max(150_000, 30_000 * KILLS)
#: the loop's time limit, for all its runs
TIMEOUT = max(900.0, 300.0 + 150.0 * KILLS)
MAX_BATCH = 5_000
#: few key groups: a small batch's cost is mostly per key group, and these runs are small
#: the killed runs read at most RATE events/s, so that each is killed long before the input ends;
#: the final run (which may read faster: the rate only shapes batches) reads the rest at full speed
RATE = ["--rate", "5000"]
#: the final run reads the rest (100,000 events and more) in larger batches: fewer of Spark's
#: fixed costs per batch. Batch sizes change no result here: the generator's disorder is within
#: the watermark's bound, so no event is late however the input is cut.
FINAL = ["--max-batch", str(10 * MAX_BATCH)]
FLAGS = ["--max-batch", str(MAX_BATCH), "--key-groups", "8", "--trigger", "200 milliseconds", "--quiet"]


def uninterrupted(spark, tmp_path: Path, name: str, **settings) -> list[dict]:
    sink = MemorySink()
    job = JOBS[name].job(max_batch=MAX_BATCH, **settings).sink(sink).with_settings(trigger_interval="100 milliseconds")
    assert job.run(checkpoint_dir=tmp_path / "reference", spark=spark).completed
    return sink.rows()


def compare(got: list[tuple[Hashable, tuple]], expected: list[tuple[Hashable, tuple]]) -> dict[str, int]:
    """Rows as ``(identity, values)``, against the uninterrupted run's: rows compared, identities
    written more than once (duplicates), missing (gaps) or not in the reference (extra), and
    rows whose values differ (sums of doubles may differ in the last bits)."""
    seen = Counter(key for key, _ in got)
    want = dict(expected)
    assert len(want) == len(expected), "the reference names each row once"
    values = dict(got)

    def same(a: tuple, b: tuple) -> bool:
        return len(a) == len(b) and all(
            x == y or (isinstance(x, float) and math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)) for x, y in zip(a, b)
        )

    return {
        "rows": len(got),
        "duplicates": sum(n - 1 for n in seen.values()),
        "gaps": sum(1 for key in want if key not in seen),
        "extra": sum(1 for key in seen if key not in want),
        "differing": sum(1 for key, v in want.items() if key in values and not same(values[key], v)),
    }


def report(loop: CrashLoop, title: str, figures: dict[str, int]) -> None:
    print("\n" + loop.summary(title, figures))
    wrong = {name: figures[name] for name in ("duplicates", "gaps", "extra", "differing") if figures[name]}
    assert not wrong, f"{wrong} of {figures['rows']:,} rows"


def check_loop(loop: CrashLoop, done) -> None:
    assert done.returncode == 0, done.stdout[-3000:]
    assert len(loop.history) >= KILLS
    assert loop.replayed, "a kill mid-batch leaves a planned batch for the restart to run again"
    assert any(k.between_sink_and_spark for k in loop.history), [vars(k) for k in loop.history]
    aimed = {k.aim for k in loop.history}
    reached = {k.aim for k in loop.history if k.on_target}
    assert aimed == reached, f"no kill landed at {sorted(aimed - reached)}: {[vars(k) for k in loop.history]}"


def postgres_batches(url: str, job: str) -> Callable[[], int]:
    """The last batch id the PostgreSQL sink has committed as writer ``job`` (``<job>@<table>``; -1: none yet)."""
    import psycopg

    def last() -> int:
        try:
            with psycopg.connect(url, connect_timeout=2) as conn:
                found = conn.execute("SELECT max(batch_id) FROM sparkstate_batches WHERE job = %s", (job,)).fetchone()
        except psycopg.Error:  # the marker table does not exist yet
            return -1
        return -1 if found is None or found[0] is None else found[0]

    return last


def sqlite_batches(db: Path, job: str) -> Callable[[], int]:
    """The last batch id the SQLite sink has committed for ``job`` (-1: none yet)."""
    last = [-1]

    def read() -> int:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.05) as conn:
                (found,) = conn.execute("SELECT max(batch_id) FROM sparkstate_batches WHERE job = ?", (job,)).fetchone()
            last[0] = -1 if found is None else found
        except sqlite3.Error:  # not created yet, or locked by the writer this instant
            pass
        return last[0]

    return read


@pytest.fixture(scope="module")
def crash_loops(tmp_path_factory, postgres_server, kafka_broker):
    """The crash loops, started at once: each spends most of its time starting processes
    (Spark's JVM, Python workers) and waiting at its kill points, so side by side they take
    little longer than one."""
    pg_dir, lite_dir = tmp_path_factory.mktemp("crash-running-sum"), tmp_path_factory.mktemp("crash-windows")
    pg_url = postgres_server.database_url("t_crash_running_sum")
    pg_command = ["run", "running-sum", "--events", str(EVENTS), "--merchants", "400", *FLAGS,
                  "--checkpoint", str(pg_dir / "checkpoint"), "--sink", f"{pg_url}?table=running_sum"]
    db = lite_dir / "out.db"
    lite_command = ["run", "upi-per-minute", "--events", str(EVENTS), "--merchants", "300", *FLAGS,
                    "--checkpoint", str(lite_dir / "checkpoint"), "--window-path", "python",
                    "--sink", f"sqlite:///{db}?table=upi_per_minute"]
    loops = {
        "running-sum": CrashLoop([*pg_command, *RATE], pg_dir / "checkpoint", pg_dir,
                                 postgres_batches(pg_url, "running-sum@running_sum"), kills=KILLS,
                                 final_args=[*pg_command, *FINAL], timeout=TIMEOUT),
        "upi-per-minute": CrashLoop([*lite_command, *RATE], lite_dir / "checkpoint", lite_dir,
                                    sqlite_batches(db, "upi-per-minute@upi_per_minute"), kills=KILLS, seed=11,
                                    final_args=[*lite_command, *FINAL], timeout=TIMEOUT),
    }
    kafka_dir = tmp_path_factory.mktemp("crash-kafka")
    source, output = kafka_broker.new_topic("payments", 2), kafka_broker.new_topic("running-sum", 2)
    payments = kafka_payments()
    kafka_broker.produce(source, payments, key=lambda e: e["merchant_id"])
    kafka_args = [kafka_broker.servers, source, output, str(kafka_dir / "checkpoint"), str(KAFKA_EVENTS)]
    loops["kafka"] = CrashLoop(
        # the killed runs read small batches (each is killed long before the input ends); the final run the rest
        [*kafka_args, "300"], kafka_dir / "checkpoint", kafka_dir, kafka_last_batch(sink(kafka_broker.servers, output)),
        # the moments Kafka's transactions make risky (a kill with Spark's offsets written: the database loops)
        kills=3, final_args=[*kafka_args, str(KAFKA_EVENTS)], moments=(RANDOM, SINK_DONE, SINK_TX),
        timeout=TIMEOUT, command=[sys.executable, str(Path(__file__).with_name("kafka_crash_job.py"))], seed=5,
    )
    with ThreadPoolExecutor(max_workers=len(loops)) as pool:
        runs = {name: pool.submit(loop.run) for name, loop in loops.items()}
        yield {"pg_url": pg_url, "db": db, "kafka": (loops["kafka"], runs["kafka"]), "kafka_topics": (output, payments),
               **{name: (loops[name], runs[name]) for name in loops}}
        for loop in loops.values():
            loop.stop()


def test_running_sum_into_postgresql_survives_sigkills(tmp_path, spark, crash_loops):
    import psycopg

    loop, run = crash_loops["running-sum"]
    done = run.result()
    check_loop(loop, done)

    with psycopg.connect(crash_loops["pg_url"]) as conn:
        cur = conn.execute("SELECT * FROM running_sum")
        names = [d.name for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
        markers = [b for (b,) in conn.execute(
            "SELECT batch_id FROM sparkstate_batches WHERE job = 'running-sum@running_sum' ORDER BY 1"
        )]
    assert markers == sorted(set(markers)), "one marker per batch with rows, none twice"
    expected = uninterrupted(spark, tmp_path, "running-sum", events=EVENTS, merchants=400)
    # a merchant's n-th event gives its row with count n: (merchant, count) names a row
    figures = compare(
        [((r["merchant_id"], r["count"]), (r["total"],)) for r in rows],
        [((r["merchant_id"], r["count"]), (r["total"],)) for r in expected],
    )
    report(loop, f"running-sum into PostgreSQL, {EVENTS:,} events", figures)
    same_rows(rows, [{k: r[k] for k in names} for r in expected])


def test_windowed_job_into_sqlite_survives_sigkills(tmp_path, spark, crash_loops):
    loop, run = crash_loops["upi-per-minute"]
    done = run.result()
    check_loop(loop, done)

    with sqlite3.connect(crash_loops["db"]) as conn:
        # timestamps are ISO 8601 text in SQLite; strftime gives their epoch seconds back
        rows = conn.execute(
            "SELECT merchant_id, CAST(strftime('%s', window_start) AS INTEGER) * 1000, payments, total FROM upi_per_minute"
        ).fetchall()
        markers = [b for (b,) in conn.execute(
            "SELECT batch_id FROM sparkstate_batches WHERE job = 'upi-per-minute@upi_per_minute' ORDER BY 1"
        )]
    assert markers == sorted(set(markers)), "one marker per batch with rows, none twice"
    expected = uninterrupted(spark, tmp_path, "upi-per-minute", events=EVENTS, merchants=300)
    figures = compare(
        [((m, start), (n, total)) for m, start, n, total in rows],
        [((r["merchant_id"], r["window_start"]), (r["payments"], r["total"])) for r in expected],
    )
    assert rows, "windows were written"
    report(loop, f"upi-per-minute (Python window path) into SQLite, {EVENTS:,} events", figures)


def test_kafka_to_kafka_survives_sigkill_at_every_moment(kafka_broker, crash_loops):
    """UPI payments in a topic of 2 partitions, through running-sum (``kafka_crash_job.py``),
    into ``KafkaSink`` exactly-once: killed at random, with the Kafka transaction open, and between
    the Kafka commit and Spark's. The uninterrupted run's
    output is known without running it: each merchant's payments are in one partition, in
    the order produced, so its k-th payment gives ``(merchant, k, the sum of its first k amounts)``
    however the input is cut into micro-batches."""
    loop, run = crash_loops["kafka"]
    output, payments = crash_loops["kafka_topics"]
    done = run.result()
    assert done.returncode == 0, done.stdout[-3000:]
    records = kafka_broker.read(output, committed=True)
    assert all(r["key"] == r["value"]["merchant_id"] for r in records)
    figures = compare([((r["value"]["merchant_id"], r["value"]["count"]), (r["value"]["total"],)) for r in records],
                      kafka_expected(payments))
    print(f"\n  records in the output topic for read_uncommitted readers: "
          f"{len(kafka_broker.read(output, committed=False)):,}")
    report(loop, "Kafka to Kafka (running-sum, KafkaSink exactly-once)", figures)
    assert figures["rows"] == KAFKA_EVENTS
    assert len(loop.history) == 3
    assert loop.replayed, "a kill mid-batch leaves a planned batch for the restart to run again"
    assert any(k.between_sink_and_spark for k in loop.history), [vars(k) for k in loop.history]
    missed = {k.aim for k in loop.history} - {k.aim for k in loop.history if k.on_target}
    assert not missed, f"no kill landed at {sorted(missed)}: {[vars(k) for k in loop.history]}"
