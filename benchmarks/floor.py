"""Floor benchmark: what a micro-batch of 100 events costs, sparkstate against Spark's own
streaming aggregation on the same input, in one Spark session, with where the time goes.

    python benchmarks/floor.py                  # 3 rounds of 40 batches of 100 events each (4-8 minutes)
    python benchmarks/floor.py --batches 100 --rounds 2

The input is the UPI generator (sparkstate's Spark data source, read raw by Spark's rows), 100
events per micro-batch over 1,000 merchants, RocksDB state, 2 local cores, noop sinks:

* ``spark sql``: ``groupBy(merchant_id).agg(count, sum)`` in update mode (Spark's own stateful
  aggregation, no Python);
* ``spark transformWithState``: the row API with a ValueState per key (Python per key);
* ``sparkstate``: W1 (``sparkstate.jobs.running_sum``) as users run it;
* ``sparkstate (hashmap)``: the same job on the hashmap backend, ``applyInPandasWithState`` on
  Spark's in-memory store, whose key group arrives with its state row and needs no state call
  (the other rows keep RocksDB, so this row shows what the state calls cost, not a like-for-like).

Each engine first runs a warm-up query of its kind; then the three run their measured queries
in turn, ``--rounds`` times, so that none is measured on a colder JVM than the others (the JVM
keeps compiling for minutes, and the engine that ran first was measured slower). The table
shows per-batch medians over every round (each query's first batch left out) of the whole
trigger and of the phases Spark reports in ``durationMs``: ``latestOffset``, ``queryPlanning``,
``walCommit`` (the offsets written), ``addBatch`` (running the batch, sink included: where the
state stores open and commit) and ``commitOffsets`` (the commit log), plus what is left of the
trigger; a second table shows each round's median, to see the drift.
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

    from sparkstate.runtime.io.sources import spark_source
    from sparkstate.runtime.session.classic import state_store_class

    # the session's store is whichever the last sparkstate run set (the hashmap row sets another)
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", state_store_class("rocksdb"))
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


def _sparkstate(spark, events: int, ckpt: Path, backend: str = "rocksdb") -> list[dict]:
    from sparkstate import NoopSink
    from sparkstate.jobs.running_sum import build

    job = build(_generator(events)).sink(NoopSink()).with_settings(state_backend=backend, trigger_interval="0 seconds")
    result = job.run(checkpoint_dir=ckpt, spark=spark)
    return [p for p in result.progress if p.get("events")]


def _figures(runs: list[list[dict]]) -> dict:
    data = [p for batches in runs for p in batches[1:]]  # a query's first batch pays its start
    total = [p["durationMs"]["triggerExecution"] for p in data]
    out = {"batches": len(data), "trigger": statistics.median(total)}
    for phase in PHASES:
        out[phase] = statistics.median([p["durationMs"].get(phase, 0) for p in data])
    out["other"] = statistics.median(
        [p["durationMs"]["triggerExecution"] - sum(p["durationMs"].get(ph, 0) for ph in PHASES) for p in data])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from rich.console import Console
    from rich.table import Table

    from sparkstate.runtime.session.classic import get_spark

    console = Console(highlight=False, width=max(140, Console().width))
    spark = get_spark(parallelism=2, log_file=Path(tempfile.gettempdir()) / "sparkstate-bench-spark.log")
    # Spark's queries get the state store settings sparkstate's run sets for its own (the store
    # itself each query sets, see _spark_query)
    from sparkstate import JobSettings

    for key, value in JobSettings().checkpoint.spark_conf().items():
        spark.conf.set(key, value)
    events = 100 * args.batches
    rows = [
        ("spark sql (groupBy.agg, update)", lambda ck, n: _spark_query(spark, "sql", n, ck)),
        ("spark transformWithState (row)", lambda ck, n: _spark_query(spark, "row", n, ck)),
        ("sparkstate W1", lambda ck, n: _sparkstate(spark, n, ck)),
        ("sparkstate W1 (hashmap)", lambda ck, n: _sparkstate(spark, n, ck, "hashmap")),
    ]
    runs: dict[str, list[list[dict]]] = {name: [] for name, _ in rows}
    with tempfile.TemporaryDirectory(prefix="sparkstate-bench-floor-") as work:
        for i, (name, run) in enumerate(rows):
            console.print(f"  warm-up: {name} ...")
            run(Path(work) / f"warmup-{i}", 500)
        for r in range(args.rounds):
            for i, (name, run) in enumerate(rows):
                console.print(f"  round {r + 1} of {args.rounds}: {name} ...")
                runs[name].append(run(Path(work) / f"measured-{r}-{i}", events))
    table = Table(title=f"A micro-batch of 100 events: medians over {args.rounds} rounds of {args.batches - 1} batches "
                        "after the first (ms)", title_justify="left")
    for col in ("engine", "trigger", *PHASES, "other", "vs spark sql"):
        table.add_column(col, justify="left" if col == "engine" else "right")
    base = None
    for name, _ in rows:
        f = _figures(runs[name])
        base = base or f["trigger"]
        table.add_row(name, f"{f['trigger']:,.0f}", *[f"{f[ph]:,.0f}" for ph in PHASES], f"{f['other']:,.0f}",
                      f"{f['trigger'] / base:.2f}x")
    rounds = Table(title="Each round's median trigger (ms)", title_justify="left")
    rounds.add_column("engine")
    for r in range(args.rounds):
        rounds.add_column(f"round {r + 1}", justify="right")
    for name, _ in rows:
        rounds.add_row(name, *[f"{_figures([batches])['trigger']:,.0f}" for batches in runs[name]])
    console.print(table)
    console.print(rounds)


if __name__ == "__main__":
    main()
