"""Cluster benchmark: W1 in local mode and on a Spark standalone cluster on the same machine.

    bash scripts/cluster.sh start                  # a master and two one-core workers
    python benchmarks/cluster.py                   # local[2] vs spark://127.0.0.1:7077
    bash scripts/cluster.sh stop

W1 (running count and sum per merchant, every event emitted): 2,000,000 UPI payments over
100,000 merchants, 1,000,000-event batches, RocksDB, 2 partitions, noop sink. Each row runs
in its own driver process: a warm-up run, then the measured one. The cluster row's executors
are JVMs of their own with their own Python workers, started by the workers, and talk to the
driver over the network stack; on one 2-core machine the cluster cannot be faster, so the
figure to watch is the overhead.

The tasks' run time (Spark's ``executorRunTime``, summed over the measured run's stages, from
the driver's REST API) splits a run into work the executors share and the rest (planning,
offsets and commit logs, waiting): with ``N`` one-core workers a run would take about
``rest + tasks / N``, an *estimate* that assumes the tasks spread evenly and the rest stays.
Peak memory is the driver's process tree: in the cluster row the executors are the workers'
children, not the driver's, and are left out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from bench_common import mb, measure, run_child

HERE = Path(__file__).resolve()


def _stages(spark) -> dict[int, int]:
    """Completed stages so far: id -> executorRunTime (ms, all its tasks)."""
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{app}/stages?status=complete") as r:
        return {(s["stageId"], s["attemptId"]): int(s["executorRunTime"]) for s in json.loads(r.read())}


def child(args: argparse.Namespace) -> dict:
    from sparkstate import NoopSink, UpiPayments
    from sparkstate.jobs.running_sum import build
    from sparkstate.runtime.session.classic import get_spark

    spark = get_spark(master=args.master or None, parallelism=2, ui=True,
                      log_file=Path(tempfile.gettempdir()) / "sparkstate-bench-cluster.log")

    def once(events: int, ckpt: Path) -> dict:
        source = UpiPayments(events=events, merchants=args.keys, max_batch=args.max_batch, seed=11)
        job = build(source).sink(NoopSink()).with_settings(parallelism=2, trigger_interval="0 seconds")
        before = _stages(spark)
        started = time.monotonic()
        result = job.run(checkpoint_dir=ckpt, spark=spark)
        seconds = time.monotonic() - started
        time.sleep(1)  # the listener posts the last stages' figures
        tasks = sum(ms for stage, ms in _stages(spark).items() if stage not in before) / 1000
        batches = [p["durationMs"]["triggerExecution"] / 1000 for p in result.progress if p.get("events")]
        return {"events": result.events, "seconds": seconds, "batches": len(batches),
                "median_batch": statistics.median(batches[1:] or batches), "task_seconds": tasks,
                "steady": result.steady_events_per_second}

    return measure(once, args.events, args.warmup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--master", default="spark://127.0.0.1:7077", help="the cluster (scripts/cluster.sh start)")
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--max-batch", type=int, default=1_000_000)
    parser.add_argument("--warmup", type=int, default=200_000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return

    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, width=max(150, Console().width))
    common = ["--events", str(args.events), "--keys", str(args.keys), "--max-batch", str(args.max_batch),
              "--warmup", str(args.warmup)]
    rows = {}
    for name, master in (("local[2]", ""), (f"cluster {args.master} (2 workers x 1 core)", args.master)):
        console.print(f"  running {name} ...")
        rows[name] = run_child(HERE, [*common, "--master", master])
    table = Table(title=f"W1, {args.events:,} events, {args.keys:,} keys, {args.max_batch:,}-event batches, RocksDB, "
                        "noop sink (each row: own driver process, after a warm-up)", title_justify="left")
    for col in ("where", "events/s", "after 1st batch", "batch s (median)", "wall s", "task s", "rest s",
                "driver peak memory"):
        table.add_column(col, justify="left" if col == "where" else "right")
    for name, r in rows.items():
        rest = r["seconds"] - r["task_seconds"] / 2
        table.add_row(name, f"{r['events'] / r['seconds']:,.0f}", f"{r['steady']:,.0f}" if r.get("steady") else "-",
                      f"{r['median_batch']:.2f}", f"{r['seconds']:.1f}", f"{r['task_seconds']:.1f}", f"{rest:.1f}",
                      mb(r["peak_bytes"]))
    console.print(table)
    local, on_cluster = rows.values()
    rate = on_cluster["events"] / on_cluster["seconds"] / (local["events"] / local["seconds"]) - 1
    console.print(f"cluster vs local: {rate:+.1%} events/s; per batch (median) "
                  f"{on_cluster['median_batch'] / local['median_batch'] - 1:+.1%}")
    rest = on_cluster["seconds"] - on_cluster["task_seconds"] / 2
    estimates = ", ".join(f"{n} workers ~{on_cluster['events'] / (rest + on_cluster['task_seconds'] / n):,.0f}/s"
                          for n in (1, 2, 4, 8))
    console.print(f"estimate from the cluster row's task time ({on_cluster['task_seconds']:.1f} s of tasks, "
                  f"{rest:.1f} s of the rest): {estimates}")


if __name__ == "__main__":
    main()
