"""State-scale benchmark: W1 (running count and sum per merchant) as its state grows from
100,000 to 10,000,000 keys, to show that a batch costs the keys it touches, not the keys held.

    python benchmarks/state_scale.py                          # 100k, 1M and 10M keys (about 15 minutes)
    python benchmarks/state_scale.py --keys 100000,1000000    # a shorter run
    python benchmarks/state_scale.py --keys 1000000 --config default --config big:block.cache-size=512mb

For each number of keys, in a process of its own (2 local cores, RocksDB, changelog
checkpoints): the UPI generator with that many merchants (drawn uniformly) feeds W1 with
``--fill`` times as many events, in micro-batches of ``--batch`` events, so that almost every
merchant holds state by the end (1 - e^-fill of them), and at least ``--tail`` + 2 batches.
Reported:

* the median time of the last ``--tail`` batches (each the same number of events, against the
  fullest state) and their events/s;
* the checkpoint of those batches: mean delta (the bytes each batch's state version wrote) and
  the full size of the last one (what a restore reads), with Spark's own state size and keys;
* peak memory of the process (JVM and Python workers);
* restart time: the same job started again on its checkpoint (in the same Spark session), to
  its first committed batch of 10,000 new events (the state's load included).

Each ``--config LABEL:name=value,...`` (RocksDB options by Flink's names, without or with their
``state.backend.rocksdb.`` prefix; none for Spark's defaults) is a row per number of keys.

Seed 004's reference job: 393 MB of state, 27 MB incremental deltas, 1.8 s checkpoints.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench_common import mb, run_child

HERE = Path(__file__).resolve()
NEW_EVENTS = 10_000


def _rocksdb(config: str | None) -> dict[str, str]:
    """``LABEL:name=value,...``'s RocksDB options, by Flink's full names."""
    options = (config or "").partition(":")[2]
    return {("" if k.startswith("state.") else "state.backend.rocksdb.") + k.strip(): v.strip()
            for k, _, v in (o.partition("=") for o in options.split(",") if o)}


def _job(keys: int, built: int, batch: int, config: str | None = None):
    """W1 on a generator of ``built + NEW_EVENTS`` events: the build stops after ``built``, so
    that the restart reads the last ``NEW_EVENTS`` with the same source."""
    from sparkstate import NoopSink, UpiPayments
    from sparkstate.jobs.running_sum import build

    source = UpiPayments(events=built + NEW_EVENTS, merchants=keys, max_batch=batch, seed=5)
    job = build(source).sink(NoopSink()).with_settings(state_backend="rocksdb", parallelism=2, trigger_interval="0 seconds")
    return job.with_checkpointing(rocksdb=_rocksdb(config) or None)


def _events(args: argparse.Namespace) -> int:
    """``--fill`` events per key, and at least ``--tail`` + 2 batches' worth."""
    return max(args.fill * args.keys, (args.tail + 2) * args.batch)


def child(args: argparse.Namespace) -> dict:
    from sparkstate.metrics.memory import PeakMemory
    from sparkstate.runtime.session.classic import get_spark

    spark = get_spark(parallelism=2, log_file=Path(tempfile.gettempdir()) / "sparkstate-bench-spark.log")
    work = Path(tempfile.mkdtemp(prefix="sparkstate-bench-scale-"))
    try:
        ckpt = work / "checkpoint"
        built = _events(args)
        with PeakMemory() as mem:
            result = _job(args.keys, built, args.batch, args.config).run(checkpoint_dir=ckpt, spark=spark,
                                                                         until=lambda r: r.events >= built)
        batches = [p for p in result.progress if p.get("events")]
        tail = batches[-args.tail:]
        seconds = [p["durationMs"]["triggerExecution"] / 1000 for p in tail]
        stats = result.checkpoints[-args.tail:]
        deltas = [c.delta_bytes for c in stats if c.delta_bytes is not None]
        last = result.checkpoints[-1]
        # the job again on its checkpoint: state load and a batch of NEW_EVENTS, to the first commit
        started = time.monotonic()
        _job(args.keys, built, args.batch, args.config).run(checkpoint_dir=ckpt, spark=spark,
                                                            until=lambda r: r.batches >= 1)
        return {
            "keys": args.keys, "events": result.events, "batches": result.batches,
            "median_s": statistics.median(seconds), "tail_events": sum(p["events"] for p in tail),
            "tail_seconds": sum(seconds), "delta_bytes": statistics.mean(deltas) if deltas else None,
            "full_bytes": last.full_bytes, "state_bytes": last.state_bytes, "state_rows": last.state_rows,
            "checkpoint_ms": statistics.median([c.duration_ms for c in stats if c.duration_ms is not None] or [0]),
            "peak_bytes": mem.peak_bytes, "restart_s": time.monotonic() - started,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="100000,1000000,10000000", help="comma-separated numbers of merchants")
    parser.add_argument("--fill", type=int, default=3, help="events per key")
    parser.add_argument("--batch", type=int, default=1_000_000, help="events per micro-batch")
    parser.add_argument("--tail", type=int, default=3, help="last batches measured")
    parser.add_argument("--config", action="append", help="LABEL:name=value,... RocksDB options: a row each")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.keys, args.config = int(args.keys), (args.config or [None])[0]
        print(json.dumps(child(args)))
        return

    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, width=max(170, Console().width))
    table = Table(title="W1 as its state grows (each row: own processes; 2 local cores, RocksDB)", title_justify="left")
    if args.config:
        table.add_column("config")
    for col in ("keys", "events", "batches", "batch s (median of last)", "events/s (last)", "checkpoint ms",
                "delta (mean)", "full", "state (Spark)", "state rows", "peak memory", "restart s"):
        table.add_column(col, justify="right")
    for keys, config in ((int(k), c) for k in args.keys.split(",") for c in args.config or [None]):
        console.print(f"  {keys:,} keys{f' ({config})' if config else ''}: "
                      f"{_events(argparse.Namespace(**{**vars(args), 'keys': keys})):,} events ...")
        r = run_child(HERE, ["--keys", str(keys), "--fill", str(args.fill), "--batch", str(args.batch),
                             "--tail", str(args.tail), *(["--config", config] if config else [])])
        assert isinstance(r, dict)
        table.add_row(
            *([config.partition(":")[0]] if config else []),
            f"{keys:,}", f"{r['events']:,}", str(r["batches"]), f"{r['median_s']:.2f}",
            f"{r['tail_events'] / r['tail_seconds']:,.0f}", f"{r['checkpoint_ms']:,.0f}", mb(r["delta_bytes"]),
            mb(r["full_bytes"]), mb(r["state_bytes"]), f"{r['state_rows'] or 0:,}", mb(r["peak_bytes"]),
            f"{r['restart_s']:.1f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
