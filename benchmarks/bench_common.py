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
