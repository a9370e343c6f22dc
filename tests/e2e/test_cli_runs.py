"""`sparkstate run` as a user runs it: its own process and Spark; re-running resumes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def sparkstate(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [str(Path(sys.executable).with_name("sparkstate")), *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_run_prints_progress_and_results_then_resumes(tmp_path):
    first = sparkstate(tmp_path, "run", "running-sum", "--events", "30000", "--merchants", "500", "--max-batch", "10000")
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert "batch 0" in out and "30,000/30,000" in out  # a progress line per micro-batch
    assert "status" in out and "complete" in out and "30,000" in out  # the summary
    assert "top 10 merchant_id by total" in out  # the results
    assert (tmp_path / ".sparkstate" / "running-sum" / "checkpoint" / "sparkstate.json").exists()

    again = sparkstate(tmp_path, "run", "running-sum", "--events", "30000", "--merchants", "500", "--max-batch", "10000")
    assert again.returncode == 0, again.stderr
    assert "already ran to the end" in again.stdout

    changed = sparkstate(tmp_path, "run", "running-sum", "--events", "40000", "--merchants", "500")
    assert changed.returncode == 1
    message = " ".join(changed.stderr.split())
    assert "the source changed (events 30000 -> 40000)" in message and "--fresh" in message
