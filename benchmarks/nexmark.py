"""Nexmark on sparkstate, Flink SQL 2.3 and Spark SQL: the same generated events, each query in turn.

    python benchmarks/nexmark.py                       # 10,000,000 events, every query, every system
    python benchmarks/nexmark.py --events 2000000 --queries 0,5,7 --systems sparkstate,flink

The events are written once by ``sparkstate nexmark generate`` (JSON lines in the reference's
nested shape, one file per 1,000,000 events, kept for the next run under ``--work``), and
each system reads those files:

* **sparkstate**: the seed job ``nexmark-qN`` reading its views of the files
  (:func:`sparkstate.jobs.nexmark.common.reading_files`: Spark's file source parses them, a
  file a micro-batch), RocksDB, 2 partitions, a checkpoint every micro-batch, a noop sink;
* **Flink SQL**: ``benchmarks/flink/nexmark.py`` in PyFlink's interpreter (JVM, parallelism 2,
  RocksDB, checkpoints every 10 s, mini-batch 2 s / 50,000 rows, split-distinct on; a
  blackhole sink); its row is skipped when ``bash benchmarks/flink/setup.sh`` has not run;
* **Spark SQL**: the query in Spark SQL over the same files (a file a micro-batch, RocksDB,
  2 shuffle partitions, checkpointed, ``availableNow``, the noop sink), where Spark can run it;
  otherwise the row gives Spark's reason (its error, or the feature it lacks).

The hot-key switch: where a query's window aggregate is combined before the shuffle
(``JobSettings.pre_aggregate``, on by default: q5 and q7, whose one group takes every bid), a
row ``sparkstate one phase`` runs it with the switch off, so the table shows what the two
phases buy.

A row that has not finished after ``--timeout`` seconds (default 1,800) is stopped, and gives
the bound it shows (fewer than events / timeout events/s).

Each row runs in a process of its own after a warm-up over a small folder of the same
stream; its time is the query's, start to end of the files (not the process's start), and
its peak memory is the resident memory of its whole process tree. Events/s counts every
event of the stream (people, auctions and bids), as Nexmark does. sparkstate's file source
has no end: its run ends when it has read the files, so windows still open then are not
fired, where Flink's bounded source fires them; that is the last 10 s of event time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_common import FLINK_PYTHON, mb

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
QUERIES = (0, 1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 15, 16, 17, 18, 19, 20)
SYSTEMS = ("sparkstate", "flink", "spark-sql")
#: sparkstate with ``pre_aggregate=False``: a row beside sparkstate's for the queries it changes
ONE_PHASE = "sparkstate one phase"
FILE_EVENTS = 1_000_000
WARMUP_EVENTS = 50_000
CORES = 2

_RANKS = ("count_if(price < 10000) AS rank1_bids, count_if(price >= 10000 AND price < 1000000) AS rank2_bids, "
          "count_if(price >= 1000000) AS rank3_bids")
_DISTINCT = ("count(DISTINCT bidder) AS total_bidders, count(DISTINCT auction) AS total_auctions, "
             "count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders")

#: each query in Spark SQL over the views person, auction and bid (their watermark 4 s), and
#: its output mode; a query Spark refuses is still tried, so that its row gives Spark's reason
SPARK_SQL: dict[int, tuple[str, str]] = {
    0: ("append", "SELECT auction, bidder, price, dateTime, extra FROM bid"),
    1: ("append", "SELECT auction, bidder, CAST(0.908 * price AS DECIMAL(23, 3)) AS price, dateTime, extra FROM bid"),
    2: ("append", "SELECT auction, price FROM bid WHERE auction % 123 = 0"),
    3: ("append", "SELECT P.name, P.city, P.state, A.id FROM auction A JOIN person P ON A.seller = P.id "
                  "WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA')"),
    4: ("update", "SELECT category AS id, CAST(avg(final) AS BIGINT) AS final FROM ("
                  "SELECT A.id, A.category, max(B.price) AS final FROM auction A JOIN bid B ON A.id = B.auction "
                  "AND B.dateTime BETWEEN A.dateTime AND A.expires GROUP BY A.id, A.category) GROUP BY category"),
    5: ("append", "WITH C AS (SELECT auction, count(*) AS num, window FROM bid "
                  "GROUP BY auction, window(dateTime, '10 seconds', '2 seconds')), "
                  "M AS (SELECT window, max(num) AS top FROM C GROUP BY window) "
                  "SELECT C.auction, C.num FROM C JOIN M ON C.window = M.window AND C.num >= M.top"),
    7: ("append", "WITH W AS (SELECT window.end AS wend, max(price) AS top FROM bid GROUP BY window(dateTime, '10 seconds')) "
                  "SELECT B.auction, B.price, B.bidder, B.dateTime, B.extra FROM bid B JOIN W ON B.price = W.top "
                  "AND B.dateTime BETWEEN W.wend - INTERVAL 10 SECONDS AND W.wend"),
    8: ("append", "WITH P AS (SELECT id, name, window FROM person GROUP BY id, name, window(dateTime, '10 seconds')), "
                  "A AS (SELECT seller, window FROM auction GROUP BY seller, window(dateTime, '10 seconds')) "
                  "SELECT P.id, P.name, P.window.start AS stime FROM P JOIN A ON P.id = A.seller AND P.window = A.window"),
    9: ("append", "SELECT * FROM (SELECT A.*, B.bidder, B.price, B.dateTime AS bid_dateTime, "
                  "row_number() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.dateTime) AS rownum "
                  "FROM auction A JOIN bid B ON A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires) "
                  "WHERE rownum <= 1"),
    11: ("append", "SELECT bidder, count(*) AS bid_count, session_window.start AS starttime, "
                   "session_window.end AS endtime FROM bid GROUP BY bidder, session_window(dateTime, '10 seconds')"),
    15: ("update", f"SELECT date_format(dateTime, 'yyyy-MM-dd') AS day, count(*) AS total_bids, {_RANKS}, {_DISTINCT} "
                   "FROM bid GROUP BY date_format(dateTime, 'yyyy-MM-dd')"),
    16: ("update", f"SELECT channel, date_format(dateTime, 'yyyy-MM-dd') AS day, max(date_format(dateTime, 'HH:mm')) "
                   f"AS minute, count(*) AS total_bids, {_RANKS}, {_DISTINCT} "
                   "FROM bid GROUP BY channel, date_format(dateTime, 'yyyy-MM-dd')"),
    17: ("update", f"SELECT auction, date_format(dateTime, 'yyyy-MM-dd') AS day, count(*) AS total_bids, {_RANKS}, "
                   "min(price) AS min_price, max(price) AS max_price, CAST(avg(price) AS BIGINT) AS avg_price, "
                   "sum(price) AS sum_price FROM bid GROUP BY auction, date_format(dateTime, 'yyyy-MM-dd')"),
    18: ("append", "SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY bidder, auction ORDER BY dateTime DESC) "
                   "AS rank_number FROM bid) WHERE rank_number <= 1"),
    19: ("append", "SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY auction ORDER BY price DESC) "
                   "AS rank_number FROM bid) WHERE rank_number <= 10"),
    20: ("append", "SELECT B.auction, B.bidder, B.price, B.channel, B.url, B.dateTime AS bid_dateTime, "
                   "B.extra AS bid_extra, A.itemName, A.description, A.initialBid, A.reserve, "
                   "A.dateTime AS auction_dateTime, A.expires, A.seller, A.category, A.extra AS auction_extra "
                   "FROM bid B JOIN auction A ON B.auction = A.id WHERE A.category = 10"),
}
#: queries Spark SQL has no way to write at all
SPARK_SQL_CANNOT = {12: "no processing-time windows (window() takes an event-time column)"}


def generated(work: Path, events: int) -> Path:
    """The folder of ``events`` Nexmark events as JSON lines, written unless already there."""
    folder = work / f"nexmark-{events}"
    meta = folder / "_nexmark.json"
    if not (meta.exists() and json.loads(meta.read_text()).get("events") == events):
        files = max(1, -(-events // FILE_EVENTS))
        subprocess.run([str(Path(sys.executable).parent / "sparkstate"), "nexmark", "generate", "--events", str(events),
                        "--out", str(folder), "--files", str(files), "--quiet"], check=True)
    return folder


def _session():
    from sparkstate.runtime.session.classic import get_spark

    return get_spark(parallelism=2, log_file=Path(tempfile.gettempdir()) / "sparkstate-bench-nexmark.log")


def combines(query: int) -> bool:
    """Whether nexmark-qN aggregates in two phases (so a one-phase row measures the switch)."""
    from sparkstate.engine.combine import combiner_for
    from sparkstate.jobs import JOBS

    return combiner_for(JOBS[f"nexmark-q{query}"].job(events=1)) is not None


def _sparkstate(query: int, folder: str, events: int, checkpoint: Path, spark, two_phase: bool = True) -> float:
    from sparkstate import NoopSink
    from sparkstate.jobs import JOBS
    from sparkstate.jobs.nexmark.common import reading_files

    job = JOBS[f"nexmark-q{query}"].job(events=events)
    first = job.source_spec.events_between(0, events)
    job = reading_files(job, folder).sink(NoopSink()).with_settings(
        parallelism=2, trigger_interval="0 seconds", pre_aggregate=two_phase)
    started = time.monotonic()
    result = job.run(checkpoint_dir=checkpoint, spark=spark, until=lambda r: r.events >= first, timeout=7200)
    assert result.events >= first, f"q{query} read {result.events} of {first} events"
    return time.monotonic() - started


def _spark_sql(query: int, folder: str, checkpoint: Path, spark) -> float:
    from sparkstate.connectors.nexmark import JSON_TIMESTAMP_FORMAT, NESTED_DDL, VIEWS

    spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                   "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    stream = (spark.readStream.schema(NESTED_DDL).option("timestampFormat", JSON_TIMESTAMP_FORMAT)
              .option("maxFilesPerTrigger", 1).option("pathGlobFilter", "part-*.json").json(folder))
    for kind, name in enumerate(VIEWS):
        view = stream.where(f"event_type = {kind}").selectExpr(f"{name}.*").withWatermark("dateTime", "4 seconds")
        view.createOrReplaceTempView(name)
    mode, sql = SPARK_SQL[query]
    started = time.monotonic()
    q = (spark.sql(sql).writeStream.format("noop").outputMode(mode).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    return time.monotonic() - started


def child(args: argparse.Namespace) -> dict:
    spark = _session()
    work = Path(tempfile.mkdtemp(prefix="sparkstate-bench-nexmark-"))
    try:
        if args.system in ("sparkstate", ONE_PHASE):
            two = args.system == "sparkstate"
            _sparkstate(args.query, args.warmup, WARMUP_EVENTS, work / "warmup", spark, two)
            seconds = _sparkstate(args.query, args.dir, args.events, work / "measured", spark, two)
        else:
            try:
                _spark_sql(args.query, args.warmup, work / "warmup", spark)
            except Exception as exc:  # Spark refuses the query: its reason is the row
                return {"refused": _reason(exc)}
            seconds = _spark_sql(args.query, args.dir, work / "measured", spark)
        return {"events": args.events, "seconds": seconds}
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def _reason(exc: Exception) -> str:
    """Spark's error, in one line: its error class and the first sentence of its message."""
    text = " ".join(str(exc).split())
    return text[:220] + ("..." if len(text) > 220 else "")


