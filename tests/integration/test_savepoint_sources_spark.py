"""Sources on restore: a run restored from a savepoint reads each source from where the
savepoint's batch left it (files: the files it had not read; a list: the batches after its
offset, the end-of-input marker included), counts only its own events, and a savepoint of
another kind of source starts the new one from its beginning, with a warning."""

from __future__ import annotations

import json
import os

from spark_helpers import FAST, write_json_files

from sparkstate import (
    FileSource,
    Job,
    KeyedProcessFunction,
    ListSource,
    MemorySink,
    TimeDomain,
    UpiPayments,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from sparkstate.jobs import get_job
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.savepoints.take import take_savepoint


def running_sum(source):
    sink = MemorySink()
    return get_job("running-sum").on_source(source).sink(sink).with_settings(**FAST), sink


def payments(merchant: str, n: int, first: int) -> list[dict]:
    return [{"event_time": 1_735_689_600_000 + 1000 * (first + i), "merchant_id": merchant, "amount": 1.0}
            for i in range(n)]


def counts(sink) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for r in sink.rows():
        out.setdefault(r["merchant_id"], []).append(r["count"])
    return {k: sorted(v) for k, v in sorted(out.items())}


def test_a_restored_file_source_reads_each_line_once(spark, tmp_path):
    folder = tmp_path / "in put"
    write_json_files(folder, [payments("m1", 3, 0) + payments("m2", 1, 0), payments("m1", 2, 10)])
    source = FileSource(str(folder), UpiPayments.schema_ddl, time_column="event_time")
    job, first = running_sum(source)
    assert job.run(checkpoint_dir=tmp_path / "a", spark=spark, timeout=120, until=lambda r: r.events >= 6).completed
    sp = take_savepoint(str(tmp_path / "a"), target=str(tmp_path / "sp"), spark=spark)
    # the savepoint records the source's position: the last file read, by (modification time, path)
    assert sp["source_offset"] == {"mtime": 1_700_000_001_000, "path": str(folder / "1.json"), "files": 2,
                                   "first": str(folder / "0.json")}
    assert sp["source_files"] is None

    # a file that arrives while the job is stopped; the restored run reads it and only it
    late = folder / "2.json"
    late.write_text("\n".join(json.dumps(e) for e in payments("m1", 1, 20) + payments("m3", 2, 20)))
    os.utime(late, (1_700_000_002, 1_700_000_002))
    job, second = running_sum(source)
    result = job.run(checkpoint_dir=tmp_path / "b", spark=spark, timeout=120, from_savepoint=str(tmp_path / "sp"),
                     until=lambda r: r.batches >= 1)
    assert result.completed and not any("source" in w for w in result.warnings)
    assert counts(first) == {"m1": [1, 2, 3, 4, 5], "m2": [1]}
    assert counts(second) == {"m1": [6], "m3": [1, 2]}  # every line counted once over the two runs
    # the job's source is the first of the query's sources (the restore rows follow it)
    assert "/sp/state" not in result.progress[0]["sources"][0]["description"]
    assert "/sp/state" in result.progress[0]["sources"][1]["description"]
    _, offset = CheckpointDir.open(str(tmp_path / "b")).last_committed_offset()
    assert offset == {"mtime": 1_700_000_002_000, "path": str(late), "files": 1, "first": str(late)}
    again = take_savepoint(str(tmp_path / "b"), target=str(tmp_path / "sp-b"), spark=spark)
    assert again["source_offset"] == offset and again["source_files"] is None

    # a savepoint of an older sparkstate, whose file source Spark listed: it names the files
    # read as Spark's log did (URL-encoded: the folder's name has a space); a restore skips them
    import shutil

    shutil.copytree(tmp_path / "sp", tmp_path / "sp-old")
    meta = json.loads((tmp_path / "sp-old" / "_savepoint.json").read_text())
    meta.update(source_offset={"logOffset": 1}, source_files=[(folder / f"{i}.json").as_uri() for i in range(2)])
    (tmp_path / "sp-old" / "_savepoint.json").write_text(json.dumps(meta, sort_keys=True))
    job, old = running_sum(source)
    result = job.run(checkpoint_dir=tmp_path / "c", spark=spark, timeout=120, from_savepoint=str(tmp_path / "sp-old"),
                     until=lambda r: r.batches >= 1)
    assert result.completed and counts(old) == {"m1": [6], "m3": [1, 2]}
    # ... and a savepoint of that checkpoint still names them, beside its own position
    carried = take_savepoint(str(tmp_path / "c"), target=str(tmp_path / "sp-c"), spark=spark)
    assert carried["source_files"] == meta["source_files"] and carried["source_offset"]["path"] == str(late)

    # a savepoint of a list source (written by the harness, in the same format) restored into the
    # file source job: its offset means nothing to files, so they are read from the beginning
    # on top of the savepoint's state
    listed, _ = running_sum(ListSource([payments("m1", 2, 0)], UpiPayments.schema_ddl, time_column="event_time"))
    harness = listed.harness()
    harness.process_batch(payments("m1", 2, 0))
    harness.savepoint(tmp_path / "sp-list", source_offset=1)
    job, third = running_sum(source)
    result = job.run(checkpoint_dir=tmp_path / "d", spark=spark, timeout=120, from_savepoint=str(tmp_path / "sp-list"),
                     until=lambda r: r.batches >= 1)
    assert any("ListSource" in w and "from its beginning" in w for w in result.warnings)
    assert counts(third) == {"m1": [3, 4, 5, 6, 7, 8], "m2": [1], "m3": [1, 2]}


class Remind(KeyedProcessFunction):
    """Counts a key's events and, 10 s of event time after each, emits the count (event-time timers)."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))

    def process_element(self, event, ctx):
        self.count.update(self.count.value() + 1)
        ctx.timer_service().register_event_time_timer(event["ts"] + 10_000)
        return []

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() == TimeDomain.EVENT_TIME
        yield (ctx.get_current_key(), self.count.value(), timestamp)


BATCHES = [
    [{"k": "a", "ts": 1_000}, {"k": "b", "ts": 2_000}],
    [{"k": "a", "ts": 15_000}, {"k": "c", "ts": 3_000}],
    [{"k": "b", "ts": 40_000}],
]


def remind_job(sink):
    wm = WatermarkStrategy.for_bounded_out_of_orderness(0).with_timestamp_column("ts")
    return (
        Job("remind").source(ListSource(BATCHES, "k string, ts bigint"), watermark=wm).key_by("k")
        .process(Remind(), output_schema="k string, n bigint, at bigint").sink(sink).with_settings(**FAST)
    )


def test_a_restored_list_source_resumes_after_the_savepoints_batch_end_of_input_marker_included(spark, tmp_path):
    full = MemorySink()
    result = remind_job(full).run(checkpoint_dir=tmp_path / "full", spark=spark)
    # three batches of events, the end-of-input marker's, and the final one that fires the rest
    # (batches 0 to 4; Spark may start one more, without data, before the run stops the query)
    assert result.completed and result.batches in (5, 6) and result.events == 5
    # after the end-of-input marker's batch, before the final one: the restored run is that batch
    take_savepoint(str(tmp_path / "full"), target=str(tmp_path / "sp"), batch=3, spark=spark)
    sink = MemorySink()
    restored = remind_job(sink).run(checkpoint_dir=tmp_path / "r", spark=spark, from_savepoint=str(tmp_path / "sp"))
    assert restored.completed and restored.batches == 1
    assert restored.events == 0  # its own events (none), not the savepoint's five
    assert sink.rows() == full.batches[4] == [{"k": "b", "n": 2, "at": 50_000}]  # fired by the final watermark
    # a second run of the restored checkpoint finds it complete
    again = remind_job(MemorySink()).run(checkpoint_dir=tmp_path / "r", spark=spark, from_savepoint=str(tmp_path / "sp"))
    assert again.already_complete and again.batches == 0
