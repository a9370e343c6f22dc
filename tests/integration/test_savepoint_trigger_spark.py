"""Savepoints on request under real Spark: of a running job that goes on, stop-with-savepoint,
of a stopped job at a retained batch; a restore continues the output exactly, and is refused
where Spark would drop its batches; a database sink's batches across a restore.

One rate-limited run serves the first tests (Spark's start and a run cost seconds each)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from spark_helpers import harness_like_spark, same_rows

from sparkstate import Job, ParquetSink, SavepointError, SinkError, SqliteSink
from sparkstate.jobs.running_sum import build
from sparkstate.runtime.savepoints import requests as savepoint_requests
from sparkstate.savepoint.files import LocalDirectory, open_savepoint

#: the running job reads slowly (rate-limited, small batches), so that it is stopped mid-stream
#: however slow the machine; its restore reads the rest in one batch (batch shaping is not part
#: of a source's identity)
EVENTS = 20_000


def running_sum(events: int = EVENTS, max_batch: int = EVENTS, rate: float | None = None) -> Job:
    from sparkstate import UpiPayments

    return (build(UpiPayments(events=events, merchants=200, max_batch=max_batch, rate=rate))
            .with_checkpointing(interval="200 milliseconds"))


def committed(checkpoint: Path) -> list[int]:
    return sorted(int(p.name) for p in (checkpoint / "commits").glob("[0-9]*"))


def planned(checkpoint: Path) -> list[int]:
    return sorted(int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*"))


def wait_for(condition, seconds: float = 240.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def spark_output(spark, folder: Path) -> list[dict]:
    """What Spark's file sink committed (its log), not files a stopped batch may have left."""
    return [r.asDict() for r in spark.read.parquet(str(folder)).collect()]


@pytest.fixture(scope="module")
def stopped(spark, tmp_path_factory) -> SimpleNamespace:
    """A running job: a savepoint while it goes on, then a stop with a savepoint."""
    base = tmp_path_factory.mktemp("trigger")
    ck = base / "ck"
    job = running_sum(max_batch=250, rate=100).sink(ParquetSink(str(base / "a")))
    out: dict = {}
    runner = threading.Thread(target=lambda: out.setdefault("result", job.run(checkpoint_dir=ck)), daemon=True)
    runner.start()
    wait_for(lambda: len(committed(ck)) >= 2)
    online = job.savepoint(checkpoint_dir=ck, target=str(base / "sp-online"))
    after_online = max(committed(ck))
    wait_for(lambda: max(committed(ck)) > after_online)  # the job went on
    with pytest.MonkeyPatch.context() as patch:
        # stop at once, not between two batches: most likely inside a batch, which the run then
        # completes before the savepoint (the end-to-end test stops between two batches)
        patch.setattr(savepoint_requests, "_wait_idle", lambda query, seconds: None)
        stop = job.savepoint(checkpoint_dir=ck, stop=True, target=str(base / "sp-stop"))
    runner.join(timeout=120)
    assert not runner.is_alive()
    return SimpleNamespace(base=base, ck=ck, job=job, online=online, stop=stop, result=out["result"])


def test_a_savepoint_of_a_running_job_leaves_it_running_and_is_valid(stopped):
    online = stopped.online
    assert online["running"] and not online["stopped"] and "pid" in online["taken_by"]
    saved = open_savepoint(LocalDirectory(online["location"]))
    saved.verify()
    assert saved.meta["batch"] == online["batch"] and 0 < saved.meta["keys"] <= 200
    assert saved.meta["source_offset"]["offset"] < EVENTS  # mid-stream
    assert stopped.stop["batch"] > online["batch"]  # the run went on after it


def test_stop_with_savepoint_ends_the_run_after_a_committed_batch_and_a_restore_continues_the_output(stopped, spark):
    stop, result, ck = stopped.stop, stopped.result, stopped.ck
    assert stop["stopped"] and result.stopped_with_savepoint and not result.completed
    assert result.savepoint["location"] == stop["location"]
    # the run stopped after a committed batch: the savepoint's is the last planned and committed one
    assert stop["batch"] == max(committed(ck)) == max(planned(ck)) and not result.warnings
    assert [p["batchId"] for p in result.progress] == committed(ck)  # a batch the stop interrupted ran to its end
    assert stop["source_offset"]["offset"] < EVENTS

    restored = running_sum().sink(ParquetSink(str(stopped.base / "b"))).with_settings(parallelism=1) \
        .with_checkpointing(state_backend="hashmap", interval="200 milliseconds")
    again = restored.run(checkpoint_dir=stopped.base / "ck-b", from_savepoint=stop["location"])
    assert again.completed
    assert again.events == EVENTS - stop["source_offset"]["offset"]
    first, second = spark_output(spark, stopped.base / "a"), spark_output(spark, stopped.base / "b")
    same_rows(first + second, harness_like_spark(running_sum(), EVENTS))
    # the same restore again resumes the restored checkpoint (here: finished) instead of starting over
    assert restored.run(checkpoint_dir=stopped.base / "ck-b", from_savepoint=stop["location"]).already_complete


