"""Timers: Flink's firing rules in both domains, on the harness."""

from __future__ import annotations

import pytest

from sparkstate import (
    MIN_WATERMARK,
    KeyedHarness,
    KeyedProcessFunction,
    TimeDomain,
    TimerError,
    ValueStateDescriptor,
    WatermarkStrategy,
)


class Scheduler(KeyedProcessFunction):
    """Registers/deletes the timers listed in the event; on_timer reports what fired."""

    def process_element(self, e, ctx):
        t = ctx.timer_service()
        for ts in e.get("event", []):
            t.register_event_time_timer(ts)
        for ts in e.get("proc", []):
            t.register_processing_time_timer(ts)
        for ts in e.get("del_event", []):
            t.delete_event_time_timer(ts)
        for ts in e.get("del_proc", []):
            t.delete_processing_time_timer(ts)
        return None

    def on_timer(self, timestamp, ctx):
        yield (ctx.get_current_key(), ctx.time_domain().name, timestamp, ctx.timestamp())


def make():
    return KeyedHarness(Scheduler(), "k")


def test_event_time_timers_fire_in_timestamp_order_when_watermark_passes():
    h = make()
    h.process_element({"k": "a", "event": [30, 10, 20]})
    assert h.advance_watermark(9) == []
    assert h.advance_watermark(20) == [("a", "EVENT_TIME", 10, 10), ("a", "EVENT_TIME", 20, 20)]
    assert h.timers("a") == [(TimeDomain.EVENT_TIME, 30)]
    assert h.advance_watermark(100) == [("a", "EVENT_TIME", 30, 30)]
    assert h.timers("a") == [] and h.keys() == []


def test_registering_twice_keeps_one_timer_and_deleting_missing_is_noop():
    h = make()
    h.process_element({"k": "a", "event": [10, 10], "del_event": [99], "del_proc": [5]})
    assert h.timers("a") == [(TimeDomain.EVENT_TIME, 10)]
    assert h.advance_watermark(10) == [("a", "EVENT_TIME", 10, 10)]


def test_deleted_timer_does_not_fire():
    h = make()
    h.process_element({"k": "a", "event": [10, 20]})
    h.process_element({"k": "a", "del_event": [10]})
    assert h.advance_watermark(50) == [("a", "EVENT_TIME", 20, 20)]


def test_event_timer_behind_the_watermark_fires_when_the_watermark_next_advances():
    # Flink queues it and fires it at its next watermark, not at once
    h = make()
    h.advance_watermark(100)
    assert h.process_element({"k": "a", "event": [50]}) == []
    assert h.process_batch([]) == []  # the watermark did not move
    assert h.process_element({"k": "a", "event": [60]}) == []
    assert h.advance_watermark(100) == []
    assert h.advance_watermark(101) == [("a", "EVENT_TIME", 50, 50), ("a", "EVENT_TIME", 60, 60)]
    assert h.keys() == []


def test_a_delete_before_the_watermark_advances_cancels_a_timer_behind_it():
    h = make()
    h.advance_watermark(100)
    h.process_element({"k": "a", "event": [50, 70]})
    h.process_element({"k": "a", "del_event": [50]})
    assert h.advance_watermark(200) == [("a", "EVENT_TIME", 70, 70)]
    h.process_element({"k": "b", "event": [10]})
    h.process_element({"k": "b", "del_event": [10]})
    assert h.keys() == [], "no hold outlives the key's timers"
    assert h.advance_watermark(300) == []


def test_processing_time_timer_already_passed_fires_in_the_same_batch():
    h = make()
    h.advance_processing_time(1_000)
    assert h.process_element({"k": "b", "proc": [999]}) == [("b", "PROCESSING_TIME", 999, 999)]


def test_timer_registered_in_on_timer_for_a_due_time_fires_in_timestamp_order():
    # Flink's timer queue is ordered by timestamp: 171 registers 172, which fires before 201
    class Chain(KeyedProcessFunction):
        def process_element(self, e, ctx):
            for ts in (171, 201):
                ctx.timer_service().register_event_time_timer(ts)

        def on_timer(self, ts, ctx):
            if ts == 171:
                ctx.timer_service().register_event_time_timer(172)
            yield ts

    h = KeyedHarness(Chain(), "k")
    h.process_element({"k": "a"})
    assert h.advance_watermark(250) == [171, 172, 201]


def test_event_timer_registered_in_a_processing_time_on_timer_behind_the_watermark_waits():
    class Cross(KeyedProcessFunction):
        def process_element(self, e, ctx):
            ctx.timer_service().register_processing_time_timer(10)

        def on_timer(self, ts, ctx):
            if ctx.time_domain() == TimeDomain.PROCESSING_TIME:
                ctx.timer_service().register_event_time_timer(5)
            yield (ctx.time_domain().name, ts)

    h = KeyedHarness(Cross(), "k")
    h.process_element({"k": "a"}, watermark=100)
    assert h.advance_processing_time(10) == [("PROCESSING_TIME", 10)]
    assert h.advance_watermark(101) == [("EVENT_TIME", 5)]


