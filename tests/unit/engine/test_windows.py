"""Windows on the harness: hand-written golden cases for Flink's window semantics."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from sparkstate import (
    EventTimeSessionWindows,
    Job,
    JobDefinitionError,
    ListSource,
    MemorySink,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WatermarkStrategy,
    agg,
)
from sparkstate.api.state import AggregateFunction
from sparkstate.api.windows import TimeWindow

MIN = 60_000
SCHEMA = "ts bigint, k string, v double, kind string"


def ev(ts: int, k: str = "a", v: float = 1.0, kind: str = "view") -> dict:
    return {"ts": ts, "k": k, "v": v, "kind": kind}


def job(assigner, ooo: int = 0) -> Job:
    wm = WatermarkStrategy.for_bounded_out_of_orderness(ooo).with_timestamp_column("ts")
    return Job("w").source(ListSource([], SCHEMA), watermark=wm).key_by("k").window(assigner)


def counts(j: Job):
    return j.aggregate(agg.count("n"), agg.sum("v", "total")).sink(MemorySink())


def test_tumbling_window_is_end_exclusive_and_fires_at_end_minus_one():
    h = counts(job(TumblingEventTimeWindows.of(timedelta(minutes=1)))).harness()
    h.process_batch([ev(0), ev(MIN - 1)])  # watermark MIN - 2 after this batch
    assert h.process_batch([ev(MIN)]) == []  # MIN starts the next window; watermark now MIN - 1
    assert h.process_batch([]) == [
        {"k": "a", "window_start": 0, "window_end": MIN, "n": 2, "total": 2.0}
    ]
    assert h.finish() == [{"k": "a", "window_start": MIN, "window_end": 2 * MIN, "n": 1, "total": 1.0}]
    assert h.keys() == []  # window state is freed once the windows are done


def test_watermark_from_out_of_orderness_fires_in_a_later_batch():
    h = counts(job(TumblingEventTimeWindows.of(MIN), ooo=5_000)).harness()
    assert h.process_batch([ev(10), ev(MIN + 4_999)]) == []
    # watermark = 64_999 - 5_000 - 1 = 59_998: not yet
    assert h.process_batch([ev(MIN + 5_000)]) == []
    # watermark = 59_999 now: the first window fires at the start of the next batch
    assert h.process_batch([]) == [{"k": "a", "window_start": 0, "window_end": MIN, "n": 1, "total": 1.0}]


def test_late_element_within_lateness_refires_and_beyond_goes_to_side_output():
    j = counts(job(TumblingEventTimeWindows.of(MIN)).allowed_lateness(timedelta(seconds=30)))
    h = j.harness()
    h.process_batch([ev(1_000)])
    assert h.advance_watermark(MIN - 1) == [{"k": "a", "window_start": 0, "window_end": MIN, "n": 1, "total": 1.0}]
    # late by less than the allowed lateness: the window fires again with the element added
    assert h.process_batch([ev(2_000, v=5.0)]) == [
        {"k": "a", "window_start": 0, "window_end": MIN, "n": 2, "total": 6.0}
    ]
    # end - 1 + 30 s <= watermark: the window is cleaned up and later elements are late data
    assert h.advance_watermark(MIN - 1 + 30_000) == []
    assert h.keys() == []
    assert h.process_batch([ev(3_000)]) == []
    assert h.side_output("late_data") == [ev(3_000)]


def test_element_late_without_lateness_goes_to_late_data():
    h = counts(job(TumblingEventTimeWindows.of(MIN))).harness()
    h.process_batch([ev(0), ev(2 * MIN)])  # watermark 2*MIN - 1 after this batch
    # [0, MIN) fires first (due timers run before the batch's elements), so the element is late
    assert [r["window_end"] for r in h.process_batch([ev(MIN - 1, v=9.0)])] == [MIN]
    assert h.side_output("late_data") == [ev(MIN - 1, v=9.0)]


def test_sliding_windows_hold_each_element_size_over_slide_times():
    h = counts(job(SlidingEventTimeWindows.of(timedelta(minutes=10), timedelta(minutes=5)))).harness()
    h.process_batch([ev(7 * MIN)])
    out = h.finish()
    assert [(r["window_start"], r["window_end"]) for r in out] == [(0, 10 * MIN), (5 * MIN, 15 * MIN)]


def test_session_merges_two_earlier_sessions():
    gap = 15 * MIN
    h = counts(job(EventTimeSessionWindows.with_gap(gap), ooo=30 * MIN)).harness()
    h.process_batch([ev(0), ev(20 * MIN)])  # two sessions: [0, 15m) and [20m, 35m)
    assert h.timers("a") and len(h.state("a")["windows"]) == 2
    h.process_batch([ev(12 * MIN)])  # [12m, 27m) touches both: one session [0, 35m)
    assert list(h.state("a")["windows"]) == [(0, 35 * MIN)]
    assert [t for _, t in h.timers("a")] == [35 * MIN - 1]
    assert h.finish() == [{"k": "a", "window_start": 0, "window_end": 35 * MIN, "n": 3, "total": 3.0}]


def test_sessions_that_only_touch_merge_as_in_flink():
    h = counts(job(EventTimeSessionWindows.with_gap(10))).harness()
    h.process_batch([ev(0), ev(10)])  # [0, 10) and [10, 20) touch
    assert h.finish() == [{"k": "a", "window_start": 0, "window_end": 20, "n": 2, "total": 2.0}]


def test_session_gap_closes_sessions_per_key():
    h = counts(job(EventTimeSessionWindows.with_gap(100))).harness()
    h.process_batch([ev(0, "a"), ev(50, "a"), ev(0, "b"), ev(500, "a")])
    rows = h.finish()
    assert sorted((r["k"], r["window_start"], r["window_end"], r["n"]) for r in rows) == [
        ("a", 0, 150, 2), ("a", 500, 600, 1), ("b", 0, 100, 1)
    ]


def test_reduce_and_process_window_functions():
    red = job(TumblingEventTimeWindows.of(MIN)).reduce(
        lambda a, b: {**a, "v": max(a["v"], b["v"])}, output_schema="k string, v double, window_end timestamp"
    ).sink(MemorySink())
    h = red.harness()
    h.process_batch([ev(1, v=3.0), ev(2, v=7.0), ev(3, v=5.0)])
    assert h.finish() == [{"k": "a", "v": 7.0, "window_end": MIN}]

    class Kinds(ProcessWindowFunction):
        def process(self, key, context, elements):
            for kind, n in sorted(Counter(e["kind"] for e in elements).items()):
                yield {"k": key, "kind": kind, "n": n, "end": context.window.end}

    proc = job(TumblingEventTimeWindows.of(MIN)).process(
        Kinds(), output_schema="k string, kind string, n bigint, end bigint"
    ).sink(MemorySink())
    h = proc.harness()
    h.process_batch([ev(1, kind="view"), ev(2, kind="buy"), ev(3, kind="view")])
    assert h.finish() == [{"k": "a", "kind": "buy", "n": 1, "end": MIN}, {"k": "a", "kind": "view", "n": 2, "end": MIN}]


def test_processing_time_windows_fire_without_input():
    j = (
        Job("p").source(ListSource([], SCHEMA)).key_by("k")
        .window(TumblingProcessingTimeWindows.of(1_000)).aggregate(agg.count("n")).sink(MemorySink())
    )
    h = j.harness(processing_time=500)
    h.process_batch([ev(0), ev(0)])
    assert h.advance_processing_time(998) == []
    assert h.advance_processing_time(999) == [{"k": "a", "window_start": 0, "window_end": 1_000, "n": 2}]


def test_builtin_aggregates_skip_nulls_and_keep_integer_sums():
    schema = "ts bigint, k string, x bigint"
    wm = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("ts")
    j = (
        Job("a").source(ListSource([], schema), watermark=wm).key_by("k").window(TumblingEventTimeWindows.of(10))
        .aggregate(agg.count(), agg.sum("x"), agg.min("x"), agg.max("x"), agg.avg("x")).sink(MemorySink())
    )
    assert list(zip(j.output.names, j.output.types))[3:] == [
        ("count", "bigint"), ("sum_x", "bigint"), ("min_x", "bigint"), ("max_x", "bigint"), ("avg_x", "double")
    ]
    h = j.harness()
    h.process_batch([{"ts": 1, "k": "a", "x": 4}, {"ts": 2, "k": "a", "x": None}, {"ts": 3, "k": "a", "x": 2}])
    h.process_batch([{"ts": 11, "k": "b", "x": None}])
    assert h.finish() == [
        {"k": "a", "window_start": 0, "window_end": 10, "count": 3, "sum_x": 6, "min_x": 2, "max_x": 4, "avg_x": 3.0},
        {"k": "b", "window_start": 10, "window_end": 20, "count": 1, "sum_x": None, "min_x": None, "max_x": None, "avg_x": None},
    ]


def test_events_without_event_time_become_dead_letters_and_the_job_goes_on():
    h = counts(job(TumblingEventTimeWindows.of(MIN))).harness()
    h.process_batch([ev(1), {"ts": None, "k": "a", "v": 1.0, "kind": "x"}, {"ts": "yesterday", "k": "a", "v": 2.0, "kind": "x"}])
    dead = h.side_output("dead_letters")
    assert [d["reason"] for d in dead] == [
        "no event time: column 'ts' is null",
        "event time 'yesterday' in column 'ts' is not a timestamp",
    ]
    assert '"v": 2.0' in dead[1]["raw"]
    assert h.finish()[0]["n"] == 1


@pytest.mark.parametrize(
    "build, arg",
    [
        (lambda: TumblingEventTimeWindows.of(0), "window size"),
        (lambda: TumblingEventTimeWindows.of(timedelta(seconds=-1)), "window size"),
        (lambda: SlidingEventTimeWindows.of(10, 0), "window slide"),
        (lambda: EventTimeSessionWindows.with_gap(-5), "session gap"),
        (lambda: TumblingProcessingTimeWindows.of(0), "window size"),
    ],
)
def test_bad_window_sizes_are_rejected_naming_the_argument(build, arg):
    with pytest.raises(JobDefinitionError, match=f"{arg} must be positive"):
        build()


def test_window_job_definition_errors():
    j = job(TumblingEventTimeWindows.of(MIN))
    with pytest.raises(JobDefinitionError, match="window function"):
        j.sink(MemorySink()).validate()
    with pytest.raises(JobDefinitionError, match="need event time"):
        Job("x").source(ListSource([], SCHEMA)).key_by("k").window(TumblingEventTimeWindows.of(MIN))
    with pytest.raises(JobDefinitionError, match="key_by"):
        Job("x").window(TumblingEventTimeWindows.of(MIN))
    with pytest.raises(JobDefinitionError, match="no such column"):
        j.aggregate(agg.sum("nope"))
    with pytest.raises(JobDefinitionError, match="allowed_lateness must not be negative"):
        j.allowed_lateness(-1)


def test_time_window_helpers():
    w = TimeWindow(0, 10)
    assert w.max_timestamp() == 9
    assert w.intersects(TimeWindow(10, 20)) and not w.intersects(TimeWindow(11, 20))
    assert w.cover(TimeWindow(5, 30)) == TimeWindow(0, 30)


def test_timestamp_assigner_function_gives_event_time_and_dead_letters_its_failures():
    def seconds_to_ms(e: dict) -> int:
        return int(e["kind"]) * 1000  # event time in seconds, in a text column

    wm = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(seconds_to_ms)
    j = Job("w").source(ListSource([], SCHEMA), watermark=wm).key_by("k").window(TumblingEventTimeWindows.of(MIN))
    h = counts(j).harness()
    assert h.process_batch([ev(0, kind="1"), ev(0, kind="59"), ev(0, kind="60"), ev(0, kind="soon")]) == []
    assert h.watermark == 59_999  # from the function's times: max 60 s - 0 - 1 ms
    assert h.process_batch([ev(0, kind="130")]) == [
        {"k": "a", "window_start": 0, "window_end": MIN, "n": 2, "total": 2.0},
    ]
    (dead,) = h.side_output("dead_letters")
    assert dead["reason"].startswith("timestamp assigner failed: ValueError")
    wm_bad = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e: e["kind"])
    h2 = counts(
        Job("w").source(ListSource([], SCHEMA), watermark=wm_bad).key_by("k").window(TumblingEventTimeWindows.of(MIN))
    ).harness()
    h2.process_batch([ev(0, kind="x")])
    assert h2.side_output("dead_letters")[0]["reason"] == "timestamp assigner returned 'x', not epoch ms or a datetime"
    with pytest.raises(JobDefinitionError, match="function of the event"):
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("ts")


def test_aggregate_with_a_window_function_sees_the_aggregate_and_the_window():
    class Total(AggregateFunction):
        def create_accumulator(self):
            return 0.0

        def add(self, value, acc):
            return acc + value["v"]

        def merge(self, a, b):
            return a + b

        def get_result(self, acc):
            return acc

    class Label(ProcessWindowFunction):
        def process(self, key, context, elements):
            (total,) = elements
            yield {"k": key, "label": f"{key}@{context.window.start}", "total": total}

    j = job(TumblingEventTimeWindows.of(MIN)).aggregate(
        Total(), window_function=Label(), output_schema="k string, label string, total double"
    )
    h = j.sink(MemorySink()).harness()
    h.process_batch([ev(1, v=2.0), ev(2, v=3.0), ev(MIN + 1, "b", 1.0)])
    assert h.finish() == [{"k": "a", "label": "a@0", "total": 5.0}, {"k": "b", "label": f"b@{MIN}", "total": 1.0}]
    with pytest.raises(JobDefinitionError, match="ProcessWindowFunction"):
        job(TumblingEventTimeWindows.of(MIN)).aggregate(Total(), window_function=lambda *a: a, output_schema="k string")
    with pytest.raises(JobDefinitionError, match="needs output_schema"):
        job(TumblingEventTimeWindows.of(MIN)).aggregate(agg.count(), window_function=Label())


@pytest.mark.parametrize("columnar", [True, False], ids=["columns", "dicts"])
@pytest.mark.parametrize("assigner", [TumblingEventTimeWindows.of(MIN), SlidingEventTimeWindows.of(3 * MIN, MIN)])
def test_windows_over_random_batches_match_a_direct_computation(assigner, columnar):
    # the operator's whole-group pass against Flink's rules computed directly: an element
    # counts in each of its windows that has not fired (end - 1 > watermark of its batch);
    # one in none of them is late data. Events reach it as columns (as on Spark), or as
    # dicts when their fields differ (an extra field on one event per batch)
    import random

    rnd = random.Random(3)
    batches = [
        [ev(rnd.randrange(0, 20 * MIN), rnd.choice("abc"), float(rnd.randrange(5))) for _ in range(40)]
        for _ in range(8)
    ]
    if not columnar:
        for b in batches:
            b[0] = {**b[0], "extra": 1}
    expected: dict = {}
    late = []
    watermark, top = -(2**63), None
    for batch in batches:
        for e in batch:
            open_windows = [w for w in assigner.bounds(e["ts"]) if w[1] - 1 > watermark]
            if not open_windows:
                late.append(e)
            for w in open_windows:
                cell = expected.setdefault((e["k"], *w), [0, 0.0])
                cell[0] += 1
                cell[1] += e["v"]
        top = max([top or 0, *(e["ts"] for e in batch)])
        watermark = top - 1
    h = counts(job(assigner)).harness()
    out = [r for b in batches for r in h.process_batch(b)] + h.finish()
    assert sorted((r["k"], r["window_start"], r["window_end"], r["n"], r["total"]) for r in out) == sorted(
        (k, s, e, n, t) for (k, s, e), (n, t) in expected.items()
    )
    assert h.side_output("late_data") == late and late, "the input has late events"
    assert h.records == {}, "every window's state is freed once it fired"


def test_builtin_rows_follow_a_given_output_schema_order():
    j = job(TumblingEventTimeWindows.of(MIN)).aggregate(
        agg.sum("v", "total"), agg.count("n"),
        output_schema="total double, n bigint, window_end timestamp, k string, window_start timestamp",
    )
    h = j.sink(MemorySink()).harness()
    h.process_batch([ev(1, v=2.0), ev(2, v=3.0)])
    assert h.finish() == [{"total": 5.0, "n": 2, "window_end": MIN, "k": "a", "window_start": 0}]


def test_window_state_of_another_layout_is_refused_with_the_fix():
    from sparkstate.api.state import TIMERS_FIELD
    from sparkstate.errors import CheckpointMismatchError

    h = counts(job(TumblingEventTimeWindows.of(MIN))).harness()
    # per-key window state, as an earlier layout kept it: {key: {windows: {(start, end): acc}}}
    h.records["a"] = {"windows": {(0, MIN): [1, 1.0]}, TIMERS_FIELD: {(0, MIN - 1)}}
    with pytest.raises(CheckpointMismatchError, match="fresh checkpoint"):
        h.finish()
