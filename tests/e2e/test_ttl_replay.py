"""Replay determinism of TTL: a run killed after a batch's state is committed and before its
sink commits replays the batch on restart with the processing time Spark recorded for it, so
it makes the same expiry decisions as the first attempt, and the whole output is that of an
uninterrupted run at those times (the harness, driven with them).

The TTL (20 s) is longer than the gap between two batches (1 s, a few on a busy machine) and
the replay runs more than a TTL after the killed batch's time (the test waits if the restart
is quicker): had the replay judged expiry by the wall clock, the values the killed batch read
would have expired.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sparkstate.fault_points import ENV, SINK_ROWS_WRITTEN

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import ttl_replay_job  # noqa: E402


def _start(out: Path, checkpoint: Path, faults: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, ENV: str(faults), "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(HERE / "ttl_replay_job.py"), str(out), str(checkpoint)],
                            env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)


def _wait(condition, seconds: float, what: str, proc: subprocess.Popen, log: Path) -> None:
    until = time.monotonic() + seconds
    while not condition():
        if proc.poll() is not None or time.monotonic() > until:
            raise AssertionError(f"{what}: not reached (exit {proc.poll()}); log:\n{log.read_text()[-3000:]}")
        time.sleep(0.02)


def test_a_batch_replayed_after_a_kill_decides_expiry_as_its_first_attempt(tmp_path):
    out, checkpoint, faults, log = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "faults", tmp_path / "log"
    out.mkdir(), faults.mkdir()
    proc = _start(out, checkpoint, faults, log)
    try:
        # the second batch, not the first: the first batch's time is taken long before it runs
        _wait(lambda: (out / "batch-1.json").exists(), 300, "the second batch", proc, log)
        (faults / f"{SINK_ROWS_WRITTEN}.armed").touch()  # the next batch holds there
        _wait(lambda: (faults / f"{SINK_ROWS_WRITTEN}.hit").exists(), 120, "the fault point", proc, log)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    attempts = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    killed = attempts[-1]["batch"]
    assert killed >= 2 and not (out / f"batch-{killed}.json").exists()
    (faults / f"{SINK_ROWS_WRITTEN}.hit").unlink()
    # the replay must run more than a TTL after the batch's time (a restart takes about that)
    replay_after = (attempts[-1]["rows"][0]["pt"] + ttl_replay_job.TTL_MS) / 1000
    time.sleep(max(0.0, replay_after - time.time()))
    rerun = _start(out, checkpoint, faults, log)
    assert rerun.wait(timeout=300) == 0, log.read_text()[-3000:]

    attempts = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    first, replay = [a for a in attempts if a["batch"] == killed][:2]
    by_v = lambda rows: sorted(rows, key=lambda r: r["v"])  # noqa: E731
    assert by_v(replay["rows"]) == by_v(first["rows"])
    # the replay ran long after the batch's time, yet kept the values the first attempt kept
    pt = first["rows"][0]["pt"]
    assert replay["wall_ms"] - pt > ttl_replay_job.TTL_MS
    assert all(r["last"] is not None for r in replay["rows"])

    # the committed output is an uninterrupted run's at the batches' processing times
    rows = [r for p in sorted(out.glob("batch-*.json")) for r in json.loads(p.read_text())]
    times = dict(sorted({(r["v"] // 10, r["pt"]) for r in rows}))
    assert sorted(times) == list(range(len(ttl_replay_job.BATCHES)))
    h = ttl_replay_job.job().harness()
    expected = [row for i, batch in enumerate(ttl_replay_job.BATCHES)
                for row in h.process_batch(batch, processing_time=times[i])]
    assert by_v(rows) == by_v(expected)
