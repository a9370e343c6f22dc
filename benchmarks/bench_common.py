"""What the benchmarks share: each measurement in a child process, warmed up, memory sampled."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path


def measure(once: Callable[[int, Path], dict], events: int, warmup: int) -> dict:
    """An unmeasured warm-up run of ``warmup`` events, then the measured run with peak memory."""
    from sparkstate.metrics.memory import PeakMemory

    work = Path(tempfile.mkdtemp(prefix="sparkstate-bench-"))
    try:
        once(min(warmup, events), work / "warmup")
        with PeakMemory() as mem:
            result = once(events, work / "measured")
        result["peak_bytes"] = mem.peak_bytes
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_child(script: Path, args: list[str]) -> dict | list:
    """Run ``script --child ARGS`` in a fresh process; its last stdout line is the JSON result."""
    proc = subprocess.run([sys.executable, str(script), "--child", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark step failed: {' '.join(args)}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mb(n: float | None) -> str:
    """Bytes as megabytes for a table ("-" when unknown)."""
    return "-" if n is None else f"{n / 2**20:,.1f} MB"


def progress_until_read(query, events: int) -> list[dict]:
    """The progress of a running Spark query (one of sparkstate's sources) until its source has
    read ``events`` offsets; the query is stopped then, or on failure."""
    import time

    from sparkstate.runtime.spark_sources import source_offset

    try:
        while True:
            progress = [p if isinstance(p, dict) else json.loads(p.json) for p in query.recentProgress]
            if progress and source_offset(progress[-1]["sources"][0]) == events:
                return progress
            if not query.isActive:
                raise RuntimeError(f"query stopped: {query.exception()}")
            time.sleep(0.05)
    finally:
        query.stop()
