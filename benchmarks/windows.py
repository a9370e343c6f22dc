"""Window benchmark: ``upi-per-minute`` through the Python path, the native path and Spark SQL.

    python benchmarks/windows.py           # 2,000,000 events, 100,000 merchants
    python benchmarks/windows.py --quick   # 200,000 events

The job: UPI payments, per merchant, count and sum in 1-minute tumbling event-time windows
with 5 s out-of-orderness; RocksDB state store, a real checkpoint directory, noop sink.
Three engines read the same generated events (the same Python data source):

* ``sparkstate python path``: the window operator on sparkstate's keyed runtime;
* ``sparkstate native path``: the job with ``window_path="native"`` (Spark SQL);
* ``spark sql groupBy(window)``: the same aggregation written by hand on Spark's API.

Each runs in its own process: an unmeasured warm-up run, then the measured run with its peak
resident memory (driver, JVM and Python workers).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench_common import measure, run_child

HERE = Path(__file__).resolve()


def _session():
    from sparkstate.runtime.spark_session import get_spark

    return get_spark(parallelism=2, log_file=Path(tempfile.gettempdir()) / "sparkstate-bench-windows.log")


def _job(events: int, keys: int, max_batch: int, path: str):
    from sparkstate import NoopSink, UpiPayments
    from sparkstate.jobs.upi_per_minute import build

    gen = UpiPayments(events=events, merchants=keys, max_batch=max_batch, seed=11)
    return build(gen).sink(NoopSink()).with_settings(window_path=path, trigger_interval="0 seconds")


def _run_sparkstate(spark, events: int, keys: int, max_batch: int, path: str, ckpt: Path) -> dict:
    result = _job(events, keys, max_batch, path).run(checkpoint_dir=ckpt, spark=spark)
    assert result.plan == path, result.plan
    return {"events": result.events, "seconds": result.seconds, "steady": result.steady_events_per_second,
            "state_rows": result.state_rows}


def _run_handwritten(spark, events: int, keys: int, max_batch: int, ckpt: Path) -> dict:
    """Spark SQL as its guide writes it: withWatermark, groupBy(window(...), key).agg(...)."""
    from pyspark.sql import functions as F

    from sparkstate.runtime.spark_session import state_store_class
    from sparkstate.runtime.spark_sources import raw_marker_options, spark_source

    job = _job(events, keys, max_batch, "native")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", state_store_class("rocksdb"))
    df = spark_source(job.source_spec).raw(spark, None, raw_marker_options(job))
    out = (
        df.withWatermark("event_time", "5 seconds")
        .groupBy(F.window("event_time", "1 minute"), "merchant_id")
        .agg(F.count(F.lit(1)).alias("payments"), F.sum("amount").alias("total"))
    )
    query = (
        out.writeStream.format("noop").outputMode("append").option("checkpointLocation", str(ckpt))
        .trigger(processingTime="0 seconds").start()
    )
    end = job.source_spec.end_offset(True)
    started = time.monotonic()
    from sparkstate.runtime.spark_sources import source_offset

    while True:
        progress = query.recentProgress
        last = json.loads(progress[-1].json) if progress else None
        if last and (source_offset(last["sources"][0]) or 0) >= end:
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
    spark = _session()

    def once(events: int, ckpt: Path) -> dict:
        if args.engine == "handwritten":
            return _run_handwritten(spark, events, args.keys, args.max_batch, ckpt)
        return _run_sparkstate(spark, events, args.keys, args.max_batch, args.engine, ckpt)

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
    for name, engine in (("sparkstate python path", "python"), ("sparkstate native path", "native"),
                         ("spark sql groupBy(window) by hand", "handwritten")):
        console.print(f"  running {name} ...")
        r = results[engine] = _child([*common, "--engine", engine])
        table.add_row(name, f"{r['events']:,}", f"{r['seconds']:.1f}", f"{r['events'] / r['seconds']:,.0f}",
                      f"{r['steady']:,.0f}" if r.get("steady") else "-", f"{r['peak_bytes'] / 2**20:,.1f} MB")
    console.print(table)
    native, hand = results["native"], results["handwritten"]
    console.print(f"native path vs hand-written Spark SQL: {hand['seconds'] / native['seconds']:.2f}x the speed "
                  f"({(native['seconds'] / hand['seconds'] - 1) * 100:+.1f}% time)")


if __name__ == "__main__":
    main()
