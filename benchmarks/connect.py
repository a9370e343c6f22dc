"""Spark Connect benchmark: W1 and W2 run from a Spark Connect client and in Classic mode, in
one run on the same machine.

    python benchmarks/connect.py                 # 1,000,000 events; starts and stops its own server
    python benchmarks/connect.py --events 200000

W1 (running count and sum per merchant, every event emitted) and W2 (count and sum per merchant
per 1-minute event-time window, 5 s out-of-orderness, the Python path): UPI payments over
100,000 merchants, 500,000-event batches, RocksDB, 2 partitions, noop sink.

The Classic rows run in a driver process of their own (``local[2]``). The Connect rows run in a
client process of their own against a Connect server the benchmark starts with
``scripts/connect.sh`` (``local[2]``, the same settings): the server plans and runs the query,
the client watches it. Each row is a warm-up run, then the measured one; the first batch's time
is the measured run's (the warm-up has started the server's Python workers). Peak memory is the
resident memory of every process the row uses: the driver's tree (JVM and Python workers) for
Classic, the client's tree plus the server's tree for Connect.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path

from bench_common import mb, run_child

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]


def _job(name: str, events: int, keys: int, max_batch: int):
    from sparkstate import NoopSink, UpiPayments
    from sparkstate.jobs import running_sum, upi_per_minute

    source = UpiPayments(events=events, merchants=keys, max_batch=max_batch, seed=11)
    build = running_sum.build if name == "W1" else upi_per_minute.build
    job = build(source).sink(NoopSink()).with_settings(parallelism=2, trigger_interval="0 seconds")
    return job.with_settings(window_path="python") if name == "W2" else job


def _server_pid(folder: str) -> int | None:
    try:
        return int(Path(folder, "server.pid").read_text())
    except (OSError, ValueError):
        return None


def child(args: argparse.Namespace) -> dict:
    from sparkstate.metrics.memory import tree_rss_bytes
    from sparkstate.runtime.session import get_spark

    spark = get_spark(remote=args.remote or None, parallelism=2,
                      log_file=Path(tempfile.gettempdir()) / "sparkstate-bench-connect.log")
    server = _server_pid(args.server_dir) if args.remote else None
    work = Path(tempfile.mkdtemp(prefix="sparkstate-bench-connect-"))
    _job(args.job, args.warmup, args.keys, args.max_batch).run(checkpoint_dir=work / "warmup", spark=spark)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, tree_rss_bytes() + (tree_rss_bytes(server) if server else 0))
            stop.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = _job(args.job, args.events, args.keys, args.max_batch).run(checkpoint_dir=work / "measured", spark=spark)
    finally:
        stop.set()
        sampler.join()
    assert result.completed and result.events == args.events, (result.completed, result.events)
    return {"events": result.events, "seconds": result.seconds, "first_batch": result.first_batch_seconds,
            "steady": result.steady_events_per_second, "peak_bytes": peak}


def _connect(action: str, folder: str, port: int) -> str:
    done = subprocess.run(["bash", "scripts/connect.sh", action, folder], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "SPARKSTATE_CONNECT_PORT": str(port)})
    if done.returncode != 0:
        raise SystemExit(f"scripts/connect.sh {action} failed:\n{done.stdout}{done.stderr}")
    return done.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--max-batch", type=int, default=500_000)
    parser.add_argument("--warmup", type=int, default=100_000)
    parser.add_argument("--port", type=int, default=15012, help="the benchmark's Connect server's port")
    parser.add_argument("--job", default="W1", help=argparse.SUPPRESS)
    parser.add_argument("--remote", default="", help=argparse.SUPPRESS)
    parser.add_argument("--server-dir", default="", help=argparse.SUPPRESS)
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
    folder = tempfile.mkdtemp(prefix="sparkstate-bench-connect-server-")
    rows = {}
    try:
        for job in ("W1", "W2"):
            console.print(f"  running {job} in Classic mode ...")
            rows[(job, "Classic, local[2]")] = run_child(HERE, [*common, "--job", job])
            console.print(f"  running {job} over Spark Connect (starting a server) ...")
            url = _connect("start", folder, args.port)
            try:
                rows[(job, "Connect client, server local[2]")] = run_child(
                    HERE, [*common, "--job", job, "--remote", url, "--server-dir", folder])
            finally:
                _connect("stop", folder, args.port)  # each job its own server: none warmer than the other
    finally:
        _connect("stop", folder, args.port)
    table = Table(title=f"W1 and W2 over Spark Connect and in Classic mode: {args.events:,} events, {args.keys:,} keys, "
                        f"{args.max_batch:,}-event batches, RocksDB, 2 partitions, noop sink (each row: own processes, "
                        "after a warm-up run)", title_justify="left")
    for col in ("job", "mode", "events/s", "after 1st batch", "1st batch s", "wall s", "peak memory (all processes)"):
        table.add_column(col, justify="left" if col in ("job", "mode") else "right")
    for (job, mode), r in rows.items():
        table.add_row(job, mode, f"{r['events'] / r['seconds']:,.0f}",
                      f"{r['steady']:,.0f}" if r.get("steady") else "-", f"{r['first_batch']:.2f}",
                      f"{r['seconds']:.1f}", mb(r["peak_bytes"]))
    console.print(table)
    for job in ("W1", "W2"):
        classic, remote = rows[(job, "Classic, local[2]")], rows[(job, "Connect client, server local[2]")]
        ratio = (remote["events"] / remote["seconds"]) / (classic["events"] / classic["seconds"]) - 1
        console.print(f"{job}: Connect vs Classic {ratio:+.1%} events/s, first batch "
                      f"{remote['first_batch'] - classic['first_batch']:+.2f} s")


if __name__ == "__main__":
    main()
