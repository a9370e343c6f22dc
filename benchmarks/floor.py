"""Floor benchmark: what a micro-batch of 100 events costs, sparkstate against Spark's own
streaming aggregation on the same input, in one Spark session, with where the time goes.

    python benchmarks/floor.py                  # 40 batches of 100 events each (a minute or two)
    python benchmarks/floor.py --batches 100

The input is the UPI generator (sparkstate's Spark data source, read raw by Spark's rows), 100
events per micro-batch over 1,000 merchants, RocksDB state, 2 local cores, noop sinks:

* ``spark sql``: ``groupBy(merchant_id).agg(count, sum)`` in update mode (Spark's own stateful
  aggregation, no Python);
* ``spark transformWithState``: the row API with a ValueState per key (Python per key);
* ``sparkstate``: W1 (``sparkstate.jobs.running_sum``) as users run it.

Each runs its batches after a warm-up query of the same kind; the table shows per-batch medians
(after the first batch) of the whole trigger and of the phases Spark reports in
``durationMs``: ``latestOffset``, ``queryPlanning``, ``walCommit`` (the offsets written),
``addBatch`` (running the batch, sink included: where the state stores open and commit) and
``commitOffsets`` (the commit log), plus what is left of the trigger.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench_common import progress_until_read

KEYS = 1_000
PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


def _generator(events: int):
    from sparkstate import UpiPayments

    return UpiPayments(events=events, merchants=KEYS, max_batch=100, seed=11)


def _spark_query(spark, kind: str, events: int, ckpt: Path) -> list[dict]:
    from keyed_state import OUTPUT, _RowRunningSum  # benchmarks/ is the script's own folder
    from pyspark.sql import functions as F

    from sparkstate.runtime.spark_sources import spark_source

    df = spark_source(_generator(events)).raw(spark, None).select("merchant_id", "amount")
    if kind == "sql":
        out = df.groupBy("merchant_id").agg(F.count("*").alias("count"), F.sum("amount").alias("total"))
        mode = "update"
    else:
        out = df.groupBy("merchant_id").transformWithState(_RowRunningSum.make(), OUTPUT, "Append", "None")
        mode = "append"
    query = (out.writeStream.format("noop").outputMode(mode).option("checkpointLocation", str(ckpt))
             .trigger(processingTime="0 seconds").start())
    progress = progress_until_read(query, events)
    return [p for p in progress if p["numInputRows"]]


def _sparkstate(spark, events: int, ckpt: Path) -> list[dict]:
    from sparkstate import NoopSink
    from sparkstate.jobs.running_sum import build

    job = build(_generator(events)).sink(NoopSink()).with_settings(state_backend="rocksdb", trigger_interval="0 seconds")
    result = job.run(checkpoint_dir=ckpt, spark=spark)
    return [p for p in result.progress if p.get("events")]


def _figures(batches: list[dict]) -> dict:
    data = batches[1:]  # the first batch pays the query's start
    total = [p["durationMs"]["triggerExecution"] for p in data]
    out = {"batches": len(batches), "trigger": statistics.median(total)}
    for phase in PHASES:
        out[phase] = statistics.median([p["durationMs"].get(phase, 0) for p in data])
    out["other"] = statistics.median(
        [p["durationMs"]["triggerExecution"] - sum(p["durationMs"].get(ph, 0) for ph in PHASES) for p in data])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=40)
    args = parser.parse_args()

    from rich.console import Console
    from rich.table import Table

    from sparkstate.runtime.spark_session import get_spark

    console = Console(highlight=False, width=max(140, Console().width))
    spark = get_spark(parallelism=2, log_file=Path(tempfile.gettempdir()) / "sparkstate-bench-spark.log")
    # Spark's queries get the state store settings sparkstate's run sets for its own
    from sparkstate import JobSettings
    from sparkstate.runtime.spark_session import state_store_class

    spark.conf.set("spark.sql.streaming.stateStore.providerClass", state_store_class("rocksdb"))
    for key, value in JobSettings().checkpoint.spark_conf().items():
        spark.conf.set(key, value)
    events = 100 * args.batches
    rows = [
        ("spark sql (groupBy.agg, update)", lambda ck, n: _spark_query(spark, "sql", n, ck)),
        ("spark transformWithState (row)", lambda ck, n: _spark_query(spark, "row", n, ck)),
        ("sparkstate W1", lambda ck, n: _sparkstate(spark, n, ck)),
    ]
    table = Table(title=f"A micro-batch of 100 events: medians over {args.batches - 1} batches after the first (ms)",
                  title_justify="left")
    for col in ("engine", "trigger", *PHASES, "other", "vs spark sql"):
        table.add_column(col, justify="left" if col == "engine" else "right")
    base = None
    with tempfile.TemporaryDirectory(prefix="sparkstate-bench-floor-") as work:
        for i, (name, run) in enumerate(rows):
            console.print(f"  {name} ...")
            run(Path(work) / f"warmup-{i}", 500)
            f = _figures(run(Path(work) / f"measured-{i}", events))
            base = base or f["trigger"]
            table.add_row(name, f"{f['trigger']:,.0f}", *[f"{f[ph]:,.0f}" for ph in PHASES], f"{f['other']:,.0f}",
                          f"{f['trigger'] / base:.2f}x")
    console.print(table)


if __name__ == "__main__":
    main()
