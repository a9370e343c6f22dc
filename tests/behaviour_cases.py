"""Behavioural cases that must give the same output on the harness and on Spark.

Each case is a job (a ListSource of micro-batches, a key, a function) and, optionally, the
output a reader can check by hand. ``tests/unit/testing/test_behaviour.py`` runs every case on the
harness; ``tests/integration/test_behaviour_spark.py`` runs the same cases on Spark and
compares the two outputs row for row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sparkstate import (
    MAX_WATERMARK,
    AggregateFunction,
    AggregatingStateDescriptor,
    Job,
    KeyedProcessFunction,
    ListSource,
    ListStateDescriptor,
    MapStateDescriptor,
    MemorySink,
    ReducingStateDescriptor,
    TimeDomain,
    ValueStateDescriptor,
    WatermarkStrategy,
)

EVENT_SCHEMA = "k string, v bigint, ts timestamp"


def ev(k: str, v: int, ts: int = 0) -> dict:
    return {"k": k, "v": v, "ts": ts}


# ---------------------------------------------------------------------------- functions


class ValueSum(KeyedProcessFunction):
    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))
        self.seen = ctx.get_state(ValueStateDescriptor("seen", int))

    def process_element(self, e, ctx):
        self.total.update(self.total.value() + e["v"])
        first = self.seen.value() is None
        self.seen.update(1)
        if e["v"] < 0:
            self.total.clear()
        yield {"k": ctx.get_current_key(), "total": self.total.value(), "first": first}


class ListBuffer(KeyedProcessFunction):
    """Flushes every 3 elements; v == 0 replaces the buffer with [100, 200]."""

    def open(self, ctx):
        self.buf = ctx.get_list_state(ListStateDescriptor("buf", int))

    def process_element(self, e, ctx):
        if e["v"] == 0:
            self.buf.update([100, 200])
        else:
            self.buf.add(e["v"])
        if len(self.buf) >= 3:
            items = self.buf.get()
            self.buf.clear()
            yield {"k": ctx.get_current_key(), "items": ",".join(map(str, items))}


class MapFeatures(KeyedProcessFunction):
    """v > 0 counts under str(v % 3); v < 0 removes str(-v % 3); always emits the sorted map."""

    def open(self, ctx):
        self.m = ctx.get_map_state(MapStateDescriptor("m", str, int))

    def process_element(self, e, ctx):
        if e["v"] >= 0:
            slot = str(e["v"] % 3)
            self.m.put(slot, self.m.get(slot, 0) + 1)
        else:
            self.m.remove(str(-e["v"] % 3))
        items = sorted(self.m.items())
        yield {"k": ctx.get_current_key(), "m": ";".join(f"{a}={b}" for a, b in items), "has0": "0" in self.m}


class ReduceMax(KeyedProcessFunction):
    def open(self, ctx):
        self.max = ctx.get_reducing_state(ReducingStateDescriptor("max", max, int))

    def process_element(self, e, ctx):
        self.max.add(e["v"])
        yield {"k": ctx.get_current_key(), "max": self.max.get()}


class Mean(AggregateFunction):
    def create_accumulator(self):
        return [0, 0]

    def add(self, value, acc):
        return [acc[0] + value, acc[1] + 1]

    def get_result(self, acc):
        return acc[0] / acc[1]

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1]]


class AggregateMean(KeyedProcessFunction):
    def open(self, ctx):
        self.mean = ctx.get_aggregating_state(AggregatingStateDescriptor("mean", Mean(), list))

    def process_element(self, e, ctx):
        before = self.mean.get()
        self.mean.add(e["v"])
        yield {"k": ctx.get_current_key(), "before": before, "mean": self.mean.get()}


class EventTimers(KeyedProcessFunction):
    """A timer 10 ms after each element; v == 1 deletes the key's previous timer first,
    v == 2 also registers a timer already behind the watermark (it fires when the watermark
    next advances), v == 3 deletes a timer that
    does not exist. on_timer reports the timer and the current watermark relation."""

    def open(self, ctx):
        self.last = ctx.get_state(ValueStateDescriptor("last_timer", int))
        self.fired = ctx.get_state(ValueStateDescriptor("fired", int, default=0))

    def process_element(self, e, ctx):
        ts = ctx.timestamp()
        timers = ctx.timer_service()
        if e["v"] == 1 and self.last.value() is not None:
            timers.delete_event_time_timer(self.last.value())
        if e["v"] == 2:
            timers.register_event_time_timer(-5)
        if e["v"] == 3:
            timers.delete_event_time_timer(123456)
        timers.register_event_time_timer(ts + 10)
        self.last.update(ts + 10)
        return None

    def on_timer(self, timestamp, ctx):
        self.fired.update(self.fired.value() + 1)
        yield {
            "k": ctx.get_current_key(),
            "timer": timestamp,
            "domain": ctx.time_domain().name,
            "nth": self.fired.value(),
            "passed": ctx.timer_service().current_watermark() >= timestamp,
        }


class BothDomains(KeyedProcessFunction):
    """Each element registers a processing-time timer (now + 1 ms) and an event-time timer
    (ts + 5 ms); on_timer names the domain. Output never depends on wall-clock values."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))

    def process_element(self, e, ctx):
        self.count.update(self.count.value() + 1)
        t = ctx.timer_service()
        t.register_processing_time_timer(t.current_processing_time() + 1)
        t.register_event_time_timer(ctx.timestamp() + 5)
        t.delete_processing_time_timer(1)  # never registered: a no-op
        return None

    def on_timer(self, timestamp, ctx):
        domain = ctx.time_domain()
        label = timestamp if domain == TimeDomain.EVENT_TIME else "now+1"
        yield {"k": ctx.get_current_key(), "domain": domain.name, "at": str(label), "count": self.count.value()}
        if domain == TimeDomain.EVENT_TIME:
            self.count.clear()


