"""The Nexmark queries on Flink SQL 2.3, over the JSON lines of ``sparkstate nexmark generate``.

Run by ``benchmarks/nexmark.py`` with the interpreter of ``benchmarks/flink/.venv``
(``setup.sh``), never imported by sparkstate:

    benchmarks/flink/.venv/bin/python benchmarks/flink/nexmark.py q5 --dir DIR --events N [--warmup-dir DIR]

The table is the reference's (``nexmark/nexmark``, ``ddl_gen.sql`` and ``ddl_views.sql``): the
nested ``person``, ``auction`` and ``bid`` rows, ``dateTime`` the event's, a 4-second
watermark, and the three views. It reads the files with Flink's filesystem connector instead
of the reference's generator connector (whose jar is in no registry this machine reaches).
The queries mean what the reference's ``queries/qN.sql`` mean, written here for this table.
Settings as the reference's ``config.yaml`` has them, at parallelism 2: RocksDB, checkpoints
(every 10 s, as the other benchmarks' Flink rows), mini-batch 2 s / 50,000 rows, split
distinct aggregation; a blackhole sink. The last stdout line is JSON: the events and the
job's wall seconds (submission to the end of the bounded input).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

TABLE = """
CREATE TEMPORARY TABLE nexmark (
    event_type INT,
    person ROW<id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING, state STRING,
               `dateTime` TIMESTAMP(3), extra STRING>,
    auction ROW<id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT,
                `dateTime` TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra STRING>,
    bid ROW<auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, `dateTime` TIMESTAMP(3),
            extra STRING>,
    `dateTime` AS CASE WHEN event_type = 0 THEN person.`dateTime`
                       WHEN event_type = 1 THEN auction.`dateTime` ELSE bid.`dateTime` END,
    WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND
) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'json',
        'json.timestamp-format.standard' = 'SQL')