def test_processing_time_timers_follow_processing_time_not_watermark():
    h = make()
    h.process_element({"k": "a", "proc": [500], "event": [500]})
    assert h.advance_watermark(10_000) == [("a", "EVENT_TIME", 500, 500)]
    assert h.advance_processing_time(499) == []
    assert h.advance_processing_time(500) == [("a", "PROCESSING_TIME", 500, 500)]


def test_both_domains_due_in_one_batch_fire_event_time_first():
    h = make()
    h.process_element({"k": "a", "proc": [5], "event": [7]})
    out = h.process_batch([], watermark=10, processing_time=10)
    assert out == [("a", "EVENT_TIME", 7, 7), ("a", "PROCESSING_TIME", 5, 5)]


def test_timers_fire_before_the_batch_elements():
    class Order(KeyedProcessFunction):
        def process_element(self, e, ctx):
            if e["v"] == "set":
                ctx.timer_service().register_event_time_timer(10)
            yield ("element", e["v"])

        def on_timer(self, ts, ctx):
            yield ("timer", ts)

    h = KeyedHarness(Order(), "k")
    h.process_element({"k": "a", "v": "set"})
    assert h.process_batch([{"k": "a", "v": "next"}], watermark=10) == [("timer", 10), ("element", "next")]


def test_on_timer_can_use_and_clear_state_and_register_new_timers():
    class Repeat(KeyedProcessFunction):
        def open(self, ctx):
            self.n = ctx.get_state(ValueStateDescriptor("n", int, default=0))

        def process_element(self, e, ctx):
            ctx.timer_service().register_event_time_timer(10)

        def on_timer(self, ts, ctx):
            self.n.update(self.n.value() + 1)
            if self.n.value() < 3:
                ctx.timer_service().register_event_time_timer(ts + 10)
            else:
                self.n.clear()
            yield (ts, self.n.value())

    h = KeyedHarness(Repeat(), "k")
    h.process_element({"k": "a"})
    assert h.advance_watermark(100) == [(10, 1), (20, 2), (30, 0)]
    assert h.keys() == []


def test_a_function_without_on_timer_cannot_register_timers():
    class NoTimer(KeyedProcessFunction):
        def process_element(self, e, ctx):
            ctx.timer_service().register_event_time_timer(5)

    h = KeyedHarness(NoTimer(), "k")
    with pytest.raises(TimerError, match="NoTimer registered a timer but does not define on_timer"):
        h.process_element({"k": "a"})


@pytest.mark.parametrize("bad", [1.5, "10", None, True])
def test_timer_timestamps_must_be_int_millis(bad):
    h = make()
    with pytest.raises(TimerError, match="epoch milliseconds as int"):
        h.process_element({"k": "a", "event": [bad]})


def test_clocks_and_element_timestamps():
    class Clocks(KeyedProcessFunction):
        def process_element(self, e, ctx):
            t = ctx.timer_service()
            yield (ctx.timestamp(), t.current_watermark(), t.current_processing_time())

    strategy = WatermarkStrategy.for_bounded_out_of_orderness(5).with_timestamp_column("ts")
    h = KeyedHarness(Clocks(), "k", watermark_strategy=strategy, processing_time=1000)
    assert h.process_element({"k": "a", "ts": 100}) == [(100, MIN_WATERMARK, 1000)]
    # Flink's bounded out-of-orderness: max timestamp - 5 - 1
    assert h.process_element({"k": "a", "ts": 90}, processing_time=2000) == [(90, 94, 2000)]
    assert h.finish() == []


def test_finish_fires_every_event_time_timer():
    h = make()
    h.process_element({"k": "a", "event": [2**50]})
    h.process_element({"k": "b", "proc": [10]})
    assert h.finish() == [("a", "EVENT_TIME", 2**50, 2**50)]
    assert h.timers("b") == [(TimeDomain.PROCESSING_TIME, 10)]


def test_timer_storm_is_stopped():
    class Storm(KeyedProcessFunction):
        def process_element(self, e, ctx):
            ctx.timer_service().register_event_time_timer(0)

        def on_timer(self, ts, ctx):
            ctx.timer_service().register_event_time_timer(ts + 1)

    h = KeyedHarness(Storm(), "k")
    h.advance_watermark(10**9)
    h.process_element({"k": "a"})  # timer 0 waits for the next watermark
    with pytest.raises(TimerError, match="kept registering timers that were already due"):
        h.advance_watermark(10**9 + 1)


def test_event_time_timers_are_refused_where_no_watermark_can_come():
    from sparkstate.engine.operator import KeyedOperator

    op = KeyedOperator(Scheduler(), ["k"], event_time=False)
    op.open()
    op.begin_batch(None, 0, lambda key: {})
    with pytest.raises(TimerError, match="has no event time: its source is unbounded and has no watermark strategy"):
        op.process([{"k": "a", "event": [5]}])
    assert op.process([{"k": "a", "proc": [5]}]) == []  # processing time needs no watermark