class EndOfInput(KeyedProcessFunction):
    """Event-time timers without a watermark strategy: they fire only when the input ends."""

    def process_element(self, e, ctx):
        ctx.timer_service().register_event_time_timer(e["v"])
        return [{"k": ctx.get_current_key(), "what": f"element {e['v']}"}]

    def on_timer(self, timestamp, ctx):
        final = ctx.timer_service().current_watermark() == MAX_WATERMARK
        yield {"k": ctx.get_current_key(), "what": f"timer {timestamp} final={final}"}


class TupleKey(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n", int, default=0))

    def process_element(self, e, ctx):
        self.n.update(self.n.value() + 1)
        a, b = ctx.get_current_key()
        yield {"a": a, "b": b, "n": self.n.value()}


# ---------------------------------------------------------------------------- cases


@dataclass
class Case:
    name: str
    function: KeyedProcessFunction
    output: str
    batches: list[list[dict]]
    key: tuple[str, ...] = ("k",)
    schema: str = EVENT_SCHEMA
    watermark_ms: int | None = None
    expected: list[dict] | None = None
    #: output columns that identify a key (rows of one key keep their order)
    out_key: tuple[str, ...] = ("k",)

    def job(self, sink: Any = None, batches: list[list[dict]] | None = None, end_of_input: bool = True) -> Job:
        time_column = "ts" if self.watermark_ms is not None else None
        source = ListSource(batches if batches is not None else self.batches, self.schema, time_column, end_of_input)
        watermark = (
            WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=self.watermark_ms)).with_timestamp_column("ts")
            if self.watermark_ms is not None
            else None
        )
        return (
            Job(f"case-{self.name}")
            .source(source, watermark=watermark)
            .key_by(*self.key)
            .process(self.function, output_schema=self.output)
            .sink(sink if sink is not None else MemorySink())
        )


