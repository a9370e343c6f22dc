"""`sparkstate savepoint --stop` as a user runs it: a job running in its own process stops
with a savepoint, and `sparkstate run --from-savepoint` on another partition count and state
backend finishes it with the output of an uninterrupted run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from spark_helpers import committed_rows, harness_like_spark, same_rows

GENERATOR = ["--events", "20000", "--merchants", "200"]


def sparkstate(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [str(Path(sys.executable).with_name("sparkstate")), *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "250"})


def test_stop_with_savepoint_then_restore_on_another_backend_and_partitions(tmp_path):
    from sparkstate.jobs import get_job

    cmd = [str(Path(sys.executable).with_name("sparkstate")), "run", "running-sum", *GENERATOR,
           "--max-batch", "250", "--rate", "100", "--quiet"]
    log = (tmp_path / "run.out").open("w+")
    running = subprocess.Popen(cmd, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "COLUMNS": "250"})
    commits = tmp_path / ".sparkstate" / "running-sum" / "checkpoint" / "commits"
    try:
        deadline = time.monotonic() + 300
        while not (commits / "1").exists():
            assert running.poll() is None and time.monotonic() < deadline, Path(log.name).read_text()
            time.sleep(0.2)
        stop = sparkstate(tmp_path, "savepoint", "running-sum", "--stop")
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert running.wait(timeout=120) == 0
    finally:
        if running.poll() is None:
            running.kill()
    said = " ".join(stop.stdout.split())
    assert "asked it for a savepoint and to stop after its next committed batch" in said
    assert "the job │ stopped" in said or "stopped" in said
    (location,) = (tmp_path / ".sparkstate" / "savepoints").glob("running-sum-b*")
    assert f"--from-savepoint {location} --fresh" in said
    assert "stopped with savepoint" in Path(log.name).read_text()
    saved = json.loads((location / "_savepoint.json").read_text())
    assert 0 < saved["source_offset"]["offset"] < 20000  # stopped mid-stream
    first = committed_rows(tmp_path / ".sparkstate" / "running-sum" / "output")

    restored = sparkstate(tmp_path, "run", "running-sum", *GENERATOR, "--from-savepoint", str(location),
                          "--partitions", "1", "--state-backend", "hashmap", "--fresh")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert f"restoring savepoint {location}" in restored.stdout
    rest = committed_rows(tmp_path / ".sparkstate" / "running-sum" / "output")
    assert len(rest) == 20000 - saved["source_offset"]["offset"]
    expected = harness_like_spark(get_job("running-sum").job(events=20000, merchants=200), 20000)
    same_rows(first + rest, expected)
