"""Keyed-state benchmark: W1 through sparkstate and through Spark's own Python stateful APIs.

    python benchmarks/keyed_state.py           # the full run (about 9 minutes on 2 cores)
    python benchmarks/keyed_state.py --quick   # a smaller smoke run

W1: 2,000,000 UPI payments over 100,000 merchants; per merchant a running count and sum,
emitted for every event; RocksDB state store, changelog checkpointing, a real checkpoint
directory, Spark's noop sink. Every engine reads the same generated events:

* ``sparkstate``: ``sparkstate.jobs.running_sum`` (RocksDB, and the hashmap backend).
* ``sparkstate, metrics endpoint``: the same with ``metrics_port`` on and a client reading
  its Prometheus text, Flink's REST and the dashboard's batch figures every 0.2 s: the
  endpoint's cost (it should be none).
* ``sparkstate, Spark UI on``: the same in a session with the Spark UI on, as ``sparkstate
  run`` and ``Job.run`` start it by default (the other rows run without it).
* ``sparkstate, TTL``: the same with a 24-hour TTL on both states (Flink's default cleanup:
  touched keys lose expired entries on write-back, idle key groups are swept), in the same
  run as plain W1: the cost of TTL bookkeeping (target: at most 25% slower).
* ``spark tws (row)``: ``groupBy(key).transformWithState`` with a per-key ValueState, as
  Spark's documentation writes it.
* ``spark tws (pandas)``: ``groupBy(key).transformWithStateInPandas``, likewise.

The file rows are then measured again against the generator in one process per batch size,
the two runs in turn for ``--rounds`` rounds after a warm-up of each: separate processes
compare mostly how fast each path's JVM code warms up, and one run each is within this
machine's noise of the other (batch times move by 10-25% between identical runs).

The baselines run on a prefix of the input (``--baseline-events``) to keep the run short;
events/s are comparable. Each measurement runs in its own process: a short warm-up run of
the same query shape (not measured), then the measured run, whose peak resident memory
(driver, JVM and Python workers together) is sampled.

The dedup job (``sparkstate.jobs.dedup``) runs over ``--dedup-events`` UPI transactions with
5% duplicates: events/s, peak memory and the keys in state at the end (a 24-hour TTL keeps
every transaction of a run this short).

The state-size sweep loads 10k, 100k and 1M keys, then runs batches that each touch
``--touch`` keys and reports the median batch time and the state-store operations per batch:
with bucketed state (RocksDB backend) they follow the touched keys, not the state size.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import (
    CSV_FILE_EVENTS,
    FLINK_PYTHON,
    csv_source,
    flink_row,
    mb,
    measure,
    prepare_csv,
    progress_until_read,
    run_child,
    run_until_read,
)

HERE = Path(__file__).resolve()
OUTPUT = "merchant_id string, count bigint, total double"


# --------------------------------------------------------------------------- child side


def _session(ui: bool = False):
    from sparkstate.runtime.session.classic import get_spark

    return get_spark(parallelism=2, log_file=Path(tempfile.gettempdir()) / "sparkstate-bench-spark.log", ui=ui)


def _generator(events: int, keys: int, max_batch: int):
    from sparkstate import UpiPayments

    return UpiPayments(events=events, merchants=keys, max_batch=max_batch, seed=11)


class _TtlRunningSum:
    """W1's function with a 24-hour TTL on both states."""

    @staticmethod
    def make():
        from datetime import timedelta

        from sparkstate import StateTtlConfig, ValueStateDescriptor
        from sparkstate.jobs.running_sum import RunningSum

        class TtlRunningSum(RunningSum):
            def open(self, ctx):
                ttl = StateTtlConfig.new_builder(timedelta(hours=24)).build()
                self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0).enable_time_to_live(ttl))
                self.total = ctx.get_state(ValueStateDescriptor("total", float, default=0.0).enable_time_to_live(ttl))

        return TtlRunningSum()


