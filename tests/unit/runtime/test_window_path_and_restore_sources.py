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
from sparkstate.runtime.planner import explain, native_blockers, plan
from sparkstate.runtime.spark_sources import (
    batch_events,
    restore_notes,
    restored_offset,
    resumes,
    start_options,
)

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
    (FileSource("/tmp", "k string", "csv"), "skips the files the savepoint's batch had read"),
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
