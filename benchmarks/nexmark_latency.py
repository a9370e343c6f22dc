"""Nexmark latency: q5 and q7 at a fixed input rate, on sparkstate and Flink SQL 2.3.

    python benchmarks/nexmark_latency.py                  # 10,000 events/s for 90 s, q5 and q7, both systems
    python benchmarks/nexmark_latency.py --rate 10000 --seconds 60 --queries 7 --systems sparkstate

A writer publishes the Nexmark stream into a folder as it happens: every second, one file of
the second's events (``rate`` of them, all types), written beside the folder's files and
renamed in, so a reader never sees half a file. Event time is the wall clock (the
generator's ``start_ms`` is the writer's start), so a window's end is also a wall-clock time.
Each system reads the folder as it grows (sparkstate: Spark's file source, every new file a
micro-batch can take; Flink SQL: its filesystem connector, ``source.monitor-interval`` 1 s),
with the settings of ``benchmarks/nexmark.py`` (parallelism 2, RocksDB, checkpoints on;
Flink's mini-batch 2 s).

What is measured, per result row: the time from the *arrival* of the event that completes
the result to the result's emission. A window ``[start, end)`` is complete when the
watermark passes ``end - 1``: with the reference's 4 s bound, when an event at ``end +
4,000`` ms or later has been read; that event arrived when its file was published. The result
is emitted when the query's last operator produces the row: sparkstate stamps it in the
``ProcessWindowFunction`` that makes the row, Flink SQL with ``CURRENT_ROW_TIMESTAMP()`` in the
query's last projection, so neither figure includes the sink's commit. Results of the first
``--warmup`` seconds (start-up, catching up) are left out. The figures are p50 and p99 over
the rest, with the count of results they hold.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_common import FLINK_PYTHON

HERE = Path(__file__).resolve()
SYSTEMS = ("sparkstate", "flink")
QUERIES = (5, 7)
#: the reference's watermark bound: a window is complete once an event this far past its end is read
WATERMARK_MS = 4_000


def publish(folder: Path, rate: int, seconds: int, start_ms: int, published: dict[int, int], stop: threading.Event) -> None:
    """Write second ``k`` of the stream (events ``[k * rate, (k + 1) * rate)``, event times
    ``[start_ms + k s, start_ms + (k + 1) s)``) as ``part-k.json`` once that second has passed
    on the wall clock; ``published[k]`` is when (epoch ms)."""
    from sparkstate.connectors.nexmark import NexmarkBids, json_lines

    generator = NexmarkBids(events=rate * seconds, events_per_second=rate, start_ms=start_ms)
    for k in range(seconds):
        due = (start_ms + (k + 1) * 1000) / 1000
        if stop.wait(max(0.0, due - time.time())):
            return
        lines = json_lines(generator, k * rate, (k + 1) * rate)
        hidden = folder / f".part-{k:05d}.json.tmp"
        hidden.write_text("\n".join(lines.to_pylist()))
        os.rename(hidden, folder / f"part-{k:05d}.json")
        published[k] = int(time.time() * 1000)


def latencies(results: list[tuple[int, int]], start_ms: int, published: dict[int, int], warmup_s: int) -> list[int]:
    """Each result's ``(window end, emitted)`` as ms from the arrival of the event that completed it."""
    out = []
    for end, emitted in results:
        k = (end + WATERMARK_MS - start_ms) // 1000  # the file holding event time end + 4 s
        if k < warmup_s or k not in published:
            continue
        out.append(emitted - published[k])
    return out


