"""A savepoint of a running job holds the batch it reads: the job goes on and Spark deletes the
batches it no longer retains (two here, with a fast trigger), while the savepoint's read of its
batch is made slow; the savepoint is whole and a restore from it continues the output exactly."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from spark_helpers import harness_like_spark, same_rows

from sparkstate import Job, ParquetSink
from sparkstate.jobs.running_sum import build
from sparkstate.runtime.savepoints import take as savepoints
from sparkstate.savepoint.files import LocalDirectory, open_savepoint

EVENTS = 1_500


def running_sum(events: int = EVENTS, max_batch: int = EVENTS, rate: float | None = None) -> Job:
    from sparkstate import UpiPayments

    return build(UpiPayments(events=events, merchants=100, max_batch=max_batch, rate=rate))


def committed(checkpoint: Path) -> list[int]:
    return sorted(int(p.name) for p in (checkpoint / "commits").glob("[0-9]*"))


def wait_for(condition, seconds: float = 240.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_savepoint_of_a_running_job_holds_its_batch_while_spark_deletes_it(spark, tmp_path, monkeypatch):
    ck = tmp_path / "ck"
    job = (running_sum(max_batch=100).sink(ParquetSink(str(tmp_path / "a")))
           .with_checkpointing(interval="0 seconds", retained=2))
    out: dict = {}
    runner = threading.Thread(target=lambda: out.setdefault("result", job.run(checkpoint_dir=ck)), daemon=True)
    runner.start()
    wait_for(lambda: len(committed(ck)) >= 2)

    read_meta = savepoints.rocksdb_meta_groups
    gone: list[int] = []

    def slow_read(spark, checkpoint, batch):
        groups = read_meta(spark, checkpoint, batch)
        # the job goes on until Spark has deleted the batch's logs (it keeps the last two)
        wait_for(lambda: min(committed(ck), default=batch + 1) > batch or not runner.is_alive())
        gone.append(batch)
        return groups

    monkeypatch.setattr(savepoints, "rocksdb_meta_groups", slow_read)
    online = job.savepoint(checkpoint_dir=ck, target=str(tmp_path / "sp"))
    monkeypatch.undo()
    runner.join(timeout=600)
    assert not runner.is_alive() and out["result"].completed

    batch = online["batch"]
    assert gone == [batch] and batch not in committed(ck)  # deleted while it was read
    assert online["running"]
    saved = open_savepoint(LocalDirectory(online["location"]))
    saved.verify()
    offset = saved.meta["source_offset"]["offset"]
    assert 0 < offset < EVENTS and 0 < saved.meta["keys"] <= 100
    assert not list((ck / "sparkstate" / "reads").iterdir())  # the held files went with the read

    restored = running_sum().sink(ParquetSink(str(tmp_path / "b")))
    again = restored.run(checkpoint_dir=tmp_path / "ck-b", from_savepoint=online["location"])
    assert again.completed and again.events == EVENTS - offset
    second = [r.asDict() for r in spark.read.parquet(str(tmp_path / "b")).collect()]
    # the events before the savepoint's offset, then the restored run's: the output of all of them
    same_rows(harness_like_spark(running_sum(offset), EVENTS) + second, harness_like_spark(running_sum(), EVENTS))