def _polled(job, ckpt: Path, spark) -> dict:
    """A run with the metrics endpoint on, read every 0.2 s (Prometheus text and Flink's REST)
    by a client thread, as a dashboard or a scraper would."""
    import threading
    import urllib.request

    urls: list[str] = []
    stop = threading.Event()
    reads = [0]

    def poll() -> None:
        while not stop.wait(0.2):
            for url in urls:
                try:
                    with urllib.request.urlopen(url, timeout=5) as r:
                        r.read()
                    reads[0] += 1
                except OSError:
                    pass

    def notice(message: str) -> None:
        base = message.split("metrics: ", 1)[1].split("/jobs/", 1)[0]
        urls.extend([f"{base}/metrics", f"{base}/jobs/{job.name}/metrics?get=numRecordsIn,lastCheckpointDuration",
                     f"{base}/jobs/{job.name}/batches?since=-1"])

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        result = _figures(job.run(checkpoint_dir=ckpt, spark=spark, metrics_port=0, on_notice=notice))
    finally:
        stop.set()
        thread.join()
    return {**result, "endpoint_reads": reads[0]}


def _run_sparkstate(spark, events: int, keys: int, max_batch: int, backend: str, key_groups: int, ckpt: Path,
                    ttl: bool = False, csv: str = "", metrics: bool = False, full: bool = False) -> Any:
    from sparkstate import Job, NoopSink
    from sparkstate.jobs.running_sum import OUTPUT as SUM_OUTPUT
    from sparkstate.jobs.running_sum import build

    job = build(csv_source(csv, events, max_batch) if csv else _generator(events, keys, max_batch))
    if ttl:
        job = Job("running-sum-ttl").source(job.source_spec).key_by("merchant_id").process(
            _TtlRunningSum.make(), output_schema=SUM_OUTPUT)
    job = job.sink(NoopSink()).with_settings(state_backend=backend, key_groups=key_groups, trigger_interval="0 seconds")
    if metrics:
        return _polled(job, ckpt, spark)
    # files are an unbounded source: run until the events are read
    result = run_until_read(job, ckpt, spark, events) if csv else job.run(checkpoint_dir=ckpt, spark=spark)
    return result if full else _figures(result)


def _figures(result) -> dict:
    """What a throughput row shows of a sparkstate run."""
    return {
        "events": result.events,
        "seconds": result.seconds,
        "batches": result.batches,
        "steady": result.steady_events_per_second,
        "first_batch": result.first_batch_seconds,
    }


class _RowRunningSum:
    """Spark's row-based transformWithState, as its documentation writes a running aggregate."""

    @staticmethod
    def make():
        from pyspark.sql import Row
        from pyspark.sql.streaming.stateful_processor import StatefulProcessor

        class RowRunningSum(StatefulProcessor):
            def init(self, handle):
                self.count = handle.getValueState("count", "count long")
                self.total = handle.getValueState("total", "total double")

            def handleInputRows(self, key, rows, timerValues):
                count = self.count.get()[0] if self.count.exists() else 0
                total = self.total.get()[0] if self.total.exists() else 0.0
                for row in rows:
                    count += 1
                    total += row.amount
                    yield Row(merchant_id=key[0], count=count, total=total)
                self.count.update((count,))
                self.total.update((total,))

            def close(self):
                pass

        return RowRunningSum()


class _PandasRunningSum:
    """Spark's transformWithStateInPandas, as its documentation writes a running aggregate."""

    @staticmethod
    def make():
        import pandas as pd
        from pyspark.sql.streaming.stateful_processor import StatefulProcessor

        class PandasRunningSum(StatefulProcessor):
            def init(self, handle):
                self.count = handle.getValueState("count", "count long")
                self.total = handle.getValueState("total", "total double")

            def handleInputRows(self, key, rows, timerValues):
                count = self.count.get()[0] if self.count.exists() else 0
                total = self.total.get()[0] if self.total.exists() else 0.0
                for pdf in rows:
                    counts = count + pd.Series(range(1, len(pdf) + 1), index=pdf.index)
                    totals = total + pdf["amount"].cumsum()
                    count, total = int(counts.iloc[-1]), float(totals.iloc[-1])
                    yield pd.DataFrame({"merchant_id": key[0], "count": counts, "total": totals})
                self.count.update((count,))
                self.total.update((total,))

            def close(self):
                pass

        return PandasRunningSum()


