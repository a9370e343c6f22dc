"""The benchmarks' Flink rows: W1 and W2 on PyFlink 2.3 over the benchmarks' CSV files.

Run by the benchmarks with the interpreter of ``benchmarks/flink/.venv`` (``setup.sh``), never
imported by sparkstate (PyFlink pins other pandas and pyarrow versions):

    benchmarks/flink/.venv/bin/python benchmarks/flink/jobs.py w1-sql --csv DIR [--warmup-csv DIR]

Jobs, all at parallelism 2, RocksDB, checkpoints every 10 s, a blackhole sink, reading the
header-less CSV ``event_time, merchant_id, payer_id, amount, device`` (times as
``YYYY-MM-DD HH:MM:SS.fff``, UTC):

* ``w1-datastream``: W1 as a PyFlink ``KeyedProcessFunction`` with two ``ValueState``s, in
  thread mode (the Python function runs in the TaskManager's JVM process through pemja);
* ``w1-sql``: W1 as Flink SQL, ``COUNT(*)``/``SUM(amount)`` over an unbounded ROWS window per
  merchant ordered by processing time;
* ``w2-sql``: W2 as Flink SQL, count and sum per merchant per 1-minute tumbling window with a
  5-second watermark.

With ``--warmup-csv`` the same job first runs over that (small) directory in the same JVM,
unmeasured, as the sparkstate rows warm up. The last stdout line is JSON: events, the measured
job's wall seconds (submission to the end of the bounded input), and the result rows where the
sink can count them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

SOURCE_DDL = """
CREATE TEMPORARY TABLE payments (
    event_time TIMESTAMP(3),
    merchant_id STRING,
    payer_id STRING,
    amount DOUBLE,
    device STRING,
    proctime AS PROCTIME(),
    WATERMARK FOR event_time AS event_time - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv')
"""

W1_SQL = """
INSERT INTO w1_out
SELECT merchant_id, COUNT(*) OVER w, SUM(amount) OVER w
FROM payments
WINDOW w AS (PARTITION BY merchant_id ORDER BY proctime ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
"""

W2_SQL = """
INSERT INTO w2_out
SELECT merchant_id, window_start, window_end, COUNT(*), SUM(amount)
FROM TABLE(TUMBLE(TABLE payments, DESCRIPTOR(event_time), INTERVAL '1' MINUTE))
GROUP BY merchant_id, window_start, window_end
"""

SINKS = [
    "CREATE TEMPORARY TABLE w1_out (merchant_id STRING, cnt BIGINT, total DOUBLE) WITH ('connector' = 'blackhole')",
    "CREATE TEMPORARY TABLE w2_out (merchant_id STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), "
    "cnt BIGINT, total DOUBLE) WITH ('connector' = 'blackhole')",
]


def _config(checkpoints: str):
    from pyflink.common import Configuration

    config = Configuration()
    for key, value in {
        "parallelism.default": "2",
        "state.backend.type": "rocksdb",
        "execution.checkpointing.interval": "10 s",
        "execution.checkpointing.dir": "file://" + checkpoints,
        "python.execution-mode": "thread",
        "table.local-time-zone": "UTC",
        # the Python functions' interpreter finds this virtualenv's packages
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
    }.items():
        config.set_string(key, value)
    return config


def _tables(path: str, checkpoints: str):
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    env = StreamExecutionEnvironment.get_execution_environment(_config(checkpoints))
    t_env = StreamTableEnvironment.create(env)
    t_env.get_config().set("table.local-time-zone", "UTC")
    t_env.execute_sql(SOURCE_DDL.format(path=path))
    for ddl in SINKS:
        t_env.execute_sql(ddl)
    return env, t_env


def _run_sql(path: str, checkpoints: str, statement: str) -> None:
    _, t_env = _tables(path, checkpoints)
    t_env.execute_sql(statement).wait()


def _run_datastream(path: str, checkpoints: str) -> None:
    from pyflink.common import Row, Types
    from pyflink.datastream import KeyedProcessFunction, RuntimeContext
    from pyflink.datastream.state import ValueStateDescriptor

    class RunningSum(KeyedProcessFunction):
        """W1: a running count and sum per merchant, every event emitted."""

        def open(self, runtime_context: RuntimeContext) -> None:
            self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
            self.total = runtime_context.get_state(ValueStateDescriptor("total", Types.DOUBLE()))

        def process_element(self, value, ctx):
            count = (self.count.value() or 0) + 1
            total = (self.total.value() or 0.0) + value.amount
            self.count.update(count)
            self.total.update(total)
            yield Row(value.merchant_id, count, total)

    _, t_env = _tables(path, checkpoints)
    events = t_env.to_data_stream(t_env.sql_query("SELECT merchant_id, amount FROM payments"))
    out_type = Types.ROW_NAMED(["merchant_id", "cnt", "total"], [Types.STRING(), Types.LONG(), Types.DOUBLE()])
    result = events.key_by(lambda e: e.merchant_id, key_type=Types.STRING()).process(RunningSum(), output_type=out_type)
    t_env.from_data_stream(result).execute_insert("w1_out").wait()


def run(job: str, path: str) -> float:
    """Run ``job`` over the CSV directory ``path``; its wall seconds."""
    with tempfile.TemporaryDirectory(prefix="sparkstate-bench-flink-") as checkpoints:
        started = time.monotonic()
        if job == "w1-datastream":
            _run_datastream(path, checkpoints)
        else:
            _run_sql(path, checkpoints, W1_SQL if job == "w1-sql" else W2_SQL)
        return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("job", choices=["w1-datastream", "w1-sql", "w2-sql"])
    parser.add_argument("--csv", required=True, help="the directory of CSV files")
    parser.add_argument("--events", type=int, required=True, help="the events the files hold")
    parser.add_argument("--warmup-csv", help="a small directory to run the job over first, unmeasured")
    args = parser.parse_args()
    # thread mode's Python runs inside the JVM: it needs this virtualenv's packages on its path
    site = [p for p in sys.path if p.endswith("site-packages")]
    os.environ["PYTHONPATH"] = os.pathsep.join([*site, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if args.warmup_csv:
        run(args.job, os.path.abspath(args.warmup_csv))
    seconds = run(args.job, os.path.abspath(args.csv))
    print(json.dumps({"events": args.events, "seconds": seconds}))


if __name__ == "__main__":
    main()
