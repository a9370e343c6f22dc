"""The watermark of a job with two keyed inputs, against an independent model of Flink's rule.

Flink (``AbstractStreamOperator`` over ``CombinedWatermarkStatus``): a two-input operator's
watermark is the minimum of the watermarks of its inputs that are not idle; an input that has
seen no event has ``Long.MIN_VALUE``, so it holds the watermark there until it is marked idle
(``WatermarkStrategy.withIdleness``: no event for the timeout); the watermark never goes back,
and stays where it is while every input is idle. Each input's own watermark is the
bounded-out-of-orderness one: ``max(ts) - out_of_orderness - 1``. Spark's watermark starts at
0, so none exists before it passes the epoch (both engines read that as no watermark).
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from sparkstate import Job, ListSource, MemorySink, WatermarkStrategy
from sparkstate.api.connected import KeyedCoProcessFunction
from sparkstate.errors import JobDefinitionError

MIN = -(2**63)


class Watermarks(KeyedCoProcessFunction):
    def process_element1(self, e, ctx):
        yield {"side": 1, "wm": ctx.timer_service().current_watermark()}

    def process_element2(self, e, ctx):
        yield {"side": 2, "wm": ctx.timer_service().current_watermark()}


def model(batches, delays, idle_timeouts):
    """``(watermark the batch runs with, watermark after it)`` for each batch of
    ``(first input's times, second input's times, processing time)``.

    A batch runs with the watermark of the batches before it, taken at its own processing
    time (an input may have gone idle meanwhile). An input is idle when ``now - last >=
    timeout``, ``last`` being the processing time of the last batch that brought it an event,
    or of the first batch if none did."""
    top: list = [None, None]
    last = [batches[0][2], batches[0][2]] if batches else [0, 0]
    mark = MIN

    def combined(now, mark):
        active = [i for i in (0, 1) if idle_timeouts[i] is None or now - last[i] < idle_timeouts[i]]
        if not active:
            return mark  # every input idle: the watermark stays
        lowest = min(MIN if top[i] is None else top[i] - delays[i] - 1 for i in active)
        return max(mark, lowest) if lowest > 0 else mark

    out = []
    for ts1, ts2, now in batches:
        mark = combined(now, mark)
        runs_with = mark
        for i, times in enumerate((ts1, ts2)):
            if times:
                top[i] = max([t for t in [top[i], *times] if t is not None])
                last[i] = now
        mark = combined(now, mark)
        out.append((runs_with, mark))
    return out


def ws(ms: int, idle: int | None = None) -> WatermarkStrategy:
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=ms)).with_timestamp_column("ts")
    return strategy if idle is None else strategy.with_idleness(timedelta(milliseconds=idle))


def two_inputs(first: WatermarkStrategy, second: WatermarkStrategy) -> Job:
    return (
        Job("wm")
        .source(ListSource([[]], "k string, ts bigint", "ts"), watermark=first)
        .key_by("k")
        .connect(ListSource([[]], "m string, ts bigint", "ts"), key_by="m", watermark=second)
        .process(Watermarks(), output_schema="side int, wm bigint")
        .sink(MemorySink())
    )


@pytest.mark.parametrize("seed", range(60))
def test_the_watermark_matches_flinks_rule(seed):
    rnd = random.Random(seed)
    delays = (rnd.choice([0, 5, 50]), rnd.choice([0, 5, 50]))
    idle = (rnd.choice([None, None, 1000, 3000]), rnd.choice([None, 1000, 3000]))
    quiet = (rnd.random() < 0.3, rnd.random() < 0.3)  # an input that is often silent, or never speaks at first
    now = 1_000_000
    batches = []
    for _ in range(rnd.randrange(1, 14)):
        now += rnd.choice([0, 100, 500, 1000, 2500])
        sides = [
            [rnd.randrange(0, 4000) for _ in range(rnd.randrange(0, 4))]
            if not quiet[i] or rnd.random() < 0.15 else []
            for i in (0, 1)
        ]
        batches.append((sides[0], sides[1], now))
    h = two_inputs(ws(delays[0], idle[0]), ws(delays[1], idle[1])).harness()
    got = []
    for ts1, ts2, at in batches:
        rows = h.process_batch([{"k": "a", "ts": t} for t in ts1], second=[{"m": "a", "ts": t} for t in ts2],
                               processing_time=at)
        got.append(({r["wm"] for r in rows}, h.watermark))
    for (seen, after), (runs_with, expected_after) in zip(got, model(batches, delays, idle)):
        assert seen <= {runs_with}
        assert after == expected_after


def test_an_input_that_has_seen_nothing_holds_the_watermark_at_min():
    h = two_inputs(ws(0), ws(0)).harness()
    for t in (1000, 2000, 3000):
        h.process_batch([{"k": "a", "ts": t}], processing_time=t)
    assert h.watermark == MIN, "the second input has seen no event: Long.MIN_VALUE, as in Flink"
    h.process_batch([], second=[{"m": "a", "ts": 1500}])
    assert h.watermark == 1499


def test_an_idle_input_stops_holding_the_watermark_until_its_next_event():
    h = two_inputs(ws(0), ws(0, idle=10_000)).harness()
    h.process_batch([{"k": "a", "ts": 1000}], processing_time=100_000)
    h.process_batch([{"k": "a", "ts": 2000}], processing_time=105_000)
    assert h.watermark == MIN, "not idle yet: no event for 5 s of a 10 s timeout"
    rows = h.process_batch([{"k": "a", "ts": 3000}], processing_time=110_000)
    assert rows == [{"side": 1, "wm": 1999}], "idle from 10 s on: the first input alone"
    assert h.watermark == 2999
    # back with an event behind the watermark: active again, it holds the watermark (which
    # does not go back) until it catches up
    h.process_batch([{"k": "a", "ts": 9000}], second=[{"m": "a", "ts": 2500}], processing_time=111_000)
    assert h.watermark == 2999
    h.process_batch([], second=[{"m": "a", "ts": 6000}], processing_time=112_000)
    assert h.watermark == 5999
    h.advance_processing_time(122_000)  # idle again: the first input's 8999
    assert h.watermark == 8999


def test_an_idleness_timeout_must_be_positive():
    with pytest.raises(JobDefinitionError, match="an idleness timeout must be positive, got 0 ms"):
        WatermarkStrategy.for_monotonous_timestamps().with_idleness(0)
    assert WatermarkStrategy.for_monotonous_timestamps().with_idleness(timedelta(seconds=2)).idle_timeout_ms == 2000
