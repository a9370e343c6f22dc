"""Window benchmark: ``upi-per-minute`` through the Python path, the native path and Spark SQL.

    python benchmarks/windows.py           # 2,000,000 events, 100,000 merchants
    python benchmarks/windows.py --quick   # 200,000 events

The job: UPI payments, per merchant, count and sum in 1-minute tumbling event-time windows
with 5 s out-of-orderness; RocksDB state store, a real checkpoint directory, noop sink.
Three engines read the same generated events (the same Python data source):

* ``sparkstate python path``: the window operator on sparkstate's keyed runtime;
* ``sparkstate native path``: the job with ``window_path="native"`` (Spark SQL);
* ``spark sql groupBy(window)``: the same aggregation written by hand on Spark's API.

Then the same events as CSV files (written by the benchmark, 100,000 lines each, 1,000,000
events per micro-batch), read by sparkstate's ``FileSource`` (the Python path: the native path
runs only on sources whose events cannot be late), by Spark SQL's own CSV source with the
hand-written aggregation, and, where ``benchmarks/flink/setup.sh`` has installed PyFlink, by
Flink SQL (``TUMBLE`` with a 5-second watermark, RocksDB, parallelism 2, checkpoints every 10 s,
blackhole sink; its time is the job's, from submission to the end of the input).

Each runs in its own process: an unmeasured warm-up run, then the measured run with its peak
resident memory (driver, JVM and Python workers).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from bench_common import CSV_SCHEMA, FLINK_PYTHON, csv_source, flink_row, measure, prepare_csv, run_child, run_until_read

HERE = Path(__file__).resolve()


def _session():
    from sparkstate.runtime.session.classic import get_spark

    return get_spark(parallelism=2, log_file=Path(tempfile.gettempdir()) / "sparkstate-bench-windows.log")


def _job(events: int, keys: int, max_batch: int, path: str, csv: str = ""):
    from sparkstate import NoopSink, UpiPayments
    from sparkstate.jobs.upi_per_minute import build

    source = csv_source(csv, events, max_batch) if csv else UpiPayments(
        events=events, merchants=keys, max_batch=max_batch, seed=11)
    return build(source).sink(NoopSink()).with_settings(window_path=path, trigger_interval="0 seconds")


def _run_sparkstate(spark, events: int, keys: int, max_batch: int, path: str, ckpt: Path, csv: str = "") -> dict:
    job = _job(events, keys, max_batch, path, csv)
    # files are an unbounded source: run until the events are read
    result = run_until_read(job, ckpt, spark, events) if csv else job.run(checkpoint_dir=ckpt, spark=spark)
    assert result.plan == path, result.plan
    return {"events": result.events, "seconds": result.seconds, "steady": result.steady_events_per_second,
            "state_rows": result.state_rows}


def _run_handwritten(spark, events: int, keys: int, max_batch: int, ckpt: Path, csv: str = "") -> dict:
    """Spark SQL as its guide writes it: withWatermark, groupBy(window(...), key).agg(...);
    over the generator's rows, or with ``csv`` Spark's own CSV source on the files."""
    from pyspark.sql import functions as F

    from sparkstate.runtime.io.sources import raw_marker_options, spark_source
    from sparkstate.runtime.session.classic import state_store_class

    spark.conf.set("spark.sql.shuffle.partitions", "2")
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", state_store_class("rocksdb"))
    if csv:
        files = csv_source(csv, events, max_batch)
        df = (spark.readStream.schema(CSV_SCHEMA).option("maxFilesPerTrigger", files.max_files_per_trigger)
              .option("timestampFormat", "yyyy-MM-dd HH:mm:ss.SSS").csv(csv))
        end = None
    else:
        job = _job(events, keys, max_batch, "native")
        df = spark_source(job.source_spec).raw(spark, None, raw_marker_options(job))
        end = job.source_spec.end_offset(True)
    out = (
        df.withWatermark("event_time", "5 seconds")
        .groupBy(F.window("event_time", "1 minute"), "merchant_id")
        .agg(F.count(F.lit(1)).alias("payments"), F.sum("amount").alias("total"))
    )
    query = (
        out.writeStream.format("noop").outputMode("append").option("checkpointLocation", str(ckpt))
        .trigger(processingTime="0 seconds").start()
    )
    started = time.monotonic()
    from sparkstate.runtime.io.sources import source_offset

    while True:
        progress = query.recentProgress
        last = json.loads(progress[-1].json) if progress else None
        if last and end is not None and (source_offset(last["sources"][0]) or 0) >= end:
            break
        if last and end is None and sum(json.loads(p.json)["numInputRows"] for p in progress) >= events:
            break
        if not query.isActive:
            raise SystemExit(f"baseline failed: {query.exception()}")
        time.sleep(0.05)
    seconds = time.monotonic() - started
    query.stop()
    data = [json.loads(p.json) for p in progress if p.numInputRows]
    steady = None
    if len(data) > 1:
        ms = sum(p["durationMs"]["triggerExecution"] for p in data[1:])
        steady = sum(p["numInputRows"] for p in data[1:]) * 1000 / ms if ms else None
    return {"events": events, "seconds": seconds, "steady": steady,
            "state_rows": (json.loads(progress[-1].json).get("stateOperators") or [{}])[0].get("numRowsTotal")}


def child(args: argparse.Namespace) -> dict:
    if args.engine == "flink-w2-sql":  # PyFlink's own interpreter warms up its JVM itself
        return flink_row("w2-sql", args.csv, args.events, args.csv_warmup)
    spark = _session()

    def once(events: int, ckpt: Path) -> dict:
        if args.engine == "handwritten":
            return _run_handwritten(spark, events, args.keys, args.max_batch, ckpt, args.csv)
        return _run_sparkstate(spark, events, args.keys, args.max_batch, args.engine, ckpt, args.csv)

    return measure(once, args.events, args.warmup)


def _child(args: list[str]) -> dict:
    return run_child(HERE, args)  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--max-batch", type=int, default=1_000_000)
    parser.add_argument("--warmup", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="200,000 events, 20,000 warm-up")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine", default="python", help=argparse.SUPPRESS)
    parser.add_argument("--csv", default="", help=argparse.SUPPRESS)
    parser.add_argument("--csv-warmup", default="", help=argparse.SUPPRESS)
    parser.add_argument("--skip-files", action="store_true", help="no CSV file rows (and no Flink row)")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    if args.quick:
        args.events, args.warmup = 200_000, 20_000

    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, width=max(130, Console().width))
    console.print(
        f"upi-per-minute: count and sum per merchant per 1-minute window, {args.events:,} events, "
        f"{args.keys:,} merchants; 2 local cores; RocksDB; noop sink"
    )
    common = ["--events", str(args.events), "--keys", str(args.keys), "--max-batch", str(args.max_batch),
              "--warmup", str(args.warmup)]
    table = Table(title="Windows (each row: own process, after an unmeasured warm-up run)", title_justify="left")
    for col in ("engine", "events", "wall s", "events/s", "events/s after 1st batch", "peak memory"):
        table.add_column(col, justify="left" if col == "engine" else "right")
    results = {}
    runs = [("sparkstate python path", "python", []), ("sparkstate native path", "native", []),
            ("spark sql groupBy(window) by hand", "handwritten", [])]
    work = Path(tempfile.mkdtemp(prefix="sparkstate-bench-csv-"))
    if not args.skip_files:
        console.print(f"  writing the {args.events:,} events as CSV files ...")
        dirs = prepare_csv(work, args.events, args.keys, args.max_batch)
        files = ["--csv", dirs["csv"], "--csv-warmup", dirs["warmup"]]
        runs += [("sparkstate python path, CSV files", "python", files),
                 ("spark sql groupBy(window) by hand, CSV files (Spark's CSV source)", "handwritten", files)]
        if FLINK_PYTHON.exists():
            runs.append(("Flink SQL TUMBLE (JVM, RocksDB, parallelism 2), CSV files", "flink-w2-sql", files))
        else:
            console.print(f"  (no Flink row: {FLINK_PYTHON} is missing; bash benchmarks/flink/setup.sh makes it)")
    for name, engine, extra in runs:
        console.print(f"  running {name} ...")
        r = results[name] = _child([*common, "--engine", engine, *extra])
        table.add_row(name, f"{r['events']:,}", f"{r['seconds']:.1f}", f"{r['events'] / r['seconds']:,.0f}",
                      f"{r['steady']:,.0f}" if r.get("steady") else "-", f"{r['peak_bytes'] / 2**20:,.1f} MB")
    console.print(table)
    shutil.rmtree(work, ignore_errors=True)
    native, hand = results["sparkstate native path"], results["spark sql groupBy(window) by hand"]
    console.print(f"native path vs hand-written Spark SQL: {hand['seconds'] / native['seconds']:.2f}x the speed "
                  f"({(native['seconds'] / hand['seconds'] - 1) * 100:+.1f}% time)")
    ours = results.get("sparkstate python path, CSV files")
    for name, r in results.items():
        if ours is not None and name.endswith(("(Spark's CSV source)", "CSV files")) and r is not ours:
            console.print(f"sparkstate on the CSV files vs {name.split(',')[0].split(' (')[0]}: "
                          f"{r['seconds'] / ours['seconds']:.2f}x the speed (wall time for the same events)")


if __name__ == "__main__":
    main()