def _bounded(args: list[str], timeout: float) -> tuple[int | None, str, str]:
    """Run ``args`` in a session of its own: its return code (None when it ran past
    ``timeout`` seconds and its whole process group was stopped), stdout and stderr."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the JVMs it started go with it
        proc.communicate()
        return None, "", ""


def _row(system: str, query: int, folder: Path, warmup: Path, events: int, timeout: float) -> dict:
    from sparkstate.metrics.memory import PeakMemory

    if system == "spark-sql" and query in SPARK_SQL_CANNOT:
        return {"refused": SPARK_SQL_CANNOT[query]}
    if system == "flink":
        if not FLINK_PYTHON.exists():
            return {"refused": f"{FLINK_PYTHON} is missing: bash benchmarks/flink/setup.sh makes it"}
        args = [str(FLINK_PYTHON), str(HERE.parent / "flink" / "nexmark.py"), f"q{query}", "--dir", str(folder),
                "--events", str(events), "--warmup-dir", str(warmup)]
    else:
        args = [sys.executable, str(HERE), "--child", system, str(query), str(folder), str(warmup), str(events)]
    with PeakMemory() as mem:
        code, out, err = _bounded(args, timeout)
    if code is None:
        return {"refused": f"stopped after {timeout:,.0f} s: fewer than {events / timeout:,.0f} events/s",
                "peak_bytes": mem.peak_bytes}
    if code != 0:
        return {"refused": "failed: " + " ".join(err.split())[-300:]}
    return {**json.loads(out.strip().splitlines()[-1]), "peak_bytes": mem.peak_bytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=10_000_000, help="events of the stream (default 10,000,000)")
    parser.add_argument("--queries", default=",".join(map(str, QUERIES)), help="comma-separated query numbers")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sparkstate-nexmark",
                        help="where the generated files are kept between runs")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--timeout", type=float, default=1_800, help="seconds a row may run (default 1,800)")
    parser.add_argument("--child", nargs=5, metavar=("SYSTEM", "QUERY", "DIR", "WARMUP", "EVENTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        system, query, folder, warmup, events = args.child
        ns = argparse.Namespace(system=system, query=int(query), dir=folder, warmup=warmup, events=int(events))
        print(json.dumps(child(ns)))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    queries = [int(q.strip().removeprefix("q")) for q in args.queries.split(",") if q.strip()]
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    args.work.mkdir(parents=True, exist_ok=True)
    console.print(f"generating {args.events:,} events (kept in {args.work}) ...")
    folder, warmup = generated(args.work, args.events), generated(args.work, WARMUP_EVENTS)
    rows = []
    for query in queries:
        extra = [ONE_PHASE] if "sparkstate" in systems and combines(query) else []
        for system in systems + extra:
            console.print(f"q{query} on {system} ...")
            row = {"query": query, "system": system, **_row(system, query, folder, warmup, args.events, args.timeout)}
            rows.append(row)
            console.print(f"  {_describe(row)}")
    table = Table(title=f"Nexmark, {args.events:,} events, parallelism 2, checkpoints on", title_justify="left")
    for column in ("query", "system", "events/s", "events/s per core", "time", "peak memory", "note"):
        table.add_column(column, justify="right" if column in ("events/s", "events/s per core", "time") else "left")
    for row in rows:
        seconds = row.get("seconds")
        rate = row["events"] / seconds if seconds else None
        table.add_row(f"q{row['query']}", row["system"], f"{rate:,.0f}" if rate else "-",
                      f"{rate / CORES:,.0f}" if rate else "-", f"{seconds:,.1f} s" if seconds else "-",
                      mb(row.get("peak_bytes")), row.get("refused", ""))
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def _describe(row: dict) -> str:
    if "refused" in row:
        return f"not run: {row['refused']}"
    return f"{row['events'] / row['seconds']:,.0f} events/s in {row['seconds']:,.1f} s, peak {mb(row.get('peak_bytes'))}"


if __name__ == "__main__":
    main()
