"""Windows on real Spark: Python path vs native path vs harness, side outputs, restarts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from spark_helpers import FAST, same_rows, write_json_files

from sparkstate import (
    DataFrameSource,
    EventTimeSessionWindows,
    Job,
    ListSource,
    MemorySink,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    UpiPayments,
    WatermarkStrategy,
    agg,
)
from sparkstate.runtime.streaming.planner import native_blockers, plan

MIN = 60_000
SCHEMA = "ts bigint, k string, v double"


def _rows(rows: list[dict]) -> list[tuple]:
    return sorted(tuple(r.values()) for r in rows)


def upi_per_minute(sink, events=30_000, path="auto", assigner=None):
    gen = UpiPayments(events=events, merchants=500, max_batch=10_000, events_per_second=200)
    wm = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5))
    return (
        Job("upi-per-minute-test").source(gen, watermark=wm).key_by("merchant_id")
        .window(assigner or TumblingEventTimeWindows.of(timedelta(minutes=1)))
        .aggregate(agg.count("payments"), agg.sum("amount", "total"), agg.max("amount", "largest"))
        .sink(sink).with_settings(window_path=path, **FAST)
    )


def test_python_and_native_paths_agree_row_for_row(spark, tmp_path):
    native_sink, python_sink = MemorySink(), MemorySink()
    native = upi_per_minute(native_sink, path="native")
    assert plan(native).path == "native"
    # auto runs the Python path: the faster one, and the one that takes savepoints
    assert plan(upi_per_minute(native_sink)).path == "python" and native_blockers(native) == []
    r1 = native.run(checkpoint_dir=tmp_path / "native", spark=spark)
    r2 = upi_per_minute(python_sink, path="python").run(checkpoint_dir=tmp_path / "python", spark=spark)
    assert r1.completed and r2.completed and r1.plan == "native" and r2.plan == "python"
    assert len(native_sink.rows()) > 500
    same_rows(native_sink.rows(), python_sink.rows())
    # and the harness, fed the same micro-batches
    job = upi_per_minute(MemorySink())
    events = job.source_spec.events_as_dicts()
    h = job.harness()
    for i in range(0, len(events), 10_000):
        h.process_batch(events[i : i + 10_000])
    h.finish()
    same_rows(h.output, python_sink.rows())


def test_sliding_windows_agree_between_paths(spark, tmp_path):
    sliding = SlidingEventTimeWindows.of(timedelta(minutes=2), timedelta(minutes=1))
    a, b = MemorySink(), MemorySink()
    upi_per_minute(a, events=8_000, assigner=sliding).run(checkpoint_dir=tmp_path / "n", spark=spark)
    upi_per_minute(b, events=8_000, assigner=sliding, path="python").run(checkpoint_dir=tmp_path / "p", spark=spark)
    assert a.rows()
    same_rows(a.rows(), b.rows())


def _list_job(batches, sink, late=None, dead=None, assigner=None, lateness=0, timestamps=None):
    wm = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("ts")
    if timestamps is not None:
        wm = wm.with_timestamp_assigner(timestamps)
    job = (
        Job("win-list").source(ListSource(batches, SCHEMA), watermark=wm).key_by("k")
        .window(assigner or TumblingEventTimeWindows.of(MIN))
    )
    if lateness:
        job = job.allowed_lateness(lateness)
    if late is not None:
        job = job.side_output_late_data(late)
    if dead is not None:
        job = job.dead_letters(dead)
    return job.aggregate(agg.count("n"), agg.sum("v", "total")).sink(sink).with_settings(**FAST)


def test_late_data_and_dead_letters_go_to_side_outputs(spark, checkpoint):
    out, late, dead = MemorySink(), MemorySink(), MemorySink()
    batches = [
        [{"ts": 1_000, "k": "a", "v": 1.0}, {"ts": 2 * MIN, "k": "a", "v": 1.0}],
        [{"ts": 5_000, "k": "a", "v": 7.0}, {"ts": None, "k": "b", "v": 2.0}],  # late; no event time
        [{"ts": 2 * MIN + 1, "k": "a", "v": 1.0}],
    ]
    job = _list_job(batches, out, late=late, dead=dead)
    assert plan(job).path == "python"
    result = job.run(checkpoint_dir=checkpoint, spark=spark)
    assert result.completed
    assert _rows(out.rows()) == [("a", 0, MIN, 1, 1.0), ("a", 2 * MIN, 3 * MIN, 2, 2.0)]
    assert late.rows() == [{"ts": 5_000, "k": "a", "v": 7.0}]
    assert [d["reason"] for d in dead.rows()] == ["no event time: column 'ts' is null"]
    assert result.side_outputs == {"dead_letters": 1, "late_data": 1}


def test_a_parquet_sink_gets_the_main_rows_of_the_pass_that_gathers_the_side_rows(spark, tmp_path):
    """A sink that writes a batch in one Spark action (Parquet, noop) takes the main rows while
    an observed metric gathers the side rows in the same pass (nothing cached): each row once,
    late rows of keys on both partitions, dead letters, replayable batch folders."""
    import pyarrow.dataset as ds

    from sparkstate import ParquetSink

    keys = [f"k{i}" for i in range(40)]  # both shuffle partitions hold some
    batches = [
        [{"ts": 1_000, "k": k, "v": 1.0} for k in keys] + [{"ts": 2 * MIN, "k": "k0", "v": 1.0}],
        [{"ts": 5_000 + i, "k": k, "v": float(i)} for i, k in enumerate(keys)] + [{"ts": None, "k": "b", "v": 2.0}],
        [{"ts": 2 * MIN + 1, "k": "k0", "v": 1.0}],
    ]
    out, late, dead = (ParquetSink(str(tmp_path / name)) for name in ("out", "late", "dead"))
    result = _list_job(batches, out, late=late, dead=dead).run(checkpoint_dir=tmp_path / "ckpt", spark=spark)
    assert result.completed and result.side_outputs == {"dead_letters": 1, "late_data": 40}

    def rows(sink):
        return ds.dataset(sink.path, partitioning="hive").to_table().to_pylist()

    assert sorted((r["k"], r["n"], r["total"]) for r in rows(out)) == sorted(
        [(k, 1, 1.0) for k in keys] + [("k0", 2, 2.0)]  # every key's first minute; k0's third
    )
    got_late = rows(late)
    assert sorted((r["k"], r["v"]) for r in got_late) == [(k, float(i)) for i, k in sorted(enumerate(keys), key=lambda p: p[1])]
    assert {r["batch_id"] for r in got_late} == {1}
    assert [r["reason"] for r in rows(dead)] == ["no event time: column 'ts' is null"]


def test_late_rows_are_kept_in_the_checkpoint_or_counted_on_the_native_path(spark, tmp_path):
    import pyarrow.dataset as ds

    batches = [[{"ts": MIN, "k": "a", "v": 1.0}], [{"ts": 10, "k": "a", "v": 3.0}]]
    python = _list_job(batches, MemorySink())
    python.run(checkpoint_dir=tmp_path / "p", spark=spark)
    kept = ds.dataset(tmp_path / "p" / "side-outputs" / "late_data", partitioning="hive").to_table().to_pylist()
    assert [(r["k"], r["v"]) for r in kept] == [("a", 3.0)]
    # a late event keeps the job off the native path: Spark SQL would aggregate it
    assert native_blockers(_list_job(batches, MemorySink()))
    assert native_blockers(_list_job([batches[1], batches[0]], MemorySink())) == []


@pytest.mark.parametrize("path", ["python", "native"])
def test_restart_between_last_element_and_firing_fires_once(path, spark, checkpoint):
    sink = MemorySink()
    first = [[{"ts": 10, "k": "a", "v": 1.0}, {"ts": 20, "k": "b", "v": 2.0}]]
    r1 = _list_job(first, sink).with_settings(window_path=path)
    # no end of input: the window is open when the first run stops
    from dataclasses import replace

    r1 = replace(r1, source_spec=ListSource(first, SCHEMA, end_of_input=False))
    assert r1.run(checkpoint_dir=checkpoint, spark=spark).completed
    assert sink.rows() == []
    both = first + [[{"ts": MIN + 5, "k": "a", "v": 1.0}], [{"ts": 2 * MIN, "k": "c", "v": 1.0}]]
    second = _list_job(both, sink).with_settings(window_path=path)
    assert second.run(checkpoint_dir=checkpoint, spark=spark).plan == path
    assert _rows(sink.rows()) == [
        ("a", 0, MIN, 1, 1.0), ("a", MIN, 2 * MIN, 1, 1.0), ("b", 0, MIN, 1, 2.0), ("c", 2 * MIN, 3 * MIN, 1, 1.0)
    ]


def test_sessions_on_spark_match_the_harness(spark, checkpoint):
    gap = EventTimeSessionWindows.with_gap(10 * MIN)
    batches = [
        [{"ts": 0, "k": "u", "v": 1.0}, {"ts": 25 * MIN, "k": "u", "v": 1.0}],
        [{"ts": 12 * MIN, "k": "u", "v": 1.0}, {"ts": 3 * MIN, "k": "w", "v": 1.0}],
        [{"ts": 90 * MIN, "k": "u", "v": 1.0}],
    ]
    sink = MemorySink()
    job = _list_job(batches, sink, assigner=gap)
    job.run(checkpoint_dir=checkpoint, spark=spark)
    h = job.harness()
    for b in batches:
        h.process_batch(b)
    h.finish()
    assert _rows(sink.rows()) == _rows(h.output)


def test_a_timestamp_assigner_function_drives_windows_and_watermark_on_spark(spark, checkpoint):
    # event time is ts + v minutes; the function runs where events are packed (the watermark)
    # and in the operator; an event it cannot handle is a dead letter on both engines
    batches = [
        [{"ts": 0, "k": "a", "v": 0.0}, {"ts": 0, "k": "a", "v": 1.0}, {"ts": 5, "k": "b", "v": None}],
        [{"ts": 0, "k": "a", "v": 3.0}],
    ]
    sink, dead = MemorySink(), MemorySink()
    job = _list_job(batches, sink, dead=dead, timestamps=lambda e: e["ts"] + int(e["v"]) * MIN)
    assert plan(job).path == "python"
    assert job.run(checkpoint_dir=checkpoint, spark=spark).completed
    h = job.harness()
    for b in batches:
        h.process_batch(b)
    h.finish()
    assert _rows(sink.rows()) == _rows(h.output) == [
        ("a", 0, MIN, 1, 0.0), ("a", MIN, 2 * MIN, 1, 1.0), ("a", 3 * MIN, 4 * MIN, 1, 3.0)
    ]
    assert [d["reason"] for d in dead.rows()] == [
        "timestamp assigner failed: TypeError: int() argument must be a string, a bytes-like object "
        "or a real number, not 'NoneType'"
    ]


def test_builtin_aggregates_over_a_dataframe_take_their_output_from_its_columns(spark, checkpoint, tmp_path):
    folder = tmp_path / "in"
    write_json_files(folder, [
        [{"k": "a", "v": 1.0, "ts": "2025-01-01T00:00:10Z"}, {"k": "b", "v": 2.0, "ts": "2025-01-01T00:00:20Z"},
         {"k": "a", "v": 3.0, "ts": "2025-01-01T00:00:50Z"}],
        [{"k": "a", "v": 4.0, "ts": "2025-01-01T00:01:10Z"}],
        [{"k": "a", "v": 5.0, "ts": "2025-01-01T00:05:00Z"}],  # moves the watermark past the first two minutes
    ])
    source = DataFrameSource(
        lambda s: s.readStream.schema("k string, v double, ts timestamp").option("maxFilesPerTrigger", 1).json(str(folder))
    )
    sink = MemorySink()
    job = (
        Job("df-windows").source(source, watermark=WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("ts"))
        .key_by("k").window(TumblingEventTimeWindows.of(MIN)).aggregate(agg.count("n"), agg.sum("v", "total"))
        .sink(sink).with_settings(**FAST)
    )
    assert job.output is None  # the DataFrame's columns are known once Spark builds it
    result = job.run(checkpoint_dir=checkpoint, spark=spark, timeout=120, until=lambda r: len(sink.rows()) >= 3)
    assert result.plan == "python"
    start = 1_735_689_600_000
    assert _rows(sink.rows()) == [
        ("a", start, start + MIN, 2, 4.0), ("a", start + MIN, start + 2 * MIN, 1, 4.0), ("b", start, start + MIN, 1, 2.0)
    ]


@pytest.mark.parametrize("path", ["native", "python"])
def test_rows_out_are_the_rows_the_sink_holds(path, spark, tmp_path):
    """Spark counts a batch's rows out only for its noop sink: sparkstate counts them itself, so
    a window job's run, its progress, its checkpoint records, the metrics endpoint and the
    summary all say how many rows its Parquet output holds."""
    import re

    import pyarrow.dataset as ds
    from rich.console import Console

    from sparkstate import ParquetSink
    from sparkstate.metrics.endpoint import JobMetrics
    from sparkstate.metrics.progress import summary_table

    sink = ParquetSink(str(tmp_path / "out"))
    metrics = JobMetrics("upi-per-minute-test")
    result = upi_per_minute(sink, events=3_000, path=path).run(checkpoint_dir=tmp_path / "ckpt", spark=spark,
                                                                on_progress=metrics.on_progress)
    written = ds.dataset(sink.path, partitioning="hive").to_table().num_rows
    assert result.completed and result.plan == path and written > 0
    assert result.output_rows == written
    assert sum(p["rowsOut"] for p in result.progress) == written
    assert sum(c.rows_out for c in result.checkpoints) == written
    assert metrics.values()["numRecordsOut"] == written
    console = Console(width=120, record=True)
    console.print(summary_table(result))
    assert re.search(rf"│ output rows +│ {written:,} +│", console.export_text())