def percentile(values: list[int], p: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


# ------------------------------------------------------------------ sparkstate (a child process)

def sparkstate_results(query: int, folder: str, seconds: float) -> list[tuple[int, int]]:
    """Run nexmark-q5 or q7 over the growing ``folder`` for ``seconds``: each result's window
    end and the wall time its row was made (epoch ms)."""
    from sparkstate import MemorySink
    from sparkstate.connectors.nexmark import nexmark_files
    from sparkstate.jobs import JOBS
    from sparkstate.runtime.session.classic import get_spark

    if query == 5:
        from sparkstate.jobs.nexmark.q5 import HottestAuctions as Made
    else:
        from sparkstate.jobs.nexmark.q7 import AtHighestPrice as Made

    class Stamped(Made):  # type: ignore[misc, valid-type]
        """The query's rows, each with its window's end and when it was made."""

        def process(self, key, context, elements):
            now = int(time.time() * 1000)
            return [(context.window.end, now) for _ in super().process(key, context, elements)]

    job = JOBS[f"nexmark-q{query}"].job(events=1)
    job = job.source(nexmark_files(folder, "bid", files_per_batch=1000), watermark=job.watermark)
    job = job.aggregate(job.window_function, window_function=Stamped(), output_schema="window_end bigint, emitted bigint")
    spark = get_spark(parallelism=2, log_file=Path(tempfile.gettempdir()) / "sparkstate-bench-latency.log")
    sink = MemorySink()
    deadline = time.time() + seconds
    work = tempfile.mkdtemp(prefix="sparkstate-bench-latency-")
    try:
        result = job.sink(sink).with_settings(parallelism=2, trigger_interval="0 seconds").run(
            checkpoint_dir=work, spark=spark, until=lambda r: time.time() > deadline, timeout=seconds + 120)
        print(f"{result.batches} micro-batches, {result.events:,} events", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return [(r["window_end"], r["emitted"]) for r in sink.rows()]


# ------------------------------------------------------------------ the run

def run_system(system: str, query: int, rate: int, seconds: int, warmup: int) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="sparkstate-latency-"))
    out = Path(tempfile.mkdtemp(prefix="sparkstate-latency-out-"))
    start_ms = (int(time.time()) + 1) * 1000
    published: dict[int, int] = {}
    stop = threading.Event()
    writer = threading.Thread(target=publish, args=(folder, rate, seconds, start_ms, published, stop), daemon=True)
    if system == "flink":
        args = [str(FLINK_PYTHON), str(HERE.parent / "flink" / "nexmark.py"), f"q{query}", "--dir", str(folder),
                "--events", "0", "--latency", str(out), "--seconds", str(seconds)]
    else:
        args = [sys.executable, str(HERE), "--child", str(query), str(folder), str(seconds), str(out / "results.json")]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    writer.start()
    try:
        _, err = proc.communicate(timeout=seconds + 300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    finally:
        stop.set()
        writer.join()
    try:
        results = [tuple(r) for r in json.loads((out / "results.json").read_text())]
    except (OSError, ValueError):
        return {"system": system, "query": query, "failed": " ".join(err.split())[-300:]}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    values = latencies(results, start_ms, published, warmup)
    if not values:
        return {"system": system, "query": query, "failed": f"no result after the first {warmup} s"}
    return {"system": system, "query": query, "results": len(values),
            "p50_ms": percentile(values, 0.5), "p99_ms": percentile(values, 0.99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=10_000, help="events/s of the input (default 10,000)")
    parser.add_argument("--seconds", type=int, default=90, help="seconds of input (default 90)")
    parser.add_argument("--warmup", type=int, default=30, help="seconds of results left out (default 30)")
    parser.add_argument("--queries", default="5,7", help="comma-separated, of q5 and q7")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--child", nargs=4, metavar=("QUERY", "DIR", "SECONDS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        query, folder, seconds, out = args.child
        Path(out).write_text(json.dumps(sparkstate_results(int(query), folder, float(seconds))))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    rows = []
    for query in [int(q.strip().removeprefix("q")) for q in args.queries.split(",") if q.strip()]:
        for system in [s.strip() for s in args.systems.split(",") if s.strip()]:
            if system == "flink" and not FLINK_PYTHON.exists():
                rows.append({"system": system, "query": query, "failed": "bash benchmarks/flink/setup.sh first"})
                continue
            console.print(f"q{query} on {system}: {args.rate:,} events/s for {args.seconds} s ...")
            rows.append(run_system(system, query, args.rate, args.seconds, args.warmup))
            console.print(f"  {rows[-1]}")
    table = Table(title=f"Nexmark latency at {args.rate:,} events/s, {args.seconds} s, the first {args.warmup} s left out",
                  title_justify="left")
    for column in ("query", "system", "results", "p50", "p99", "note"):
        table.add_column(column, justify="right" if column in ("results", "p50", "p99") else "left")
    for r in rows:
        table.add_row(f"q{r['query']}", r["system"], f"{r.get('results', 0):,}",
                      f"{r['p50_ms']:,} ms" if "p50_ms" in r else "-", f"{r['p99_ms']:,} ms" if "p99_ms" in r else "-",
                      r.get("failed", ""))
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
