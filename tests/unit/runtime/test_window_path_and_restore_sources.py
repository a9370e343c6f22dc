"""The window path "auto" chooses, what ``explain`` says of savepoints, and how each source is
positioned when a run restores a savepoint (no Spark runs here)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sparkstate import (
    DataFrameSource,
    FileSource,
    Job,
    ListSource,
    MemorySink,
    SocketSource,
    TumblingEventTimeWindows,
    UpiPayments,
    WatermarkStrategy,
    agg,
)
from sparkstate.errors import JobDefinitionError
from sparkstate.runtime.io.sources import (
    batch_events,
    restore_notes,
    restored_offset,
    resumes,
    start_options,
)
from sparkstate.runtime.streaming.planner import explain, native_blockers, plan

SCHEMA = "k string, ts timestamp, v double"


def window_job(path: str = "auto", late: bool = False) -> Job:
    wm = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(0)).with_timestamp_column("ts")
    batches = [[{"k": "a", "ts": 1_000, "v": 1.0}], [{"k": "a", "ts": 500 if late else 1_500, "v": 1.0}]]
    return (
        Job("w").source(ListSource(batches, SCHEMA), watermark=wm).key_by("k")
        .window(TumblingEventTimeWindows.of(timedelta(seconds=1))).aggregate(agg.count())
        .sink(MemorySink()).with_settings(window_path=path)
    )


def test_auto_runs_window_jobs_on_the_python_path_and_native_only_when_asked():
    job = window_job()
    assert native_blockers(job) == []  # the native path could run it ...
    assert plan(job).path == "python"  # ... but auto takes the faster path, which takes savepoints
    assert "faster" in plan(job).reasons[0]
    assert plan(window_job("native")).path == "native"
    assert plan(window_job("python")).path == "python"
    with pytest.raises(JobDefinitionError, match="window_path='native' is not possible because .*behind the watermark"):
        plan(window_job("native", late=True))


def test_explain_says_whether_savepoints_are_taken_on_the_path():
    auto = explain(window_job())
    assert "path:       python" in auto
    assert "native (window_path='native'): possible (Spark SQL window aggregation; no savepoints)" in auto
    assert "savepoints: taken and restored" in auto
    native = explain(window_job("native"))
    assert "path:       native" in native
    assert "savepoints: not on this path" in native and "window_path='python'" in native
    assert "not possible because" in explain(window_job(late=True))


@pytest.mark.parametrize("source, promise", [
    (UpiPayments(events=10), "resumes at the savepoint's offset"),
    (ListSource([[{"k": "a"}]], "k string"), "resumes at the savepoint's offset"),
    (FileSource("/tmp", "k string", "csv"), "resumes after the last file the savepoint's batch read"),
    (SocketSource("localhost", 9, "k string"), "cannot be repositioned"),
    (DataFrameSource(lambda spark: None), "keeps the DataFrame's own position"),
])
def test_explain_says_what_a_restore_of_each_source_promises(source, promise):
    job = Job("j").source(source).key_by("k").process(_Count(), output_schema="k string").sink(MemorySink())
    line = [x for x in explain(job).splitlines() if x.startswith("  savepoints:")]
    assert len(line) == 1 and promise in line[0]


def meta(source: dict | None, offset: int | None = None, files: list[str] | None = None) -> dict:
    return {"source": source, "source_offset": None if offset is None else {"offset": offset}, "source_files": files}


def test_a_restore_positions_a_source_of_the_savepoints_type_only():
    gen = UpiPayments(events=100)
    same = meta(gen.identity(), 40)
    assert resumes(gen, same) is same and start_options(resumes(gen, same)) == {"start_offset": "40"}
    assert restored_offset(gen, same) == 40
    assert restore_notes(gen, same) == []  # a generator promises exactly the events after the offset
    # a savepoint of a list source restored into a generator job: its offset means nothing there
    other = meta({"type": "ListSource"}, 3)
    assert resumes(gen, other) is None and restored_offset(gen, other) == 0
    (note,) = restore_notes(gen, other)
    assert "ListSource" in note and "UpiPayments" in note and "from its beginning" in note
    # a bootstrapped savepoint (no source) starts the source from its beginning, silently
    assert resumes(gen, meta(None)) is None and restore_notes(gen, meta(None)) == []
    files = FileSource("/data", "k string", "csv")
    assert resumes(files, meta(gen.identity(), 40, None)) is None


def test_a_restore_of_a_socket_says_it_cannot_be_repositioned():
    sock = SocketSource("localhost", 9, "k string")
    (note,) = restore_notes(sock, meta(sock.identity(), 12))
    assert "cannot be repositioned" in note


def test_a_restored_runs_events_count_from_the_savepoints_offset():
    src = ListSource([[{"k": "a"}]] * 10, "k string")
    first = {"sources": [{"startOffset": None, "endOffset": '{"offset": 7}', "numInputRows": 3},
                         {"description": "FileStreamSource[restore]", "numInputRows": 4}], "numInputRows": 7}
    assert batch_events(src, first) == 7  # a new run: batches 0..6
    assert batch_events(src, first, 6) == 1  # restored at offset 6: batch 6 only
    later = {"sources": [{"startOffset": '{"offset": 7}', "endOffset": '{"offset": 9}'}]}
    assert batch_events(src, later, 6) == 2
    # a source counted by rows: the job's own rows, not the restore rows unioned after it
    lines = {"sources": [{"startOffset": None, "endOffset": None, "numInputRows": 3},
                         {"numInputRows": 4}], "numInputRows": 7}
    assert batch_events(FileSource("/data", "k string", "csv"), lines) == 3


from sparkstate import KeyedProcessFunction  # noqa: E402


class _Count(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value


def _offsets(reader, start: int) -> list[tuple[dict, dict]]:
    """The micro-batches ``(start, end)`` Spark would run from ``start`` to the end."""
    out, s = [], {"offset": start}
    while True:
        e = reader.latestOffset(s)
        if e["offset"] == s["offset"]:
            return out
        out.append((s, e))
        s = e


def _read(reader, batches) -> list[list[tuple]]:
    """Each batch's packed rows as ``(kg, ts, blob)``, and the marker's (blob None)."""
    return [sorted((r["kg"], r["ts"], r["blob"]) for p in reader.partitions(s, e) for b in reader.read(p)
                   for r in b.to_pylist()) for s, e in batches]


@pytest.mark.parametrize("kind", ["generator", "list"])
def test_a_source_restored_at_any_offset_reads_what_the_uninterrupted_run_read_after_it(kind, tmp_path):
    """Generator and list sources, with the end-of-input marker: a reader started at the offset
    a savepoint records reads the batches the uninterrupted run read after it, the marker and
    the final empty batch included (a restore after the marker reads only the final batch)."""
    import json

    from sparkstate.runtime.io.sources import GeneratorDataSource, ListDataSource, generator_options, pack_options

    gen = UpiPayments(events=10, max_batch=4, partitions=1)
    job = Job("j").source(gen).key_by("merchant_id").process(_Count(), output_schema="k string").sink(MemorySink())
    path = tmp_path / "list.json"
    path.write_text(json.dumps([[{"merchant_id": f"m{i}", "amount": 1.0}] for i in range(4)]))
    source = {"generator": {**generator_options(gen)},
              "list": {"path": str(path), "schema": "merchant_id string, amount double", "end_of_input": "true"}}[kind]

    def reader(start: int):
        # as the binding reads it: the job's packing and the savepoint's offset in the options
        options = {**source, **pack_options(job, marker=True), **start_options(meta(gen.identity(), start))}
        data_source = (GeneratorDataSource if kind == "generator" else ListDataSource)(options)
        r = data_source.streamReader(None)
        assert r.initialOffset() == {"offset": start}
        return r

    full = reader(0)
    batches = _offsets(full, 0)
    rows = _read(full, batches)
    assert any(row[2] is None for row in rows[-2])  # the marker rides in the batch before the last
    assert rows[-1] == []  # the final batch, in which the final watermark fires the timers
    for i, (_, end) in enumerate(batches):
        restored = reader(end["offset"])
        again = _offsets(restored, end["offset"])
        assert [(s["offset"], e["offset"]) for s, e in again] == [(s["offset"], e["offset"]) for s, e in batches[i + 1:]]
        assert _read(restored, again) == rows[i + 1:]


def test_a_savepoint_of_a_restored_file_source_job_names_the_files_read_before_the_restore(tmp_path):
    """A restored checkpoint's file source log names only the files it listed itself (with
    maxFilesPerTrigger, not yet every file the first savepoint had read): a savepoint of it
    must still name those, or a restore from it would read them twice."""
    import json

    from sparkstate.runtime.checkpoint.directory import CheckpointDir
    from sparkstate.runtime.savepoints.take import _files_read

    log = tmp_path / "sources" / "0"
    log.mkdir(parents=True)
    (log / "0").write_text("v1\n" + json.dumps({"path": "file:///in/0.json", "timestamp": 1, "batchId": 0}))
    # Spark's file source (a directory Spark lists) logs its position as an index into that log
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"logOffset":0}')
    meta = {"restored_from": {"savepoint": "/sp", "source_files": ["file:///in/0.json", "file:///in/1.json"]}}
    files = _files_read(CheckpointDir.open(str(tmp_path)), meta, 0)
    assert files == ["file:///in/0.json", "file:///in/1.json"]
    assert _files_read(CheckpointDir.open(str(tmp_path)), {}, 0) == ["file:///in/0.json"]
    # what a restored checkpoint records of its savepoint carries the files it had read
    from sparkstate.runtime.savepoints.restore import Restore
    from sparkstate.savepoint.compat import RestorePlan
    from sparkstate.savepoint.files import LocalDirectory, Savepoint

    saved = Savepoint(LocalDirectory(tmp_path / "sp"), {"id": "sp", "batch": 3, "source_files": ["file:///in/0.json"]})
    assert Restore(saved, RestorePlan(()), ()).identity()["source_files"] == ["file:///in/0.json"]


def test_a_savepoint_of_spark_file_source_names_the_files_of_a_batch_its_log_compacted(tmp_path):
    """Spark compacts its file source log at batches 9, 19...: ``19.compact`` holds batches 0
    to 19, and no plain ``19`` is written; every batch's files are still named."""
    import json

    from sparkstate.runtime.checkpoint.directory import CheckpointDir

    log = tmp_path / "sources" / "0"
    log.mkdir(parents=True)

    def entry(b: int) -> str:
        return json.dumps({"path": f"file:///in/part-{b}.csv", "timestamp": 1, "batchId": b})

    for b in [*range(9), *range(10, 19), *range(20, 23)]:
        (log / str(b)).write_text("v1\n" + entry(b))
    (log / "9.compact").write_text("v1\n" + "\n".join(entry(b) for b in range(10)))
    (log / "19.compact").write_text("v1\n" + "\n".join(entry(b) for b in range(20)))
    checkpoint = CheckpointDir.open(str(tmp_path))
    for upto in (9, 14, 19, 22):
        assert checkpoint.source_files(0, -1, upto) == [f"file:///in/part-{b}.csv" for b in range(upto + 1)]
    assert checkpoint.source_files(0, 12, 19) == [f"file:///in/part-{b}.csv" for b in range(13, 20)]
    # Spark deletes plain files a compact file holds: the compact file still names them
    for b in range(9):
        (log / str(b)).unlink()
    assert checkpoint.source_files(0, 2, 5) == [f"file:///in/part-{b}.csv" for b in range(3, 6)]


def test_a_savepoint_of_sparkstates_file_source_records_its_position_not_its_files(tmp_path):
    """A local FileSource's offset is the last file read, by (modification time, path): the
    savepoint's ``source_offset`` holds it, and ``source_files`` only what an older savepoint
    restored into the checkpoint named (those files are still skipped)."""
    from sparkstate.runtime.checkpoint.directory import CheckpointDir
    from sparkstate.runtime.savepoints.take import _files_read

    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "3").write_text('v1\n{"batchWatermarkMs":0}\n{"mtime":1700000000000,"path":"/in/b.csv"}')
    checkpoint = CheckpointDir.open(str(tmp_path))
    assert checkpoint.batch_source_offsets(3) == [{"mtime": 1_700_000_000_000, "path": "/in/b.csv"}]
    assert _files_read(checkpoint, {}, 3) is None
    older = {"restored_from": {"savepoint": "/sp", "source_files": ["file:///in/0.json"]}}
    assert _files_read(checkpoint, older, 3) == ["file:///in/0.json"]