"""

VIEWS = [
    "CREATE TEMPORARY VIEW person AS SELECT person.id, person.name, person.emailAddress, person.creditCard, "
    "person.city, person.state, `dateTime`, person.extra FROM nexmark WHERE event_type = 0",
    "CREATE TEMPORARY VIEW auction AS SELECT auction.id, auction.itemName, auction.description, auction.initialBid, "
    "auction.reserve, `dateTime`, auction.expires, auction.seller, auction.category, auction.extra "
    "FROM nexmark WHERE event_type = 1",
    "CREATE TEMPORARY VIEW bid AS SELECT bid.auction, bid.bidder, bid.price, bid.channel, bid.url, `dateTime`, "
    "bid.extra FROM nexmark WHERE event_type = 2",
    # q12's processing-time attribute (the reference declares it in q12.sql)
    "CREATE TEMPORARY VIEW bid_p AS SELECT *, PROCTIME() AS p_time FROM bid",
]

_RANKS = """
    count(*) FILTER (WHERE price < 10000) AS rank1_bids,
    count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
    count(*) FILTER (WHERE price >= 1000000) AS rank3_bids"""
_DISTINCT = """
    count(DISTINCT bidder) AS total_bidders,
    count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
    count(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders,
    count(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
    count(DISTINCT auction) AS total_auctions,
    count(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
    count(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions,
    count(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions"""

#: each query as a SELECT; its sink is a blackhole table of the SELECT's columns
QUERIES = {
    0: "SELECT auction, bidder, price, `dateTime`, extra FROM bid",
    1: "SELECT auction, bidder, 0.908 * price AS price, `dateTime`, extra FROM bid",
    2: "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
    3: """SELECT P.name, P.city, P.state, A.id
          FROM auction AS A JOIN person AS P ON A.seller = P.id
          WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA')""",
    4: """SELECT Q.category AS id, AVG(Q.final) AS final
          FROM (SELECT A.id, A.category, MAX(B.price) AS final
                FROM auction AS A, bid AS B
                WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires
                GROUP BY A.id, A.category) AS Q
          GROUP BY Q.category""",
    5: """SELECT C.auction, C.num
          FROM (SELECT auction, count(*) AS num, window_start, window_end
                FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
                GROUP BY auction, window_start, window_end) AS C
          JOIN (SELECT max(num) AS top, window_start, window_end
                FROM (SELECT count(*) AS num, window_start, window_end
                      FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
                      GROUP BY auction, window_start, window_end)
                GROUP BY window_start, window_end) AS M
          ON C.window_start = M.window_start AND C.window_end = M.window_end AND C.num >= M.top""",
    7: """SELECT B.auction, B.price, B.bidder, B.`dateTime`, B.extra
          FROM bid AS B
          JOIN (SELECT MAX(price) AS top, window_end
                FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
                GROUP BY window_start, window_end) AS W
          ON B.price = W.top
          WHERE B.`dateTime` BETWEEN W.window_end - INTERVAL '10' SECOND AND W.window_end""",
    8: """SELECT P.id, P.name, P.window_start AS stime
          FROM (SELECT id, name, window_start, window_end
                FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
                GROUP BY id, name, window_start, window_end) AS P
          JOIN (SELECT seller, window_start, window_end
                FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
                GROUP BY seller, window_start, window_end) AS A
          ON P.id = A.seller AND P.window_start = A.window_start AND P.window_end = A.window_end""",
    9: """SELECT id, itemName, description, initialBid, reserve, `dateTime`, expires, seller, category, extra,
                 auction, bidder, price, bid_dateTime, bid_extra
          FROM (SELECT A.*, B.auction, B.bidder, B.price, B.`dateTime` AS bid_dateTime, B.extra AS bid_extra,
                       ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.`dateTime` ASC) AS rownum
                FROM auction AS A, bid AS B
                WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires)
          WHERE rownum <= 1""",
    11: """SELECT bidder, count(*) AS bid_count,
                  SESSION_START(`dateTime`, INTERVAL '10' SECOND) AS starttime,
                  SESSION_END(`dateTime`, INTERVAL '10' SECOND) AS endtime
           FROM bid GROUP BY bidder, SESSION(`dateTime`, INTERVAL '10' SECOND)""",
    12: """SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime
           FROM TABLE(TUMBLE(TABLE bid_p, DESCRIPTOR(p_time), INTERVAL '10' SECOND))
           GROUP BY bidder, window_start, window_end""",
    15: f"""SELECT DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') AS `day`, count(*) AS total_bids, {_RANKS}, {_DISTINCT}
            FROM bid GROUP BY DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')""",
    16: f"""SELECT channel, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') AS `day`,
                   max(DATE_FORMAT(`dateTime`, 'HH:mm')) AS `minute`, count(*) AS total_bids, {_RANKS}, {_DISTINCT}
            FROM bid GROUP BY channel, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')""",
    17: f"""SELECT auction, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') AS `day`, count(*) AS total_bids, {_RANKS},
                   min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price
            FROM bid GROUP BY auction, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')""",
    18: """SELECT auction, bidder, price, channel, url, `dateTime`, extra
           FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY `dateTime` DESC) AS rank_number
                 FROM bid)
           WHERE rank_number <= 1""",
    19: """SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number
                        FROM bid)
           WHERE rank_number <= 10""",
    20: """SELECT auction, bidder, price, channel, url, B.`dateTime` AS bid_dateTime, B.extra AS bid_extra,
                  itemName, description, initialBid, reserve, A.`dateTime` AS auction_dateTime, expires, seller,
                  category, A.extra AS auction_extra
           FROM bid AS B JOIN auction AS A ON B.auction = A.id
           WHERE A.category = 10""",
}

#: q5 and q7 for ``--latency``: the same queries with each row's window end and the time the
#: row was made (``CURRENT_ROW_TIMESTAMP()``, evaluated per row in the last projection)
LATENCY_QUERIES = {
    5: QUERIES[5].replace("SELECT C.auction, C.num",
                          "SELECT CAST(C.window_end AS STRING) AS wend, CAST(CURRENT_ROW_TIMESTAMP() AS STRING) AS made"),
    7: QUERIES[7].replace("SELECT B.auction, B.price, B.bidder, B.`dateTime`, B.extra",
                          "SELECT CAST(W.window_end AS STRING) AS wend, CAST(CURRENT_ROW_TIMESTAMP() AS STRING) AS made"),
}

SETTINGS = {
    "parallelism.default": "2",
    "state.backend.type": "rocksdb",
    "execution.checkpointing.interval": "10 s",
    "table.local-time-zone": "UTC",
    "table.exec.mini-batch.enabled": "true",
    "table.exec.mini-batch.allow-latency": "2 s",
    "table.exec.mini-batch.size": "50000",
    "table.optimizer.distinct-agg.split.enabled": "true",
}


def run(query: int, path: str) -> float:
    """Query ``query`` over the JSON lines in ``path``, to the end of the files; its wall seconds."""
    with tempfile.TemporaryDirectory(prefix="sparkstate-bench-flink-") as checkpoints:
        t_env = _environment(checkpoints)
        t_env.execute_sql(TABLE.format(path=path))
        for view in VIEWS:
            t_env.execute_sql(view)
        select = t_env.sql_query(QUERIES[query])
        columns = ", ".join(f"`{name}` {kind}" for name, kind in zip(select.get_schema().get_field_names(),
                                                                   map(str, select.get_schema().get_field_data_types())))
        t_env.execute_sql(f"CREATE TEMPORARY TABLE sink ({columns}) WITH ('connector' = 'blackhole')")
        started = time.monotonic()
        select.execute_insert("sink").wait()
        return time.monotonic() - started


def _environment(checkpoints: str):
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    config = Configuration()
    for key, value in {**SETTINGS, "execution.checkpointing.dir": "file://" + checkpoints}.items():
        config.set_string(key, value)
    return TableEnvironment.create(EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(config).build())


def latency(query: int, path: str, out: str, seconds: float) -> None:
    """Query ``query`` (5 or 7) over the folder ``path`` as it grows, for ``seconds``; then
    ``out/results.json`` holds each committed row's window end and the time it was made (epoch
    ms). Rows reach the CSV files at checkpoints (every 10 s): those after the last one before
    the job is cancelled are not in them."""
    from datetime import UTC, datetime

    rows = os.path.join(out, "rows")
    with tempfile.TemporaryDirectory(prefix="sparkstate-bench-flink-") as checkpoints:
        t_env = _environment(checkpoints)
        table = TABLE.format(path=path).replace("'format' = 'json',", "'format' = 'json', 'source.monitor-interval' = '1 s',")
        t_env.execute_sql(table)
        for view in VIEWS:
            t_env.execute_sql(view)
        t_env.execute_sql(f"CREATE TEMPORARY TABLE sink (wend STRING, made STRING) WITH ('connector' = 'filesystem', "
                          f"'path' = 'file://{rows}', 'format' = 'csv')")
        result = t_env.sql_query(LATENCY_QUERIES[query]).execute_insert("sink")
        time.sleep(seconds)
        result.get_job_client().cancel().result()

    def ms(text: str) -> int:
        stamp = datetime.strptime(text.strip().strip('"'), "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC)
        return int(stamp.timestamp() * 1000)

    found = []
    for name in os.listdir(rows) if os.path.isdir(rows) else ():
        if name.startswith((".", "_")):
            continue  # an in-progress file, never committed
        with open(os.path.join(rows, name)) as f:
            for line in f:
                if line.strip():
                    wend, made = line.rsplit(",", 1)
                    found.append((ms(wend), ms(made)))
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(found, f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("query", type=lambda q: int(q.removeprefix("q")), help="q0 ... q20")
    parser.add_argument("--dir", required=True, help="the JSON lines of `sparkstate nexmark generate`")
    parser.add_argument("--events", type=int, required=True, help="the events the files hold")
    parser.add_argument("--warmup-dir", help="a small directory to run the query over first, unmeasured")
    parser.add_argument("--latency", metavar="OUT", help="q5 or q7 over --dir as it grows: results.json in OUT")
    parser.add_argument("--seconds", type=float, default=90, help="with --latency: how long to run")
    args = parser.parse_args()
    if args.query not in QUERIES:
        raise SystemExit(f"no query q{args.query}; these: {', '.join(f'q{q}' for q in QUERIES)}")
    site = [p for p in sys.path if p.endswith("site-packages")]
    os.environ["PYTHONPATH"] = os.pathsep.join([*site, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if args.latency:
        latency(args.query, os.path.abspath(args.dir), os.path.abspath(args.latency), args.seconds)
        return
    if args.warmup_dir:
        run(args.query, os.path.abspath(args.warmup_dir))
    seconds = run(args.query, os.path.abspath(args.dir))
    print(json.dumps({"events": args.events, "seconds": seconds}))


if __name__ == "__main__":
    main()
