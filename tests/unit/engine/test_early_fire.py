"""Early firing (``JobDescription.early_fire``): each micro-batch emits the windows it changed,
and the window still fires at its end. The randomised comparison with Flink's rule is in
``test_flink_rules.py``; here the API, the concrete cases and the plan."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sparkstate import Job, ListSource, NoopSink, WatermarkStrategy, agg
from sparkstate.api.windows import (
    EventTimeSessionWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from sparkstate.errors import JobDefinitionError
from sparkstate.runtime.streaming.planner import explain, native_blockers

SCHEMA = "ts bigint, k string, v bigint"
WATERMARK = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(0)).with_timestamp_column("ts")


def keyed() -> Job:
    return Job("early").source(ListSource([], SCHEMA, "ts"), watermark=WATERMARK).key_by("k")


def rows(out: list[dict]) -> list[tuple]:
    return [(r["k"], r["window_start"], r["window_end"], r["n"], r["total"]) for r in out]


def test_early_fire_needs_a_tumbling_or_sliding_window():
    with pytest.raises(JobDefinitionError, match=r"early_fire\(\) applies to windows: call .window"):
        keyed().early_fire()
    with pytest.raises(JobDefinitionError, match="not event-time session windows"):
        keyed().window(EventTimeSessionWindows.with_gap(timedelta(seconds=1))).early_fire()
    with pytest.raises(JobDefinitionError, match="not event-time session windows"):  # windows replaced later
        keyed().window(TumblingEventTimeWindows.of(1000)).early_fire().window(EventTimeSessionWindows.with_gap(10))


def test_each_batch_emits_the_windows_it_changed_and_the_window_fires_at_its_end():
    job = (keyed().window(TumblingEventTimeWindows.of(timedelta(seconds=10))).early_fire()
           .aggregate(agg.count("n"), agg.sum("v", "total")).sink(NoopSink()))
    h = job.harness()
    assert rows(h.process_batch([{"ts": 1_000, "k": "a", "v": 1}, {"ts": 2_000, "k": "b", "v": 5},
                                 {"ts": 3_000, "k": "a", "v": 2}])) == [("a", 0, 10_000, 2, 3), ("b", 0, 10_000, 1, 5)]
    # only b changed; its window is still open (watermark 2999)
    assert rows(h.process_batch([{"ts": 4_000, "k": "b", "v": 1}])) == [("b", 0, 10_000, 2, 6)]
    # nothing changed: nothing early; the watermark (3999) has not reached the end
    assert h.process_batch([]) == []
    # a's next window opens; the first one fires for both keys once the watermark is past 9999
    assert rows(h.process_batch([{"ts": 12_000, "k": "a", "v": 7}])) == [("a", 10_000, 20_000, 1, 7)]
    assert sorted(rows(h.process_batch([]))) == [("a", 0, 10_000, 2, 3), ("b", 0, 10_000, 2, 6)]
    assert rows(h.finish()) == [("a", 10_000, 20_000, 1, 7)]


def test_sliding_windows_fire_early_in_window_order():
    job = (keyed().window(SlidingEventTimeWindows.of(timedelta(seconds=10), timedelta(seconds=5))).early_fire()
           .aggregate(agg.count("n"), agg.sum("v", "total")).sink(NoopSink()))
    h = job.harness()
    out = rows(h.process_batch([{"ts": 7_000, "k": "a", "v": 1}, {"ts": 1_000, "k": "b", "v": 2}]))
    assert out == [("b", -5_000, 5_000, 1, 2), ("a", 0, 10_000, 1, 1), ("b", 0, 10_000, 1, 2), ("a", 5_000, 15_000, 1, 1)]


def test_a_late_element_changes_no_window_and_fires_nothing_early():
    job = (keyed().window(TumblingEventTimeWindows.of(timedelta(seconds=1))).early_fire()
           .aggregate(agg.count("n"), agg.sum("v", "total")).sink(NoopSink()))
    h = job.harness()
    h.process_batch([{"ts": 5_000, "k": "a", "v": 1}])
    assert rows(h.process_batch([{"ts": 100, "k": "a", "v": 1}])) == []  # [0, 1000) is late
    assert h.side_output("late_data") == [{"ts": 100, "k": "a", "v": 1}]


def test_processing_time_windows_fire_early_too():
    job = (Job("early-pt").source(ListSource([], SCHEMA)).key_by("k")
           .window(TumblingProcessingTimeWindows.of(timedelta(seconds=10))).early_fire()
           .aggregate(agg.count("n"), agg.sum("v", "total")).sink(NoopSink()))
    h = job.harness()
    assert rows(h.process_batch([{"ts": 0, "k": "a", "v": 4}], processing_time=1_000)) == [("a", 0, 10_000, 1, 4)]
    assert rows(h.advance_processing_time(12_000)) == [("a", 0, 10_000, 1, 4)]  # its end: the final row
    # an element of a window that ends at this very batch's time: its final row, once
    assert rows(h.process_batch([{"ts": 0, "k": "b", "v": 1}], processing_time=19_999)) == [("b", 10_000, 20_000, 1, 1)]


def test_explain_says_it_fires_early_and_keeps_it_off_the_native_path():
    job = (keyed().window(TumblingEventTimeWindows.of(timedelta(seconds=10))).early_fire()
           .aggregate(agg.count("n"), agg.sum("v", "total")).sink(NoopSink()))
    assert "it fires early (Spark SQL emits a window once)" in native_blockers(job)
    assert "early firing: each micro-batch emits the windows it changed" in explain(job)
