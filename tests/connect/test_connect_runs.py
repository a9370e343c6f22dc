"""sparkstate as a Spark Connect client, as a user runs it: `sparkstate run --remote`,
``SPARK_REMOTE``, savepoints between Connect and local mode, what is refused up front, and
a client and a server killed mid-stream."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from spark_helpers import committed_rows, harness_like_spark, same_rows

from sparkstate import (
    Job,
    MemorySink,
    ParquetSink,
    TumblingEventTimeWindows,
    UpiPayments,
    WatermarkStrategy,
    agg,
)
from sparkstate.errors import JobDefinitionError

GENERATOR = ["--events", "20000", "--merchants", "200"]
SPARKSTATE = str(Path(sys.executable).with_name("sparkstate"))


def sparkstate(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SPARKSTATE, *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "250", **(env or {})})


def started(cwd: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    """`sparkstate run` in a process group of its own; its output goes to a file."""
    log = cwd / f"run-{time.monotonic_ns()}.out"
    return subprocess.Popen([SPARKSTATE, *args], cwd=cwd, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            env={**os.environ, "COLUMNS": "250"}, start_new_session=True), log


def wait_for(path: Path, process: subprocess.Popen, log: Path, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)


def expected_rows(events: int = 20000) -> list[dict]:
    from sparkstate.jobs import get_job

    return harness_like_spark(get_job("running-sum").job(events=events, merchants=200), events)


def test_remote_and_spark_remote_runs_give_the_rows_of_a_local_run(tmp_path, connect_server):
    args = ["run", "running-sum", "--events", "6000", "--merchants", "200", "--max-batch", "2000", "--quiet"]
    local = sparkstate(tmp_path, *args, "--checkpoint", str(tmp_path / "local"))
    remote = sparkstate(tmp_path, *args, "--checkpoint", str(tmp_path / "remote"), "--remote", connect_server.url)
    variable = sparkstate(tmp_path, *args, "--checkpoint", str(tmp_path / "variable"),
                          env={"SPARK_REMOTE": connect_server.url})
    for done in (local, remote, variable):
        assert done.returncode == 0, done.stdout + done.stderr
    rows = committed_rows(tmp_path / "local" / "output")
    assert len(rows) == 6000
    same_rows(committed_rows(tmp_path / "remote" / "output"), rows)
    same_rows(committed_rows(tmp_path / "variable" / "output"), rows)


@pytest.mark.parametrize("taken, restored", [("connect", "local"), ("local", "connect")])
def test_a_savepoint_taken_in_one_mode_restores_in_the_other(tmp_path, connect_server, taken, restored):
    remote = {"connect": ["--remote", connect_server.url], "local": []}
    running, log = started(tmp_path, "run", "running-sum", *GENERATOR, "--max-batch", "250", "--rate", "100", "--quiet",
                           *remote[taken])
    try:
        wait_for(tmp_path / ".sparkstate" / "running-sum" / "checkpoint" / "commits" / "1", running, log)
        stop = sparkstate(tmp_path, "savepoint", "running-sum", "--stop")
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert running.wait(timeout=120) == 0, log.read_text()
    finally:
        if running.poll() is None:
            os.killpg(running.pid, signal.SIGKILL)
    (location,) = (tmp_path / ".sparkstate" / "savepoints").glob("running-sum-b*")
    first = committed_rows(tmp_path / ".sparkstate" / "running-sum" / "output")
    done = sparkstate(tmp_path, "run", "running-sum", *GENERATOR, "--from-savepoint", str(location), "--fresh",
                      "--partitions", "1", *remote[restored])
    assert done.returncode == 0, done.stdout + done.stderr
    rest = committed_rows(tmp_path / ".sparkstate" / "running-sum" / "output")
    assert 0 < len(first) < 20000 and len(first) + len(rest) == 20000
    same_rows(first + rest, expected_rows())


def _job(sink, late=None) -> Job:
    wm = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5))
    job = (Job("refused").source(UpiPayments(events=100, merchants=5), watermark=wm).key_by("merchant_id")
           .window(TumblingEventTimeWindows.of(timedelta(minutes=1))))
    if late is not None:
        job = job.side_output_late_data(late)
    return job.aggregate(agg.count("n")).sink(sink)


def test_what_cannot_work_over_connect_is_refused_before_spark_runs(spark, tmp_path, connect_server):
    with pytest.raises(JobDefinitionError, match="over Spark Connect.*client.*Hadoop"):
        _job(MemorySink()).run(checkpoint_dir="hdfs://127.0.0.1:1/checkpoint", spark=spark)
    with pytest.raises(JobDefinitionError, match="choose one"):
        _job(MemorySink()).run(checkpoint_dir=tmp_path / "c", master="local[1]", remote=connect_server.url)
    with pytest.raises(JobDefinitionError, match="s3a://bucket/late.*Spark Connect"):
        _job(MemorySink(), late=ParquetSink("s3a://bucket/late")).run(checkpoint_dir=tmp_path / "d", spark=spark)
    assert spark.streams.active == []
    assert not (tmp_path / "d").exists()


@pytest.fixture
def own_server(tmp_path):
    """A server of the test's own, which it kills (the suite's goes on)."""
    from connect_server import ConnectServer, free_port

    server = ConnectServer(tmp_path / "server", free_port())
    server.folder.mkdir()
    server.start()
    yield server
    server.stop()


def _recorded(checkpoint: Path) -> list[int]:
    """The batches a client's run recorded in the checkpoint (a query left running on the
    server by a client that died records none)."""
    log = checkpoint / "sparkstate" / "checkpoints.jsonl"
    return [json.loads(line)["batch_id"] for line in log.read_text().splitlines()] if log.exists() else []


def test_a_client_and_then_the_server_killed_mid_stream_leave_each_row_once(tmp_path, own_server):
    args = ["run", "running-sum", *GENERATOR, "--max-batch", "1000", "--checkpoint", str(tmp_path / "ck"),
            "--remote", own_server.url, "--quiet"]
    runs = []
    try:
        # the client dies: the server's query goes on until a new run of the checkpoint replaces it
        running, log = started(tmp_path, *args, "--rate", "500")
        runs.append(running)
        wait_for(tmp_path / "ck" / "commits" / "1", running, log)
        os.killpg(running.pid, signal.SIGKILL)
        running.wait()
        before = max(_recorded(tmp_path / "ck"), default=-1)
        # the server dies (its JVM and the query's Python workers) while the next run is mid-stream
        running, log = started(tmp_path, *args, "--rate", "500")
        runs.append(running)
        deadline = time.monotonic() + 300
        while len([b for b in _recorded(tmp_path / "ck") if b > before]) < 2:
            assert running.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        own_server.kill()
        assert running.wait(timeout=150) == 1, log.read_text()
        assert "the Spark Connect server stopped answering" in " ".join(log.read_text().split())
    finally:
        for process in runs:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    own_server.start()
    done = sparkstate(tmp_path, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = committed_rows(tmp_path / "ck" / "output")
    assert len(rows) == 20000
    same_rows(rows, expected_rows())
