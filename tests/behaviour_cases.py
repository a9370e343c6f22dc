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
from sparkstate.api.connected import KeyedBroadcastProcessFunction, KeyedCoProcessFunction
from sparkstate.errors import StateAccessError

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


# ---------------------------------------------------------------------------- two inputs

RULES = MapStateDescriptor("rules", str, int)
RULE_SCHEMA = "name string, limit bigint"


def rule(name: str, limit: int) -> dict:
    return {"name": name, "limit": limit}


class Rules(KeyedBroadcastProcessFunction):
    """Broadcast rules ``{name, limit}``: an element over a rule's limit raises an alert naming
    the rule. A negative limit is rejected (a dead letter; no broadcast write survives it), a
    limit of 0 removes the rule, and a rule named ``reset`` clears every key's count
    (``apply_to_keyed_state``). Adding a rule is reported once (not once per key group)."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))

    def process_broadcast_element(self, r, ctx):
        rules = ctx.get_broadcast_state(RULES)
        if r["name"] == "reset":
            ctx.apply_to_keyed_state(ValueStateDescriptor("count", int, default=0), lambda key, state: state.clear())
            return
        rules.put(r["name"], r["limit"])  # written before the check: a rejection must undo it
        if r["limit"] < 0:
            raise ValueError(f"rule {r['name']}: negative limit")
        if r["limit"] == 0:
            rules.remove(r["name"])
            return
        yield {"k": "*", "what": f"rule {r['name']} > {r['limit']}", "n": len(rules)}

    def process_element(self, e, ctx):
        self.count.update(self.count.value() + 1)
        for name, limit in sorted(ctx.get_broadcast_state(RULES).items()):
            if e["v"] > limit:
                yield {"k": ctx.get_current_key(), "what": f"{name} v={e['v']}", "n": self.count.value()}


class WritesBroadcast(KeyedBroadcastProcessFunction):
    """process_element tries to write broadcast state: refused (as in Flink), state unchanged."""

    def process_broadcast_element(self, r, ctx):
        ctx.get_broadcast_state(RULES).put(r["name"], r["limit"])

    def process_element(self, e, ctx):
        rules = ctx.get_broadcast_state(RULES)
        try:
            rules.put("mine", e["v"])
            what = "written"
        except StateAccessError as exc:
            what = "refused: read-only" if "read-only" in str(exc) else f"refused: {exc}"
        yield {"k": ctx.get_current_key(), "what": f"{what}; rules={','.join(sorted(rules.keys()))}", "n": e["v"]}


COUNT = ValueStateDescriptor("count", int, default=0)
HISTORY = ListStateDescriptor("history", int)


class KeyedWrites(KeyedBroadcastProcessFunction):
    """A rule adds its limit to every key's count and appends it to every key's history
    (``apply_to_keyed_state``); a negative limit is then rejected, and its keyed writes with it."""

    def open(self, ctx):
        self.count = ctx.get_state(COUNT)
        self.history = ctx.get_list_state(HISTORY)

    def process_broadcast_element(self, r, ctx):
        ctx.apply_to_keyed_state(COUNT, lambda key, count: count.update(count.value() + abs(r["limit"])))
        ctx.apply_to_keyed_state(HISTORY, lambda key, history: history.add(r["limit"]))
        if r["limit"] < 0:
            raise ValueError(f"rule {r['name']}: negative limit")

    def process_element(self, e, ctx):
        self.count.update(self.count.value() + 1)
        self.history.add(e["v"])
        yield {"k": ctx.get_current_key(), "what": ",".join(map(str, self.history.get())), "n": self.count.value()}


PROFILE_SCHEMA = "m string, name string, ts timestamp"


def profile(m: str, name: str, ts: int = 0) -> dict:
    return {"m": m, "name": name, "ts": ts}


class Enrich(KeyedCoProcessFunction):
    """Two keyed inputs sharing state and timers: profiles (input 2) enrich payments (input 1);
    each payment sets an event-time timer 10 ms on, which reports the profile then."""

    def open(self, ctx):
        self.profile = ctx.get_state(ValueStateDescriptor("profile", str))

    def process_element1(self, e, ctx):
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 10)
        yield {"k": ctx.get_current_key(), "what": f"pay {e['v']} as {self.profile.value()}", "n": e["v"]}

    def process_element2(self, p, ctx):
        self.profile.update(p["name"])
        yield {"k": ctx.get_current_key(), "what": f"profile {p['name']}", "n": 0}

    def on_timer(self, timestamp, ctx):
        yield {"k": ctx.get_current_key(), "what": f"timer {timestamp} as {self.profile.value()}", "n": timestamp}


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
    #: a second input's micro-batches (as many as ``batches`` or fewer; micro-batch i of the
    #: job reads batch i of each input), its schema, and either its key (a keyed input) or the
    #: broadcast states it writes (a broadcast input)
    second: list[list[dict]] | None = None
    second_schema: str = ""
    second_key: tuple[str, ...] = ()
    broadcast: tuple[Any, ...] = ()
    #: the second (keyed) input's watermark strategy (out-of-orderness in ms)
    second_watermark_ms: int | None = None

    def second_batches(self, batches: list[list[dict]] | None = None) -> list[list[dict]]:
        """The second input's batches, as many as the first's (``batches``, or the case's):
        cut or padded with empty batches."""
        first = batches if batches is not None else self.batches
        second = list(self.second or [])[: len(first)]
        return second + [[] for _ in range(len(first) - len(second))]

    def job(self, sink: Any = None, batches: list[list[dict]] | None = None, end_of_input: bool = True) -> Job:
        time_column = "ts" if self.watermark_ms is not None else None
        source = ListSource(batches if batches is not None else self.batches, self.schema, time_column, end_of_input)
        watermark = (
            WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=self.watermark_ms)).with_timestamp_column("ts")
            if self.watermark_ms is not None
            else None
        )
        job = Job(f"case-{self.name}").source(source, watermark=watermark).key_by(*self.key)
        if self.second is not None:
            time2 = "ts" if self.second_watermark_ms is not None else None
            source2 = ListSource(self.second_batches(batches), self.second_schema, time2, end_of_input)
            ws2 = (
                WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=self.second_watermark_ms))
                .with_timestamp_column("ts")
                if self.second_watermark_ms is not None
                else None
            )
            if self.broadcast:
                job = job.connect(source2).broadcast(*self.broadcast)
            else:
                job = job.connect(source2, key_by=self.second_key, watermark=ws2)
            # few key groups keep the Spark run short: every batch with broadcast elements
            # calls every key group
            job = job.with_settings(key_groups=8)
        return job.process(self.function, output_schema=self.output).sink(sink if sink is not None else MemorySink())


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

TWO_INPUT_OUTPUT = "k string, what string, n bigint"

TWO_INPUT_CASES = [
    Case(
        "broadcast-rules",
        Rules(),
        TWO_INPUT_OUTPUT,
        [
            [ev("a", 5), ev("b", 50)],  # the rule of the same batch applies (broadcast elements first)
            [ev("a", 20), ev("b", 7)],
            [ev("a", 30)],  # "big" is removed; "neg" was rejected, "huge" applies
            [ev("a", 100), ev("b", 100)],  # counts were reset by the rule "reset"
        ],
        second=[
            [rule("big", 10)],
            [],
            [rule("neg", -1), rule("big", 0), rule("huge", 25)],
            [rule("reset", 0)],
        ],
        second_schema=RULE_SCHEMA,
        broadcast=(RULES,),
        expected=[
            {"k": "*", "what": "rule big > 10", "n": 1},
            {"k": "b", "what": "big v=50", "n": 1},
            {"k": "a", "what": "big v=20", "n": 2},
            {"k": "*", "what": "rule huge > 25", "n": 1},
            {"k": "a", "what": "huge v=30", "n": 3},
            {"k": "a", "what": "huge v=100", "n": 1},
            {"k": "b", "what": "huge v=100", "n": 1},
        ],
    ),
    Case(
        "broadcast-read-only",
        WritesBroadcast(),
        TWO_INPUT_OUTPUT,
        [[ev("a", 1)], [ev("a", 2), ev("b", 3)]],
        second=[[rule("r1", 1)], [rule("r2", 2)]],
        second_schema=RULE_SCHEMA,
        broadcast=(RULES,),
        expected=[
            {"k": "a", "what": "refused: read-only; rules=r1", "n": 1},
            {"k": "a", "what": "refused: read-only; rules=r1,r2", "n": 2},
            {"k": "b", "what": "refused: read-only; rules=r1,r2", "n": 3},
        ],
    ),
    Case(
        "broadcast-rejected-keyed-writes",
        KeyedWrites(),
        TWO_INPUT_OUTPUT,
        [
            [ev("a", 1), ev("b", 1)],
            [ev("a", 2)],  # "bad" added 10 to every count and history, then was rejected: undone
            [ev("a", 3), ev("b", 3)],  # "ok" stays, the "bad" after it in the same batch does not
        ],
        second=[[], [rule("bad", -10)], [rule("ok", 100), rule("bad", -10)]],
        second_schema=RULE_SCHEMA,
        broadcast=(RULES,),
        expected=[
            {"k": "a", "what": "1", "n": 1},
            {"k": "b", "what": "1", "n": 1},
            {"k": "a", "what": "1,2", "n": 2},
            {"k": "a", "what": "1,2,100,3", "n": 103},
            {"k": "b", "what": "1,100,3", "n": 102},
        ],
    ),
    Case(
        "co-process-timers",
        Enrich(),
        TWO_INPUT_OUTPUT,
        [
            [ev("a", 1, 100), ev("b", 2, 105)],
            [ev("a", 3, 200)],  # the watermark is min(a's inputs): 149, held back by the profiles
            [ev("b", 4, 300)],
        ],
        watermark_ms=0,
        second=[[profile("a", "alice", 50)], [profile("b", "bob", 150)], []],
        second_schema=PROFILE_SCHEMA,
        second_key=("m",),
        second_watermark_ms=0,
        expected=[
            {"k": "a", "what": "profile alice", "n": 0},
            {"k": "a", "what": "pay 1 as alice", "n": 1},
            {"k": "b", "what": "pay 2 as None", "n": 2},
            {"k": "b", "what": "profile bob", "n": 0},
            {"k": "a", "what": "pay 3 as alice", "n": 3},
            {"k": "a", "what": "timer 110 as alice", "n": 110},
            {"k": "b", "what": "timer 115 as bob", "n": 115},
            {"k": "b", "what": "pay 4 as bob", "n": 4},
            {"k": "a", "what": "timer 210 as alice", "n": 210},
            {"k": "b", "what": "timer 310 as bob", "n": 310},
        ],
    ),
]

CASES += TWO_INPUT_CASES

CASES_BY_NAME = {c.name: c for c in CASES}


def run_on_harness(case: Case, batches: list[list[dict]] | None = None, finish: bool = True) -> list[dict]:
    """The case on the harness, batch for batch as Spark runs it.

    Processing time moves 1 s per batch (Spark's batch timestamps also only move forward);
    ``finish`` mirrors a bounded source's end on Spark: the micro-batch of the end-of-input
    marker (no events), then the final one, under the maximal watermark.
    """
    h = case.job(batches=batches).harness()
    out: list[dict] = []
    now = 1_000_000
    first = batches if batches is not None else case.batches
    second: list[list[dict]] = case.second_batches(first) if case.second is not None else [[] for _ in first]
    for batch, batch2 in zip(first, second):
        now += 1000
        if case.second is None:
            out += h.process_batch(batch, processing_time=now)
        elif case.broadcast:
            out += h.process_batch(batch, processing_time=now, broadcast=batch2)
        else:
            out += h.process_batch(batch, processing_time=now, second=batch2)
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


def assert_harness_rows(case: Case, rows: list[dict]) -> list[dict]:
    """Assert that ``rows``, a run of ``case`` on Spark, are the harness's: the same rows, in the
    same order within each key, and the case's own expected rows where it lists them. Returns
    the harness's rows."""
    expected = run_on_harness(case)
    assert canonical(rows) == canonical(expected), case.name
    assert per_key(rows, case.out_key) == per_key(expected, case.out_key), case.name  # order within a key
    if case.expected is not None:
        assert canonical(rows) == canonical(case.expected), case.name
    return expected