def _run_baseline(spark, kind: str, events: int, keys: int, max_batch: int, ckpt: Path) -> dict:
    from sparkstate.runtime.io.sources import spark_source

    df = spark_source(_generator(events, keys, max_batch)).raw(spark, None).select("merchant_id", "amount")
    grouped = df.groupBy("merchant_id")
    if kind == "row":
        out = grouped.transformWithState(_RowRunningSum.make(), OUTPUT, "Append", "None")
    else:
        out = grouped.transformWithStateInPandas(_PandasRunningSum.make(), OUTPUT, "Append", "None")
    started = time.monotonic()
    query = out.writeStream.format("noop").option("checkpointLocation", str(ckpt)).trigger(processingTime="0 seconds").start()
    progress = progress_until_read(query, events)
    seconds = time.monotonic() - started
    data = [p for p in progress if p["numInputRows"]]
    steady = None
    if len(data) > 1:
        ms = sum(p["durationMs"]["triggerExecution"] for p in data[1:])
        steady = sum(p["numInputRows"] for p in data[1:]) * 1000.0 / ms
    return {
        "events": sum(p["numInputRows"] for p in progress),
        "seconds": seconds,
        "batches": len(progress),
        "steady": steady,
        "first_batch": data[0]["durationMs"]["triggerExecution"] / 1000 if data else 0,
    }


def _run_dedup(spark, events: int, max_batch: int, key_groups: int, ckpt: Path) -> dict:
    from sparkstate import NoopSink
    from sparkstate.connectors.generator import UpiTransactions
    from sparkstate.jobs.dedup import build
    from sparkstate.runtime.savepoints.state_reader import count_keys

    source = UpiTransactions(events=events, duplicates=0.05, max_batch=max_batch, seed=11)
    job = build(source).sink(NoopSink()).with_settings(key_groups=key_groups, trigger_interval="0 seconds")
    return {**_figures(job.run(checkpoint_dir=ckpt, spark=spark)), "state_keys": count_keys(spark, ckpt, "rocksdb")}


