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


def test_run_on_a_socket_labels_it_at_most_once_and_counts_dead_letters(tmp_path):
    import json
    import re

    from line_server import LineServer

    with LineServer() as server:
        server.send(json.dumps({"merchant_id": "m1", "amount": 5}), "oops", json.dumps({"merchant_id": "m1", "amount": 2}))
        # a socket never ends: the run stops at --timeout, and the next run would resume
        run = sparkstate(tmp_path, "run", "running-sum", "--source", f"socket://127.0.0.1:{server.port}",
                         "--sink", "console", "--timeout", "60")
    assert run.returncode == 0, run.stderr
    out = " ".join(run.stdout.split())
    assert f"source: socket 127.0.0.1:{server.port} (at-most-once: lines sent while the job is down are lost)" in out
    assert "1 dead letters" in out  # the batch's progress line
    assert re.search(r"dead letters\W+1 rows \(side output\)", out)  # the summary
    cells = re.sub(r"[\s│┃]+", " ", run.stdout)  # the console tables' cells, as rich wrapped them
    assert re.search(r"m1 2 7\.0", cells)  # the console sink's rows, and the dead letter beside them
    assert re.search(r"dead_letters: batch \d+: 1 rows .* oops not valid JSON: Expecting value at character 1", cells)
    assert (tmp_path / ".sparkstate" / "running-sum-socket" / "checkpoint" / "sparkstate.json").exists()
