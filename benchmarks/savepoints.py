"""Savepoint benchmark: taking and restoring a savepoint, against the checkpoint of the same state.

    python benchmarks/savepoints.py                  # 1,000,000 keys (a few minutes on 2 cores)
    python benchmarks/savepoints.py --keys 10000000  # 10,000,000 keys (tens of minutes)
    python benchmarks/savepoints.py --quick          # 100,000 keys, a smoke run

Two states, each built by running a seed job in its own process (2 local cores, RocksDB):

* ``running-sum``: ``sparkstate.jobs.running_sum`` on the UPI generator with ``--keys``
  merchants and three times as many events, so almost every merchant holds state (a count and a
  total per key).
* ``upi-per-minute``: the 1-minute tumbling windows of ``sparkstate.jobs.upi_per_minute`` on the
  Python window path, stopped mid-stream (half its input read): the open windows of
  ``--window-merchants`` merchants.

For each: the savepoint of the last committed batch (``take_savepoint``): write time, size, MB/s
and keys/s (keys: the records the savepoint holds, i.e. merchants, or windows for the window
job); the checkpoint's size on disk; then the restore time to the first committed batch of a new
checkpoint from the savepoint at 1, 2 and 4 partitions (hashmap and RocksDB), and Spark's own
restore: the same job restarted from its checkpoint, to its first committed batch. Restores read
10,000 new events in that batch. Times are wall clock from ``Job.run`` to the first commit (query
start, state load, the batch); "1st batch s" is Spark's own figure for that batch. The machine
is shared: figures vary by tens of percent from run to run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench_common import mb, run_child

HERE = Path(__file__).resolve()
NEW_EVENTS = 10_000


# --------------------------------------------------------------------------- child side


def _session():
    from sparkstate.runtime.session.classic import get_spark

    return get_spark(parallelism=2, log_file=Path(tempfile.gettempdir()) / "sparkstate-bench-spark.log")


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _built_events(kind: str, args: argparse.Namespace) -> int:
    """Events read while building the state; every run's source holds NEW_EVENTS more."""
    return 3 * args.keys if kind == "running-sum" else args.window_events // 2


def _job(kind: str, args: argparse.Namespace, backend: str = "rocksdb", partitions: int = 2):
    """The job on a generator of ``_built_events + NEW_EVENTS`` events: the build stops after the
    first part (so the checkpoint can be restarted with the same source), restores read the rest."""
    from sparkstate import NoopSink, UpiPayments

    built = _built_events(kind, args)
    events = built + NEW_EVENTS
    if kind == "running-sum":
        from sparkstate.jobs.running_sum import build

        job = build(UpiPayments(events=events, merchants=args.keys, max_batch=min(args.max_batch, args.keys), seed=11))
    else:
        from sparkstate.jobs.upi_per_minute import build

        gen = UpiPayments(events=events, merchants=args.window_merchants, max_batch=built,
                          events_per_second=args.window_events / 200, seed=11)
        job = build(gen).with_settings(window_path="python")
    return job.sink(NoopSink()).with_settings(state_backend=backend, parallelism=partitions,
                                              trigger_interval="0 seconds")


def _first_commit(job, spark, ckpt: Path, **kwargs) -> dict:
    started = time.monotonic()
    result = job.run(checkpoint_dir=ckpt, spark=spark, until=lambda r: r.batches >= 1, **kwargs)
    wall = time.monotonic() - started
    first = result.progress[0]["durationMs"]["triggerExecution"] / 1000 if result.progress else None
    return {"wall": wall, "first_batch": first}