CASES = [
    Case(
        "value",
        ValueSum(),
        "k string, total bigint, first boolean",
        [[ev("a", 1), ev("b", 10), ev("a", 2)], [ev("a", -1), ev("b", 5)], [ev("a", 7)]],
        expected=[
            {"k": "a", "total": 1, "first": True},
            {"k": "b", "total": 10, "first": True},
            {"k": "a", "total": 3, "first": False},
            {"k": "a", "total": 0, "first": False},
            {"k": "b", "total": 15, "first": False},
            {"k": "a", "total": 7, "first": False},
        ],
    ),
    Case(
        "list",
        ListBuffer(),
        "k string, items string",
        [[ev("a", 1), ev("a", 2)], [ev("b", 4), ev("a", 3), ev("a", 0)], [ev("a", 9), ev("b", 5), ev("b", 6)]],
        expected=[{"k": "a", "items": "1,2,3"}, {"k": "a", "items": "100,200,9"}, {"k": "b", "items": "4,5,6"}],
    ),
    Case(
        "map",
        MapFeatures(),
        "k string, m string, has0 boolean",
        [[ev("a", 3), ev("a", 4)], [ev("a", 6), ev("a", -3), ev("b", 1)]],
        expected=[
            {"k": "a", "m": "0=1", "has0": True},
            {"k": "a", "m": "0=1;1=1", "has0": True},
            {"k": "a", "m": "0=2;1=1", "has0": True},
            {"k": "a", "m": "1=1", "has0": False},
            {"k": "b", "m": "1=1", "has0": False},
        ],
    ),
    Case(
        "reducing",
        ReduceMax(),
        "k string, max bigint",
        [[ev("a", 3), ev("a", 1)], [ev("a", 8), ev("b", -2)]],
        expected=[{"k": "a", "max": 3}, {"k": "a", "max": 3}, {"k": "a", "max": 8}, {"k": "b", "max": -2}],
    ),
    Case(
        "aggregating",
        AggregateMean(),
        "k string, before double, mean double",
        [[ev("a", 2), ev("a", 4)], [ev("a", 9)]],
        expected=[
            {"k": "a", "before": None, "mean": 2.0},
            {"k": "a", "before": 2.0, "mean": 3.0},
            {"k": "a", "before": 3.0, "mean": 5.0},
        ],
    ),
    Case(
        "event-timers",
        EventTimers(),
        "k string, timer bigint, domain string, nth bigint, passed boolean",
        [
            [ev("a", 0, 1000), ev("b", 0, 1001)],
            [ev("a", 1, 1005), ev("b", 3, 1003)],  # a: timer 1010 replaced by 1015; b keeps 1011 and adds 1013
            [ev("c", 2, 2000)],  # the watermark passes 1015; c registers -5, behind the watermark
            [ev("c", 0, 2001)],  # the watermark advances: -5 fires (Flink fires it at its next watermark)
        ],
        watermark_ms=0,
        expected=[
            {"k": "b", "timer": 1011, "domain": "EVENT_TIME", "nth": 1, "passed": True},
            {"k": "b", "timer": 1013, "domain": "EVENT_TIME", "nth": 2, "passed": True},
            {"k": "a", "timer": 1015, "domain": "EVENT_TIME", "nth": 1, "passed": True},
            {"k": "c", "timer": -5, "domain": "EVENT_TIME", "nth": 1, "passed": True},
            {"k": "c", "timer": 2010, "domain": "EVENT_TIME", "nth": 2, "passed": True},
            {"k": "c", "timer": 2011, "domain": "EVENT_TIME", "nth": 3, "passed": True},
        ],
    ),
    Case(
        "both-domains",
        BothDomains(),
        "k string, domain string, at string, count bigint",
        [[ev("a", 1, 100), ev("b", 1, 100)], [ev("a", 1, 200)]],
        watermark_ms=0,
    ),
    Case(
        "end-of-input",
        EndOfInput(),
        "k string, what string",
        [[ev("a", 5), ev("b", 7)], [ev("a", 1)]],
        expected=[
            {"k": "a", "what": "element 5"},
            {"k": "b", "what": "element 7"},
            {"k": "a", "what": "element 1"},
            {"k": "a", "what": "timer 1 final=True"},
            {"k": "a", "what": "timer 5 final=True"},
            {"k": "b", "what": "timer 7 final=True"},
        ],
    ),
    Case(
        "tuple-key",
        TupleKey(),
        "a string, b bigint, n bigint",
        [[ev("x", 1), ev("x", 2), ev("x", 1)], [ev("y", 1), ev("x", 1)]],
        key=("k", "v"),
        out_key=("a", "b"),
        expected=[
            {"a": "x", "b": 1, "n": 1},
            {"a": "x", "b": 2, "n": 1},
            {"a": "x", "b": 1, "n": 2},
            {"a": "y", "b": 1, "n": 1},
            {"a": "x", "b": 1, "n": 3},
        ],
    ),
]

CASES_BY_NAME = {c.name: c for c in CASES}


def run_on_harness(case: Case, batches: list[list[dict]] | None = None, finish: bool = True) -> list[dict]:
    """The case on the harness, batch for batch as Spark runs it.

    Processing time moves 1 s per batch (Spark's batch timestamps also only move forward);
    ``finish`` mirrors a bounded source's end on Spark: the micro-batch of the end-of-input
    marker (no events), then the final one, under the maximal watermark.
    """
    h = case.job().harness()
    out: list[dict] = []
    now = 1_000_000
    for batch in batches if batches is not None else case.batches:
        now += 1000
        out += h.process_batch(batch, processing_time=now)
    if finish:
        out += h.process_batch([], processing_time=now + 1000)  # the end-of-input marker's batch
        out += h.process_batch([], processing_time=now + 2000, watermark=MAX_WATERMARK)
    return out


def canonical(rows: list[dict]) -> list[tuple]:
    """Rows as sorted tuples: Spark's partitions make the order across keys arbitrary."""
    return sorted(tuple(sorted((k, repr(v)) for k, v in r.items())) for r in rows)


def per_key(rows: list[dict], key: tuple[str, ...] = ("k",)) -> dict[Any, list[dict]]:
    """Rows grouped by key, in emission order (the order that must hold within a key)."""
    out: dict[Any, list[dict]] = {}
    for r in rows:
        out.setdefault(tuple(r[c] for c in key), []).append(r)
    return out
