"""Savepoints on request, without Spark: the request and answer files between an asker and
the run holding a checkpoint, the stop between two batches, and the database writers'
identities across a restore."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from sparkstate import SavepointError
from sparkstate.cli import main
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.savepoints import requests


def checkpoint_of(tmp_path: Path, job: str = "running-sum", committed: tuple[int, ...] = (0,)) -> CheckpointDir:
    root = tmp_path / "ck"
    root.mkdir(parents=True, exist_ok=True)
    (root / "sparkstate.json").write_text(json.dumps({"job": job}))
    for b in committed:
        for log in ("offsets", "commits"):
            (root / log).mkdir(exist_ok=True)
            (root / log / str(b)).write_text("v1\n{}\n-\n")
    return CheckpointDir.open(str(root))


def test_a_request_is_served_once_and_a_second_asker_waits_for_the_first(tmp_path):
    ck = checkpoint_of(tmp_path)
    first = requests.Request.new(stop=True, target="/sp", wait=60)
    requests.post(ck, first)
    with pytest.raises(SavepointError, match=rf"another savepoint of .* is being asked for .*request {first.id}"):
        requests.post(ck, requests.Request.new())
    taken = requests.take(ck)
    assert taken == first and requests.take(ck) is None  # removed when taken
    requests.answer(ck, taken, "done", savepoint={"location": "/sp"})
    assert requests.read_answer(ck, first) == {"id": first.id, "status": "done", "savepoint": {"location": "/sp"}}
    assert requests.read_answer(ck, requests.Request.new()) is None  # another asker's id


def test_a_request_nobody_waits_for_is_dropped_and_replaced(tmp_path):
    ck = checkpoint_of(tmp_path)
    stale = requests.Request.new(wait=-1)
    requests.post(ck, stale)
    fresh = requests.Request.new(wait=60)
    requests.post(ck, fresh)  # the stale one's asker gave up: replaced
    assert requests.take(ck) == fresh
    requests.post(ck, requests.Request.new(wait=-1))
    assert requests.take(ck) is None  # expired: not served
    mine = requests.Request.new(wait=60)
    requests.post(ck, mine)
    assert requests.withdraw(ck, mine) and not requests.withdraw(ck, mine)


class FakeQuery:
    """A query whose stop interrupts a batch (planned in the offset log, not committed) the
    first ``interrupts`` times; a one-batch run commits it."""

    def __init__(self, root: Path, interrupts: int, busy: bool = False) -> None:
        self.root, self.interrupts, self.busy, self.isActive = root, interrupts, busy, True
        self.stops = 0

    @property
    def status(self) -> dict:
        return {"isTriggerActive": self.busy}

    def stop(self) -> None:
        self.isActive = False
        self.stops += 1
        if self.interrupts > 0:
            self.interrupts -= 1
            nxt = max(int(p.name) for p in (self.root / "offsets").iterdir()) + 1
            (self.root / "offsets" / str(nxt)).write_text("v1\n{}\n-\n")

    def exception(self) -> None:
        return None

    def awaitTermination(self, timeout: float) -> None:  # noqa: N802 (Spark's name)
        self.isActive = False


def test_a_stop_waits_for_the_gap_between_batches_and_completes_a_batch_it_interrupted(tmp_path):
    ck = checkpoint_of(tmp_path)
    root = Path(ck.root)
    reruns: list[FakeQuery] = []

    def run_one_batch() -> FakeQuery:
        planned = max(int(p.name) for p in (root / "offsets").iterdir())
        (root / "commits" / str(planned)).write_text("v1\n{}\n")  # the one batch, run to its end
        reruns.append(FakeQuery(root, 0))
        return reruns[-1]

    query = FakeQuery(root, interrupts=1, busy=True)
    last, warning = requests.stop_between_batches(query, run_one_batch, ck, idle_wait=0.05)
    assert warning is None and len(reruns) == 1 and last is reruns[0]
    assert requests.batch_logs(ck) == (1, 1) and requests.interrupted_batch(ck) is None

    # a batch that cannot be completed: bounded tries, then a warning naming it
    stubborn = FakeQuery(root, interrupts=10)
    last, warning = requests.stop_between_batches(stubborn, lambda: FakeQuery(root, 0), ck, idle_wait=0.05, attempts=2)
    assert warning is not None and "the stop interrupted batch 2" in warning and "savepoint is of batch 1" in warning


class BusyQuery:
    """A query whose batches follow each other without a pause: never idle, and a batch
    commits at every third look at it (its status or its last progress report)."""

    def __init__(self) -> None:
        self.looks, self.isActive, self.stopped_at = 0, True, -1

    def _look(self) -> int:
        self.looks += 1
        return self.looks // 3

    @property
    def status(self) -> dict:
        self._look()
        return {"isTriggerActive": True}

    @property
    def lastProgress(self) -> dict:  # noqa: N802 (Spark's name)
        batch = self._look()
        return {"batchId": batch, "timestamp": f"2026-11-28T12:00:{batch:02}.000Z"}

    def stop(self) -> None:
        self.isActive, self.stopped_at = False, self.looks // 3

    def exception(self) -> None:
        return None


def test_a_stop_of_a_job_that_is_never_idle_comes_after_its_next_committed_batch(tmp_path):
    ck = checkpoint_of(tmp_path)
    query = BusyQuery()
    last, warning = requests.stop_between_batches(query, lambda: pytest.fail("nothing to complete"), ck, idle_wait=1.0)
    assert last is query and warning is None
    assert query.stopped_at == 1  # the batch running when asked committed: stopped there, not batches later


def test_an_asker_gets_the_running_jobs_answer(tmp_path):
    ck = checkpoint_of(tmp_path)
    with ck.lock("running-sum"):  # the run

        def serve() -> None:
            deadline = time.monotonic() + 10
            while (request := requests.take(ck)) is None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert request is not None and request.stop and request.savepoint_dir == str(tmp_path / "sps")
            requests.answer(ck, request, "accepted")
            requests.answer(ck, request, "done", savepoint={"location": "/sp", "batch": 0})

        server = threading.Thread(target=serve)
        server.start()
        said: list[str] = []
        meta = requests.savepoint(ck.root, stop=True, savepoint_dir=str(tmp_path / "sps"), wait=10,
                                  job="running-sum", on_wait=said.append)
        server.join()
    assert meta["location"] == "/sp" and meta["stopped"] and not meta["running"]
    assert "holds" in said[0] and "pid" in said[0] and "to stop after its next committed batch" in said[0]


def test_an_unanswered_request_is_withdrawn_with_a_clear_message(tmp_path):
    ck = checkpoint_of(tmp_path)
    with ck.lock("running-sum"), pytest.raises(SavepointError) as failure:
        requests.savepoint(ck.root, wait=0.5, job="running-sum")
    message = str(failure.value)
    assert "did not take the savepoint request within 0.5 s" in message
    assert "--timeout" in message and requests.take(ck) is None  # withdrawn


def test_refusals_before_anything_is_asked(tmp_path):
    ck = checkpoint_of(tmp_path, job="other")
    with pytest.raises(SavepointError, match="belongs to job 'other', not 'running-sum'"):
        requests.savepoint(ck.root, job="running-sum")
    with pytest.raises(SavepointError, match="--stop takes the savepoint of the last batch"):
        requests.savepoint(ck.root, stop=True, batch=0)
    with pytest.raises(SavepointError, match="does not exist"):
        requests.savepoint(tmp_path / "nowhere")


def test_the_savepoint_command_says_what_is_wrong(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["savepoint", "running-sum"], terminal_width=300)
    assert result.exit_code == 1 and "does not exist" in result.output and "--checkpoint DIR" in result.output
    result = CliRunner().invoke(main, ["savepoint", "running-sum", "--stop", "--batch", "3"], terminal_width=300)
    assert result.exit_code == 1 and "Give one of the two" in " ".join(result.output.split())
    result = CliRunner().invoke(main, ["run", "running-sum", "--events", "10", "--allow-non-restored-state"],
                                terminal_width=300)
    assert result.exit_code == 1 and "add --from-savepoint PATH" in result.output


# --------------------------------------------------------------------------- database writers


def sqlite_sink(db: Path, restored_from: str | None = None):
    from dataclasses import replace

    from sparkstate.connectors.sinks import parse_sink

    return replace(parse_sink(f"sqlite:///{db}?table=sums").for_job("running-sum"), restored_from=restored_from)


def test_a_restored_checkpoint_writes_under_an_identity_of_its_own_and_fresh_forgets_both(tmp_path):
    from sparkstate.connectors import database

    db = tmp_path / "out.db"
    schema = pa.schema([("k", pa.string()), ("n", pa.int64())])
    old, new = sqlite_sink(db), sqlite_sink(db, "running-sum-b000004-x")
    assert old.marker == "running-sum@sums" and new.marker == "running-sum@sums#running-sum-b000004-x"
    assert new.side_table("dead_letters").marker == "running-sum/dead_letters@sums_dead_letters#running-sum-b000004-x"
    database.prepare(old, schema, None)
    for b in range(6):
        database.write(old, pa.table({"k": ["a"], "n": [b]}), b)
    # the restored checkpoint starts at batch 0: its writer is not the old one, so nothing is skipped
    database.prepare(new, schema, None)
    assert database.write(new, pa.table({"k": ["a"], "n": [10]}), 0) == 1
    assert database.top_marker(new) == 0 and database.top_marker(new, old.marker) == 5
    # --fresh forgets the old checkpoint's writer and the new run's
    database.reset(old, ("running-sum-b000004-x",))
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM sparkstate_batches").fetchone() == (0,)


def test_a_restore_warns_of_batches_the_table_holds_from_after_the_savepoint(tmp_path):
    from sparkstate import Job, ListSource
    from sparkstate.connectors import database
    from sparkstate.runtime.io.sinks import restore_warnings

    db = tmp_path / "out.db"
    old = sqlite_sink(db)
    database.prepare(old, pa.schema([("k", pa.string())]), None)
    for b in range(4):
        database.write(old, pa.table({"k": ["a"]}), b)
    job = database.bind_job_sinks(
        Job("running-sum").source(ListSource([[{"k": "a"}]], "k string")).sink(sqlite_sink(db)), "sp-1")
    recorded = {"batch": 1, "sinks": [{"table": "sums", "writer": "running-sum@sums"}]}
    (note,) = restore_warnings(job, recorded)
    assert "holds batches 2 to 3 of writer 'running-sum@sums', written after the savepoint (batch 1)" in note
    assert "writes their effect again" in note
    assert restore_warnings(job, {**recorded, "batch": 3}) == []  # a savepoint of the last batch: nothing after
    assert len(restore_warnings(job, {"batch": 1})) == 1  # a savepoint without its writers: the job's own


class FakeWriter:
    """A DataStreamWriter whose start() gives a running FakeQuery, recording its trigger."""

    def __init__(self, root: Path) -> None:
        self.root, self.triggers = root, []

    def option(self, *args) -> FakeWriter:
        return self

    def trigger(self, **kwargs) -> FakeWriter:
        self.triggers.append(kwargs)
        return self

    def start(self) -> FakeQuery:
        return FakeQuery(self.root, 0)


@pytest.mark.parametrize("fails", [False, True])
def test_a_run_serves_a_stop_request_and_goes_on_when_the_savepoint_fails(tmp_path, monkeypatch, fails):
    from sparkstate import Job, ListSource, NoopSink
    from sparkstate.runtime.run import loop as run_loop
    from sparkstate.runtime.run.result import RunResult
    from sparkstate.runtime.savepoints import take as savepoints

    ck = checkpoint_of(tmp_path)

    def take_savepoint(root, **kwargs):
        if fails:
            raise SavepointError("no space left for the savepoint")
        return {"location": "/sp", "batch": 0, "keys": 3, "bytes": 2048, "seconds": 0.5, "files": {"0": {}}}

    monkeypatch.setattr(savepoints, "take_savepoint", take_savepoint)
    job = Job("running-sum").source(ListSource([[{"k": "a"}]], "k string")).sink(NoopSink())
    result = RunResult(job="running-sum", checkpoint_dir=ck.root)
    request = requests.Request.new(stop=True)
    running = FakeQuery(Path(ck.root), 0)
    writer = FakeWriter(Path(ck.root))
    query, ends = run_loop._serve(request, running, writer, job, ck, None, result)
    reply = requests.read_answer(ck, request)
    assert not running.isActive  # stopped between two batches
    if fails:
        assert not ends and query.isActive and query is not running  # started again, with its own trigger
        assert writer.triggers[-1] == {"processingTime": job.settings.checkpoint.trigger}
        assert reply["status"] == "failed" and "no space left" in reply["error"]
        assert "failed: no space left for the savepoint; the job goes on" in result.warnings[0]
        assert result.savepoint is None
    else:
        assert ends and result.stopped_with_savepoint
        assert reply == {"id": request.id, "status": "done", "savepoint": result.savepoint}
        assert "files" not in result.savepoint
        assert run_loop.describe_savepoint(result.savepoint) == "savepoint /sp: batch 0, 3 keys, 2.0 KB, taken in 0.5 s"


def test_a_request_deleted_unanswered_is_left_again(tmp_path, monkeypatch):
    """A run starting with --fresh clears the checkpoint directory, a waiting request with it."""
    monkeypatch.setattr(requests, "LOST_REQUEST_SECONDS", 0.1)
    ck = checkpoint_of(tmp_path)
    with ck.lock("running-sum"):

        def fresh_start_then_serve() -> None:
            while requests.take(ck) is None:  # deleted unanswered, as --fresh does
                time.sleep(0.02)
            deadline = time.monotonic() + 10
            while (request := requests.take(ck)) is None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert request is not None
            requests.answer(ck, request, "done", savepoint={"location": "/sp"})

        server = threading.Thread(target=fresh_start_then_serve)
        server.start()
        meta = requests.savepoint(ck.root, wait=10, job="running-sum")
        server.join()
    assert meta["location"] == "/sp" and meta["running"]