def child_state(args: argparse.Namespace) -> dict:
    """Build one state, take its savepoint, restore it in every way, restart its checkpoint."""
    from sparkstate.runtime.savepoints.take import take_savepoint

    spark = _session()
    work = Path(tempfile.mkdtemp(prefix="sparkstate-bench-sp-", dir=args.work))
    kind = args.kind
    try:
        built_events = _built_events(kind, args)
        ckpt = work / "checkpoint"
        started = time.monotonic()
        built = _job(kind, args).run(checkpoint_dir=ckpt, spark=spark, until=lambda r: r.events >= built_events)
        build_s = time.monotonic() - started
        if built.events != built_events:
            raise SystemExit(f"the build read {built.events} events, not {built_events}: the comparison needs the "
                             f"last {NEW_EVENTS} unread; use another --max-batch")
        checkpoint_bytes = _dir_bytes(ckpt / "state") if (ckpt / "state").exists() else _dir_bytes(ckpt)
        meta = take_savepoint(str(ckpt), target=str(work / "savepoint"), spark=spark)
        out = {
            "kind": kind, "events": built_events, "build_s": build_s, "keys": meta["keys"], "bytes": meta["bytes"],
            "files": len(meta["files"]), "write_s": meta["seconds"], "checkpoint_bytes": checkpoint_bytes,
            "restores": [],
        }
        for backend in args.backends.split(","):
            for partitions in (1, 2, 4):
                r = _first_commit(_job(kind, args, backend, partitions), spark,
                                  work / f"restored-{backend}-{partitions}", from_savepoint=str(work / "savepoint"))
                out["restores"].append({"from": "savepoint", "backend": backend, "partitions": partitions, **r})
                shutil.rmtree(work / f"restored-{backend}-{partitions}", ignore_errors=True)
        r = _first_commit(_job(kind, args), spark, ckpt)
        out["restores"].append({"from": "checkpoint (Spark)", "backend": "rocksdb", "partitions": 2, **r})
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------- parent side



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000, help="merchants of the running-sum state")
    parser.add_argument("--max-batch", type=int, default=1_000_000, help="events per micro-batch while building")
    parser.add_argument("--window-merchants", type=int, default=100_000)
    parser.add_argument("--window-events", type=int, default=1_000_000, help="the window job reads half of them")
    parser.add_argument("--skip-window", action="store_true")
    parser.add_argument("--backends", default="hashmap,rocksdb", help="state backends to restore into")
    parser.add_argument("--quick", action="store_true", help="100,000 keys; window job on 10,000 merchants")
    parser.add_argument("--work", default=None, help="where the checkpoints go (default: the temp folder)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kind", default="running-sum", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        print(json.dumps(child_state(args)))
        return
    if args.quick:
        args.keys, args.window_merchants, args.window_events = 100_000, 10_000, 200_000

    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, width=max(140, Console().width))
    common = ["--backends", args.backends, "--keys", str(args.keys), "--max-batch", str(args.max_batch), "--window-merchants",
              str(args.window_merchants), "--window-events", str(args.window_events)]
    if args.work:
        common += ["--work", args.work]
    kinds = ["running-sum"] + ([] if args.skip_window else ["upi-per-minute"])
    console.print(f"Savepoints: {os.cpu_count()} cores seen, Spark local[2], RocksDB while building; shared machine")
    results = []
    for kind in kinds:
        console.print(f"  {kind}: building the state, taking the savepoint, restoring ...")
        results.append(run_child(HERE, [*common, "--kind", kind]))

    write = Table(title="Savepoint write (take_savepoint of the last committed batch) vs the checkpoint",
                  title_justify="left")
    for col in ("state", "events read", "build s", "keys", "files", "savepoint size", "write s", "MB/s", "keys/s",
                "checkpoint size"):
        write.add_column(col, justify="left" if col == "state" else "right")
    for r in results:
        write.add_row(
            r["kind"], f"{r['events']:,}", f"{r['build_s']:.1f}", f"{r['keys']:,}", f"{r['files']:,}", mb(r["bytes"]),
            f"{r['write_s']:.1f}", f"{r['bytes'] / 2**20 / r['write_s']:,.1f}", f"{r['keys'] / r['write_s']:,.0f}",
            mb(r["checkpoint_bytes"]),
        )
    console.print(write)
    restore = Table(title=f"Restore to the first committed batch (which also reads {NEW_EVENTS:,} new events)",
                    title_justify="left")
    for col in ("state", "from", "backend", "partitions", "wall s", "1st batch s"):
        restore.add_column(col, justify="left" if col in ("state", "from", "backend") else "right")
    for r in results:
        for x in r["restores"]:
            restore.add_row(r["kind"], x["from"], x["backend"], str(x["partitions"]), f"{x['wall']:.1f}",
                            "-" if x["first_batch"] is None else f"{x['first_batch']:.1f}")
    console.print(restore)


if __name__ == "__main__":
    main()
