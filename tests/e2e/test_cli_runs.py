"""`sparkstate run` as a user runs it: its own process and Spark; re-running resumes;
`sparkstate checkpoints` lists what the run checkpointed and `sparkstate report` plots it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path


def sparkstate(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [str(Path(sys.executable).with_name("sparkstate")), *args]
    env = {**os.environ, "COLUMNS": "250"}  # rich's width when the output is not a terminal
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)


def interrupted(cwd: Path, until: Callable[[str], bool], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``sparkstate`` as from a terminal and press Ctrl-C (SIGINT to its process group)
    once ``until(output so far)`` holds."""
    cmd = [str(Path(sys.executable).with_name("sparkstate")), *args]
    env = {**os.environ, "COLUMNS": "250"}
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                start_new_session=True)
        timer = threading.Timer(timeout, os.killpg, (proc.pid, signal.SIGKILL))
        timer.start()
        out, pressed = [], False
        try:
            for line in proc.stdout:
                out.append(line)
                if not pressed and until("".join(out)):
                    os.killpg(proc.pid, signal.SIGINT)
                    pressed = True
            proc.wait()
        finally:
            timer.cancel()
        err.seek(0)
        return subprocess.CompletedProcess(cmd, proc.returncode, "".join(out), err.read())


def test_run_prints_progress_and_results_then_resumes(tmp_path):
    first = sparkstate(tmp_path, "run", "running-sum", "--events", "30000", "--merchants", "500", "--max-batch", "10000")
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert "batch 0" in out and "30,000/30,000" in out  # a progress line per micro-batch
    assert "status" in out and "complete" in out and "30,000" in out  # the summary
    assert "top 10 merchant_id by total" in out  # the results
    assert (tmp_path / ".sparkstate" / "running-sum" / "checkpoint" / "sparkstate.json").exists()
    # the output folder is recorded as the job's, so that --fresh may delete it
    assert '"job": "running-sum"' in (tmp_path / ".sparkstate" / "running-sum" / "output" / "_sparkstate.json").read_text()
    progress = [ln for ln in out.splitlines() if ln.startswith("batch ")]
    assert len(progress) == 3 and all(" | checkpoint " in ln and " written" in ln for ln in progress)
    summary = {ln.split("│")[1].strip(): ln.split("│")[2].strip() for ln in out.splitlines() if ln.count("│") == 3}
    assert summary["checkpoint duration"].startswith("mean ") and "(3 checkpoints)" in summary["checkpoint duration"]
    assert summary["checkpoint size"].startswith("delta ") and "full " in summary["checkpoint size"]

    listed = sparkstate(tmp_path, "checkpoints", "running-sum")
    assert listed.returncode == 0, listed.stderr
    rows = [ln.split("│")[1:-1] for ln in listed.stdout.splitlines() if ln.count("│") == 8]
    assert [r[0].strip() for r in rows] == ["0", "1", "2"]
    assert all(r[2].strip().endswith(" ms") and r[6].strip().startswith("incremental") for r in rows)
    missing = sparkstate(tmp_path, "checkpoints", "rate-limit")
    assert missing.returncode == 1 and "does not exist" in missing.stderr

    report = sparkstate(tmp_path, "report", "running-sum")
    assert report.returncode == 0, report.stderr
    folder = tmp_path / ".sparkstate" / "running-sum" / "report"
    assert "3 batches" in report.stdout and f"report: {folder.relative_to(tmp_path) / 'report.html'}" in report.stdout
    page = (folder / "report.html").read_text()
    assert '"numRecordsIn": 30000' in page and "uPlot" in page and "<script src=" not in page  # self-contained
    assert sorted(p.name for p in folder.glob("*.png")) == sorted(f"{c}.png" for c in (
        "throughput", "batch-duration", "event-time-lag", "state-size", "state-entries", "checkpoint-duration",
        "checkpoint-size", "side-outputs", "input-waiting"))
    assert all((folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for name in os.listdir(folder) if name.endswith(".png"))
    assert sparkstate(tmp_path, "report", "rate-limit").returncode == 1

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
        # a socket never ends: Ctrl-C stops the run (with its summary), and the next run would resume
        # the three lines may come in one micro-batch or two: wait for the dead letter and m1's second row
        def shown(text: str) -> bool:
            cells = re.sub(r"[\s│┃]+", " ", text)
            return "1 dead letters" in " ".join(text.split()) and re.search(r"m1 2 7\.0", cells) is not None

        run = interrupted(tmp_path, shown, "run", "running-sum", "--source",
                          f"socket://127.0.0.1:{server.port}", "--sink", "console")
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert "interrupted" in run.stdout
    out = " ".join(run.stdout.split())
    assert f"source: socket 127.0.0.1:{server.port} (at-most-once: lines sent while the job is down are lost)" in out
    assert "1 dead letters" in out  # the batch's progress line
    assert re.search(r"dead letters\W+1 rows \(side output\)", out)  # the summary
    cells = re.sub(r"[\s│┃]+", " ", run.stdout)  # the console tables' cells, as rich wrapped them
    assert re.search(r"m1 2 7\.0", cells)  # the console sink's rows, and the dead letter beside them
    assert re.search(r"dead_letters: batch \d+: 1 rows .* oops not valid JSON: Expecting value at character 1", cells)
    assert (tmp_path / ".sparkstate" / "running-sum-socket" / "checkpoint" / "sparkstate.json").exists()