def test_a_stopped_job_saves_any_retained_batch_and_refuses_one_it_does_not_retain(stopped):
    ck = stopped.ck
    first = committed(ck)[0]
    meta = stopped.job.savepoint(checkpoint_dir=ck, batch=first, target=str(stopped.base / "sp-first"))
    assert meta["batch"] == first and not meta["running"]
    log = (ck / "offsets" / str(first)).read_text().splitlines()
    assert meta["source_offset"] == __import__("json").loads(log[2])
    with pytest.raises(SavepointError, match=r"batch 100000 is not a committed batch .* retains"):
        stopped.job.savepoint(checkpoint_dir=ck, batch=100_000)


def test_a_restore_is_refused_into_a_checkpoint_with_batches_or_a_folder_another_checkpoint_wrote(stopped):
    location = stopped.stop["location"]
    job = stopped.job.sink(ParquetSink(str(stopped.base / "elsewhere")))
    with pytest.raises(SavepointError) as into_checkpoint:
        job.run(checkpoint_dir=stopped.ck, from_savepoint=location)
    assert "--fresh" in str(into_checkpoint.value) and "--checkpoint DIR" in str(into_checkpoint.value)

    new = stopped.base / "ck-new"
    onto_output = stopped.job.sink(ParquetSink(str(stopped.base / "a")))
    with pytest.raises(SinkError) as into_folder:
        onto_output.run(checkpoint_dir=new, from_savepoint=location)
    message = str(into_folder.value)
    assert "already holds batches" in message and "restored from a savepoint" in message
    assert not (new / "sparkstate.json").exists()


def test_a_database_sink_across_a_restore_writes_the_restored_batches_under_a_writer_of_their_own(spark, tmp_path):
    db = tmp_path / "out.db"
    events = 4_000
    job = running_sum(events, max_batch=1_000).sink(SqliteSink(str(db), table="sums"))
    assert job.run(checkpoint_dir=tmp_path / "ck").completed
    # a savepoint of an earlier batch: the table holds batches written after it
    saved = job.savepoint(checkpoint_dir=tmp_path / "ck", batch=0, target=str(tmp_path / "sp"))
    assert [(w["table"], w["writer"]) for w in saved["sinks"]] == [
        ("sums", "running-sum@sums"), ("sums_dead_letters", "running-sum/dead_letters@sums_dead_letters")]
    with sqlite3.connect(db) as conn:
        rows_before = conn.execute("SELECT count(*) FROM sums").fetchone()[0]
        top = conn.execute("SELECT max(batch_id) FROM sparkstate_batches WHERE job = 'running-sum@sums'").fetchone()[0]

    restored = job.run(checkpoint_dir=tmp_path / "ck2", from_savepoint=str(tmp_path / "sp"))
    assert restored.completed
    assert any(f"holds batches 1 to {top} of writer 'running-sum@sums', written after the savepoint (batch 0)" in w
               for w in restored.warnings)
    writer = f"running-sum@sums#{saved['id']}"
    with sqlite3.connect(db) as conn:
        markers = [b for (b,) in conn.execute("SELECT batch_id FROM sparkstate_batches WHERE job = ? ORDER BY 1", (writer,))]
        rows_after = conn.execute("SELECT count(*) FROM sums").fetchone()[0]
    assert markers == committed(tmp_path / "ck2")  # every restored batch written, none skipped as a replay
    assert rows_after - rows_before == events - saved["source_offset"]["offset"]
    # resuming the restored checkpoint keeps its writer (its markers agree with its batches)
    assert job.run(checkpoint_dir=tmp_path / "ck2", from_savepoint=str(tmp_path / "sp")).already_complete


def test_stop_with_savepoint_of_a_job_never_idle_lands_within_three_batches_of_the_request(spark, tmp_path):
    """Batches back to back (interval 0, much input): the query is never between two triggers
    when looked at, and a stop still comes after the batch running when it was asked."""
    events = 20_000
    job = running_sum(max_batch=50).with_checkpointing(interval=0).sink(ParquetSink(str(tmp_path / "a")))
    ck = tmp_path / "ck"
    out: dict = {}
    runner = threading.Thread(target=lambda: out.setdefault("result", job.run(checkpoint_dir=ck)), daemon=True)
    runner.start()
    wait_for(lambda: len(committed(ck)) >= 2)
    asked: list[int] = []  # the last committed batch once the request is posted
    stop = savepoint_requests.savepoint(ck, stop=True, target=str(tmp_path / "sp"), wait=120, job=job.name,
                                        on_wait=lambda _: asked.append(max(committed(ck))))
    runner.join(timeout=120)
    assert not runner.is_alive()
    result = out["result"]
    assert stop["stopped"] and result.stopped_with_savepoint and not result.completed
    assert stop["batch"] <= asked[0] + 3, (stop["batch"], asked)
    assert stop["batch"] == max(committed(ck)) == max(planned(ck)) and not result.warnings
    assert stop["source_offset"]["offset"] < events  # stopped by the request, not by the input's end

    # the rest in one batch: every row of the input once across the two runs
    restored = running_sum().sink(ParquetSink(str(tmp_path / "b")))
    again = restored.run(checkpoint_dir=tmp_path / "ck-b", from_savepoint=stop["location"])
    assert again.completed and again.events == events - stop["source_offset"]["offset"]
    same_rows(spark_output(spark, tmp_path / "a") + spark_output(spark, tmp_path / "b"),
              harness_like_spark(running_sum(), events))