def child_throughput(args: argparse.Namespace) -> dict:
    """One engine: a warm-up run, then the measured run with peak memory."""
    if args.engine.startswith("flink-"):  # PyFlink's own interpreter warms up its JVM itself
        return flink_row(args.engine.removeprefix("flink-"), args.csv, args.events, args.csv_warmup)
    spark = _session(ui=args.spark_ui)
    ours = args.engine in ("sparkstate", "sparkstate-ttl", "dedup")

    def once(events: int, ckpt: Path) -> dict:
        if args.engine == "dedup":
            return _run_dedup(spark, events, args.max_batch, args.key_groups, ckpt)
        if ours:
            return _run_sparkstate(spark, events, args.keys, args.max_batch, args.backend, args.key_groups, ckpt,
                                   ttl=args.engine == "sparkstate-ttl", csv=args.csv, metrics=args.metrics)
        return _run_baseline(spark, args.engine, events, args.keys, args.max_batch, ckpt)

    # the warm-up only has to start the JVM's and Python's code paths: a slow baseline
    # warms up on a tenth of its events, sparkstate on --warmup events
    return measure(once, args.events, args.warmup if ours else args.events // 10)


def child_alternating(args: argparse.Namespace) -> dict:
    """The generator and the CSV files at one batch size in one process: a warm-up of each,
    then ``--rounds`` rounds of the two measured runs in turn, so that neither is measured on a
    colder JVM (separate processes compare mostly how fast each warms up)."""
    spark = _session()
    work = Path(tempfile.mkdtemp(prefix="sparkstate-bench-pair-"))
    out: dict[str, list[dict]] = {"generator": [], "files": []}

    def once(source: str, events: int, ckpt: Path) -> dict:
        csv = args.csv if source == "files" else ""
        result = _run_sparkstate(spark, events, args.keys, args.max_batch, "rocksdb", args.key_groups, ckpt, csv=csv,
                                 full=True)
        data = [p for p in result.progress if p.get("events")][1:]  # the first batch pays the query's start
        return {**_figures(result), "batch_events": sum(p["events"] for p in data),
                "batch_ms": [p["durationMs"]["triggerExecution"] for p in data]}

    try:
        for source in out:
            once(source, min(args.events, 2 * args.max_batch), work / f"warmup-{source}")
        for r in range(args.rounds):
            for source in out:
                out[source].append(once(source, args.events, work / f"{source}-{r}"))
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_sweep_input(folder: Path, state_keys: int, touch: int, batches: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    ids = np.char.add("k", np.arange(state_keys).astype(str))
    rng = np.random.default_rng(5)
    files = [ids] + [rng.choice(ids, touch, replace=False) for _ in range(batches)]
    stamp = time.time() - 1000
    for i, keys in enumerate(files):
        path = folder / f"batch-{i:03d}.parquet"
        pq.write_table(pa.table({"merchant_id": pa.array(keys), "amount": pa.array(np.ones(len(keys)))}), path)
        os.utime(path, (stamp + i, stamp + i))  # the file source reads in modification order


def _sweep_one(spark, backend: str, key_groups: int, state_keys: int, touch: int, batches: int, work: Path) -> dict:
    """Load ``state_keys`` keys, then time ``batches`` batches touching ``touch`` keys each."""
    from sparkstate import DataFrameSource, Job, NoopSink
    from sparkstate.jobs.running_sum import RunningSum
    from sparkstate.runtime.checkpoint.stats import state_bytes

    folder = work / f"in-{state_keys}"
    _write_sweep_input(folder, state_keys, touch, batches)
    source = DataFrameSource(
        lambda s: s.readStream.schema("merchant_id string, amount double").option("maxFilesPerTrigger", 1).parquet(str(folder))
    )
    job = (
        Job("sweep").source(source).key_by("merchant_id").process(RunningSum(), output_schema=OUTPUT)
        .sink(NoopSink()).with_settings(state_backend=backend, key_groups=key_groups, trigger_interval="0 seconds")
    )
    expected = 1 + batches
    # a file source is unbounded: run until every file has been read
    result = job.run(
        checkpoint_dir=work / f"ckpt-{state_keys}",
        spark=spark,
        until=lambda r: sum(1 for p in r.progress if p.get("events")) >= expected,
        timeout=600,
    )
    seen = [p for p in result.progress if p.get("events")]
    touched = seen[1:]
    ops = [(p.get("stateOperators") or [{}])[0] for p in touched]
    custom = [o.get("customMetrics") or {} for o in ops]

    def median(values):
        values = list(values)
        return statistics.median(values) if values else None

    return {
        "state_keys": state_keys,
        "load_ms": seen[0]["durationMs"]["triggerExecution"] if seen else None,
        "batch_ms": median(p["durationMs"]["triggerExecution"] for p in touched),
        "gets": median(c.get("rocksdbGetCount", 0) for c in custom),
        "puts": median(c.get("rocksdbPutCount", 0) for c in custom),
        "written": median(c.get("rocksdbTotalBytesWritten", 0) for c in custom),
        "state_rows": ops[-1].get("numRowsTotal") if ops else None,
        "state_bytes": state_bytes(ops[-1]) if ops else None,
        "state_updated": median(o.get("numRowsUpdated", 0) for o in ops),
    }


def child_sweep(args: argparse.Namespace) -> list[dict]:
    """Every state size of the sweep for one backend, in one process (after a small warm-up)."""
    spark = _session()
    work = Path(tempfile.mkdtemp(prefix="sparkstate-sweep-"))
    try:
        _sweep_one(spark, args.backend, args.key_groups, 1000, args.touch, 1, work / "warmup")
        return [
            _sweep_one(spark, args.backend, args.key_groups, int(size), args.touch, args.sweep_batches, work)
            for size in args.sweep_sizes.split(",")
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------- parent side


def _child(args: list[str]) -> dict:
    return run_child(HERE, args)  # type: ignore[return-value]


def _alternating(console, args: argparse.Namespace, common: list[str], files: list[str]) -> None:
    """The generator against the CSV files at both batch sizes, each size in one process with
    the two runs in turn (:func:`child_alternating`): half the events a run, or four batches."""
    from rich.table import Table

    table = Table(title=f"W1, generator and CSV files in one process, in turn, {args.rounds} rounds (events/s and "
                        "batch medians after each run's first batch)", title_justify="left")
    for col in ("batch size", "source", "events/s after 1st batch", "batch ms (median)", "each round's events/s",
                "vs the generator"):
        table.add_column(col, justify="left" if col in ("batch size", "source") else "right")
    for size in dict.fromkeys([args.max_batch, args.small_batch]):
        events = min(args.events, max(args.events // 2, 4 * size))
        if events < 2 * size:  # the first batch is left out: nothing would be measured
            console.print(f"  (no {size:,}-event batches in turn: {args.events:,} events are fewer than two batches)")
            continue
        console.print(f"  generator and CSV files in turn, {size:,}-event batches, {events:,} events a run ...")
        common_size = [*common[:common.index("--max-batch")], *common[common.index("--max-batch") + 2:]]
        r = _child([*common_size, "--mode", "alternate", "--max-batch", str(size), "--events", str(events),
                    "--rounds", str(args.rounds), *files])
        rate = {}
        for source, runs in r.items():
            rate[source] = sum(x["batch_events"] for x in runs) * 1000.0 / sum(sum(x["batch_ms"]) for x in runs)
            rounds = ", ".join(f"{x['batch_events'] * 1000.0 / sum(x['batch_ms']):,.0f}" for x in runs)
            vs = f"{rate[source] / rate['generator'] - 1:+.1%}" if source != "generator" else ""
            table.add_row(f"{size:,}", source, f"{rate[source]:,.0f}",
                          f"{statistics.median(ms for x in runs for ms in x['batch_ms']):,.0f}", rounds, vs)
    console.print(table)


def _dedup(console, args: argparse.Namespace, common: list[str]) -> None:
    from rich.table import Table

    console.print(f"  running dedup over {args.dedup_events:,} transactions (5% duplicates) ...")
    r = _child([*common, "--engine", "dedup", "--events", str(args.dedup_events)])
    table = Table(title="dedup (ValueState seen-flag, 24-hour TTL, incremental cleanup; RocksDB)", title_justify="left")
    for col in ("events", "wall s", "events/s", "events/s after 1st batch", "peak memory", "state entries at the end"):
        table.add_column(col, justify="right")
    table.add_row(f"{r['events']:,}", f"{r['seconds']:.1f}", f"{r['events'] / r['seconds']:,.0f}",
                  f"{r['steady']:,.0f}" if r.get("steady") else "-", mb(r["peak_bytes"]),
                  f"{r['state_keys']:,}" if r.get("state_keys") is not None else "-")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--baseline-events", type=int, default=150_000)
    parser.add_argument("--max-batch", type=int, default=1_000_000)
    parser.add_argument("--key-groups", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=100_000, help="events of the unmeasured warm-up run")
    parser.add_argument("--sweep-sizes", default="10000,100000,1000000")
    parser.add_argument("--touch", type=int, default=1000)
    parser.add_argument("--sweep-batches", type=int, default=5)
    parser.add_argument("--skip-baselines", action="store_true")
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--dedup-events", type=int, default=2_000_000)
    parser.add_argument("--skip-ttl", action="store_true", help="no W1-with-TTL row and no dedup run")
    parser.add_argument("--skip-hashmap", action="store_true")
    parser.add_argument("--quick", action="store_true", help="200k events, 20k baseline events, sweep up to 100k keys")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine", default="sparkstate", help=argparse.SUPPRESS)
    parser.add_argument("--backend", default="rocksdb", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="throughput", help=argparse.SUPPRESS)
    parser.add_argument("--csv", default="", help=argparse.SUPPRESS)
    parser.add_argument("--metrics", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--skip-endpoint", action="store_true", help="no rows with the metrics endpoint or Spark UI on")
    parser.add_argument("--spark-ui", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--csv-warmup", default="", help=argparse.SUPPRESS)
    parser.add_argument("--skip-files", action="store_true", help="no CSV file-source rows (and no Flink rows)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the generator-and-files runs in one process (0: none)")
    parser.add_argument("--small-batch", type=int, default=100_000,
                        help="events per micro-batch of the small-batch rows (generator and files)")
    args = parser.parse_args()

    if args.child:
        modes = {"sweep": child_sweep, "alternate": child_alternating}
        result = modes.get(args.mode, child_throughput)(args)
        print(json.dumps(result))
        return

    if args.quick:
        args.events, args.baseline_events, args.sweep_sizes, args.warmup = 200_000, 20_000, "10000,100000", 20_000

    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, width=max(140, Console().width))
    common = [
        "--keys", str(args.keys), "--max-batch", str(args.max_batch), "--key-groups", str(args.key_groups),
        "--warmup", str(args.warmup),
    ]
    runs = [("sparkstate (RocksDB)", ["--engine", "sparkstate", "--backend", "rocksdb", "--events", str(args.events)])]
    if not args.skip_endpoint:
        runs.append(("sparkstate (RocksDB), metrics endpoint read every 0.2 s",
                     ["--engine", "sparkstate", "--metrics", "--events", str(args.events)]))
        runs.append(("sparkstate (RocksDB), Spark UI on", ["--engine", "sparkstate", "--spark-ui", "--events", str(args.events)]))
    work = Path(tempfile.mkdtemp(prefix="sparkstate-bench-csv-"))
    if not args.skip_files:
        console.print(f"  writing the {args.events:,} events as CSV files of {CSV_FILE_EVENTS:,} lines ...")
        dirs = prepare_csv(work, args.events, args.keys, args.max_batch, prefix_events=args.baseline_events)
        files = ["--csv", dirs["csv"], "--csv-warmup", dirs["warmup"]]
        small = ["--max-batch", str(args.small_batch)]
        runs += [
            ("sparkstate (RocksDB), CSV files", ["--engine", "sparkstate", "--events", str(args.events), *files]),
            (f"sparkstate (RocksDB), {args.small_batch:,}-event batches",
             ["--engine", "sparkstate", "--events", str(args.events), *small]),
            (f"sparkstate (RocksDB), CSV files, {args.small_batch:,}-event batches",
             ["--engine", "sparkstate", "--events", str(args.events), *files, *small]),
        ]
        if FLINK_PYTHON.exists():
            runs += [
                ("Flink SQL OVER (JVM, RocksDB, parallelism 2), CSV files",
                 ["--engine", "flink-w1-sql", "--events", str(args.events), *files]),
                ("PyFlink KeyedProcessFunction (thread mode, RocksDB, parallelism 2), CSV files",
                 ["--engine", "flink-w1-datastream", "--events", dirs["prefix_events"],
                  "--csv", dirs["prefix"], "--csv-warmup", dirs["warmup"]]),
            ]
        else:
            console.print(f"  (no Flink rows: {FLINK_PYTHON} is missing; bash benchmarks/flink/setup.sh makes it)")
    if not args.skip_ttl:
        runs.append(("sparkstate (RocksDB), TTL on both states",
                     ["--engine", "sparkstate-ttl", "--backend", "rocksdb", "--events", str(args.events)]))
    if not args.skip_hashmap:
        runs.append(("sparkstate (hashmap)", ["--engine", "sparkstate", "--backend", "hashmap", "--events", str(args.events)]))
    if not args.skip_baselines:
        runs += [
            ("spark transformWithState (row)", ["--engine", "row", "--events", str(args.baseline_events)]),
            ("spark transformWithStateInPandas", ["--engine", "pandas", "--events", str(args.baseline_events)]),
        ]
    console.print(f"W1: running count and sum per key, {args.keys:,} keys, every event emitted; 2 local cores; noop sink")
    table = Table(title="W1 throughput (each row: own process, after an unmeasured warm-up run)", title_justify="left")
    for col in ("engine", "events", "wall s", "events/s", "events/s after 1st batch", "peak memory"):
        table.add_column(col, justify="left" if col == "engine" else "right")
    results = {}
    for name, extra in runs:
        console.print(f"  running {name} ...")
        r = _child([*common, *extra])
        results[name] = r
        table.add_row(
            name, f"{r['events']:,}", f"{r['seconds']:.1f}", f"{r['events'] / r['seconds']:,.0f}",
            f"{r['steady']:,.0f}" if r.get("steady") else "-", mb(r["peak_bytes"]),
        )
    console.print(table)
    if not args.skip_files and args.rounds:
        _alternating(console, args, common, files)
    shutil.rmtree(work, ignore_errors=True)
    ours = results["sparkstate (RocksDB)"]
    for name, r in results.items():
        if "CSV files" in name and name.startswith("sparkstate"):
            plain = results[name.replace(", CSV files", "")]
            overall = r["events"] / r["seconds"] / (plain["events"] / plain["seconds"]) - 1
            steady = f"{r['steady'] / plain['steady'] - 1:+.1%}" if r.get("steady") and plain.get("steady") else "-"
            console.print(f"{name} vs the generator: {steady} events/s after the first batch, {overall:+.1%} overall")
    base = [r for n, r in results.items() if n.startswith("spark ")]
    if base:
        best = max(r["events"] / r["seconds"] for r in base)
        console.print(f"sparkstate (RocksDB) vs the fastest Spark baseline: {ours['events'] / ours['seconds'] / best:,.1f}x")
    polled = results.get("sparkstate (RocksDB), metrics endpoint read every 0.2 s")
    if polled is not None:
        console.print(f"W1 with the metrics endpoint read {polled['endpoint_reads']:,} times vs without: "
                      f"{polled['events'] / polled['seconds'] / (ours['events'] / ours['seconds']) - 1:+.1%} events/s overall")
    ui = results.get("sparkstate (RocksDB), Spark UI on")
    if ui is not None:
        change = ui["events"] / ui["seconds"] / (ours["events"] / ours["seconds"]) - 1
        console.print(f"W1 with the Spark UI on vs off: {change:+.1%} events/s overall")
    flink = next((r for n, r in results.items() if n.startswith("Flink SQL")), None)
    files = results.get("sparkstate (RocksDB), CSV files")
    if flink and files:
        ratio = files["events"] / files["seconds"] / (flink["events"] / flink["seconds"])
        console.print(f"sparkstate on the CSV files vs Flink SQL on them: {ratio:.2f}x "
                      "(both overall; Flink's time is its job's, from submission)")
    ttl = results.get("sparkstate (RocksDB), TTL on both states")
    if ttl is not None:
        slower = ours["events"] / ours["seconds"] / (ttl["events"] / ttl["seconds"]) - 1
        console.print(f"W1 with a TTL on both states vs plain W1: {slower:+.1%} time (target: at most +25%)")
        _dedup(console, args, common)

    if args.skip_sweep:
        return
    sweep = Table(
        title=f"State-size sweep: batches touching {args.touch:,} keys (median of {args.sweep_batches})", title_justify="left"
    )
    for col in (
        "backend", "keys in state", "load batch ms", "batch ms", "state rows", "state size", "rows updated/batch",
        "RocksDB gets/batch", "puts/batch", "bytes written/batch",
    ):
        sweep.add_column(col, justify="left" if col == "backend" else "right")
    for backend in ("rocksdb", "hashmap"):
        console.print(f"  sweep {backend}: {args.sweep_sizes} keys ...")
        rows = _child(["--mode", "sweep", "--backend", backend, "--sweep-sizes", args.sweep_sizes, "--touch", str(args.touch),
                       "--sweep-batches", str(args.sweep_batches), "--key-groups", str(args.key_groups)])
        for r in rows:
            rocks = backend == "rocksdb"
            sweep.add_row(
                backend, f"{r['state_keys']:,}", f"{r['load_ms']:,}", f"{r['batch_ms']:,.0f}", f"{r['state_rows'] or 0:,}",
                mb(r["state_bytes"]), f"{r['state_updated'] or 0:,.0f}",
                f"{r['gets']:,.0f}" if rocks else "-", f"{r['puts']:,.0f}" if rocks else "-",
                mb(r["written"]) if rocks else "-",
            )
    console.print(sweep)


if __name__ == "__main__":
    main()
