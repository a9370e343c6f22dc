"""State TTL on the harness against an independent model of Flink's rule (tests/ttl_model.py).

Randomised sequences of reads, writes and clock moves, for every state kind x update type x
visibility x time characteristic; clocks move in steps that often land exactly on an entry's
``last access + ttl``, so the boundary (expired) and one before it (not) are both met many
times. The rows a function emits and the state the harness stores (``(value, ts)``, lists and
dicts of them) must be the model's.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from sparkstate import (
    AggregateFunction,
    AggregatingStateDescriptor,
    KeyedHarness,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptorError,
    StateTtlConfig,
    StateTypeError,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from sparkstate.api.state import ListState, MapState, ValueState
from sparkstate.api.state_ttl import TtlValueState
from sparkstate.savepoint.files import LocalDirectory, open_savepoint
from tests.ttl_model import ABSENT, ListModel, MapModel, Rule, SingleModel

TTL = 10
UPDATE = StateTtlConfig.UpdateType
VISIBILITY = StateTtlConfig.StateVisibility
KINDS = ("value", "list", "map", "reducing", "aggregating")


class SumCount(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return f"{acc[0]}/{acc[1]}"


def config(update, visibility, event_time, ttl=TTL):
    # no background sweep: these tests look at what reads and writes leave (engine/ttl.py's
    # cleanup has its own tests); a key written back still loses its expired entries
    builder = (StateTtlConfig.new_builder(ttl).set_update_type(update).set_state_visibility(visibility)
               .disable_cleanup_in_background())
    return (builder.use_event_time() if event_time else builder).build()


def descriptor(kind, cfg):
    made = {
        "value": lambda: ValueStateDescriptor("s", int, default=-1),
        "list": lambda: ListStateDescriptor("s", int),
        "map": lambda: MapStateDescriptor("s", str, int),
        "reducing": lambda: ReducingStateDescriptor("s", lambda a, b: a * 10 + b, int),
        "aggregating": lambda: AggregatingStateDescriptor("s", SumCount(), tuple),
    }[kind]()
    return made.enable_time_to_live(cfg)


class Ops(KeyedProcessFunction):
    """Applies the event's operation to its key's state and emits what it returned."""

    def __init__(self, desc):
        self.desc = desc

    def open(self, ctx):
        getter = {"value": ctx.get_state, "list": ctx.get_list_state, "map": ctx.get_map_state,
                  "reducing": ctx.get_reducing_state, "aggregating": ctx.get_aggregating_state}[self.desc.kind]
        self.s = getter(self.desc)

    def process_element(self, ev, ctx):
        s, op, arg = self.s, ev["op"], ev["arg"]
        result = {
            "value": lambda: s.value(), "update": lambda: s.update(arg), "clear": lambda: s.clear(),
            "get": lambda: s.get(), "add": lambda: s.add(arg), "add_all": lambda: s.add_all(arg),
            "replace": lambda: s.update(arg), "len": lambda: len(s), "iter": lambda: list(s),
            "mget": lambda: s.get(arg, "none"), "put": lambda: s.put(*arg), "put_all": lambda: s.put_all(dict(arg)),
            "remove": lambda: s.remove(arg), "contains": lambda: arg in s, "keys": lambda: s.keys(),
            "values": lambda: s.values(), "items": lambda: s.items(), "is_empty": lambda: s.is_empty(),
            "getitem": lambda: _getitem(s, arg),
        }[op]()
        yield (ev["k"], op, result)


def _getitem(s, key):
    try:
        return s[key]
    except KeyError:
        return "KeyError"


OPS = {
    "value": ["value", "value", "update", "update", "clear"],
    "list": ["get", "get", "add", "add", "add_all", "replace", "clear", "len", "iter"],
    "map": ["mget", "mget", "put", "put", "put", "put_all", "remove", "contains", "keys", "values", "items",
            "is_empty", "getitem", "len", "iter", "clear"],
    "reducing": ["get", "get", "add", "add", "clear"],
    "aggregating": ["get", "get", "add", "add", "clear"],
}


def random_arg(rnd, op):
    uk = lambda: rnd.choice("abc")  # noqa: E731
    return {
        "update": rnd.randint(0, 9), "add": rnd.randint(0, 9),
        "add_all": [rnd.randint(0, 9) for _ in range(rnd.randint(0, 2))],
        "replace": [rnd.randint(0, 9) for _ in range(rnd.randint(0, 2))],
        "put": (uk(), rnd.randint(0, 9)), "put_all": [(uk(), rnd.randint(0, 9)) for _ in range(2)],
        "mget": uk(), "remove": uk(), "contains": uk(), "getitem": uk(),
    }.get(op)


class Model:
    """The model driven like the function: each op at ``now`` with ``stamp``."""

    def __init__(self, kind, rule):
        self.kind = kind
        self.single = SingleModel(rule)
        self.list = ListModel(rule)
        self.map = MapModel(rule)

    def apply(self, key, op, arg, now, stamp):  # noqa: C901 - one branch per operation
        kind, single = self.kind, self.single
        if op == "clear":
            single.clear(key), self.list.clear(key), self.map.clear(key)
            return None
        if kind == "value":
            if op == "value":
                v = single.read(key, now, stamp)
                return -1 if v is ABSENT else v
            single.write(key, arg, stamp)
            return None
        if kind in ("reducing", "aggregating"):
            if op == "get":
                v = single.read(key, now, stamp)
                return None if v is ABSENT else (f"{v[0]}/{v[1]}" if kind == "aggregating" else v)
            base = single.fold_base(key, now)
            if kind == "reducing":
                single.write(key, arg if base is ABSENT else base * 10 + arg, stamp)
            else:
                acc = (0, 0) if base is ABSENT else base
                single.write(key, (acc[0] + arg, acc[1] + 1), stamp)
            return None
        if kind == "list":
            if op in ("get", "iter"):
                return self.list.read(key, now, stamp)
            if op == "len":
                return self.list.count(key, now)
            if op == "add":
                self.list.add(key, [arg], stamp)
            elif op == "add_all":
                self.list.add(key, arg, stamp)
            else:
                self.list.replace(key, arg, stamp)
            return None
        m = self.map
        if op == "mget":
            v = m.read(key, arg, now, stamp)
            return "none" if v is ABSENT else v
        if op == "getitem":
            v = m.read(key, arg, now, stamp)
            return "KeyError" if v is ABSENT else v
        if op == "contains":
            return m.read(key, arg, now, stamp) is not ABSENT
        if op == "put":
            m.put(key, *arg, stamp)
        elif op == "put_all":
            for uk, v in dict(arg).items():
                m.put(key, uk, v, stamp)
        elif op == "remove":
            m.remove(key, arg)
        elif op == "len":
            return m.count(key, now)
        elif op == "is_empty":
            return not m.read_all(key, now, stamp, first_only=True)
        else:
            entries = m.read_all(key, now, stamp)
            return {"keys": [k for k, _ in entries], "iter": [k for k, _ in entries],
                    "values": [v for _, v in entries], "items": entries}[op]
        return None

    def write_back(self, keys, now):
        """A key the batch touched is written back without its expired entries (the design's
        cleanup on write-back, ``engine/ttl.py``): what a later read would drop anyway."""
        alive = lambda ts: not self.single.rule.expired(ts, now)  # noqa: E731
        for key in keys:
            for model in (self.single, self.list, self.map):
                stored = model.stored
                if key not in stored:
                    continue
                held = stored[key]
                if isinstance(held, list):
                    held = [(v, ts) for v, ts in held if alive(ts)]
                elif isinstance(held, dict):
                    held = {uk: (v, ts) for uk, (v, ts) in held.items() if alive(ts)}
                elif not alive(held[1]):
                    held = None
                if held:
                    stored[key] = held
                else:
                    del stored[key]

    def stored(self):
        """The model's state as the engine stores it: ``{key: {"s": ...}}``."""
        source = {"value": self.single, "reducing": self.single, "aggregating": self.single,
                  "list": self.list, "map": self.map}[self.kind].stored
        return {k: {"s": v} for k, v in source.items()}


def run_random(kind, update, visibility, event_time, seed, column_time=True, batches=40):
    rnd = random.Random(seed)
    rule = Rule(TTL, update is UPDATE.OnReadAndWrite, visibility is VISIBILITY.ReturnExpiredIfNotCleanedUp)
    desc = descriptor(kind, config(update, visibility, event_time))
    # a huge out-of-orderness: the watermark is only what the test gives (it never derives one > 0)
    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(10**9).with_timestamp_column("ts")
                if event_time and column_time else None)
    h = KeyedHarness(Ops(desc), "k", watermark_strategy=strategy, processing_time=1000)
    model = Model(kind, rule)
    clock = 1000
    for _ in range(batches):
        # steps of 0, 1, TTL-1, TTL, TTL+1: entries land on their boundary and next to it
        clock += rnd.choice([0, 0, 1, TTL - 1, TTL, TTL + 1, 3])
        events = []
        for _ in range(rnd.randint(0, 5)):
            op = rnd.choice(OPS[kind])
            # event times around the watermark, some behind it by more than the TTL
            ts = clock + rnd.choice([0, 0, -1, 1, -TTL, -TTL + 1, 5])
            events.append({"k": rnd.choice("xy"), "op": op, "arg": random_arg(rnd, op), "ts": ts})
        if event_time:
            rows = h.process_batch(events, watermark=clock)
        else:
            rows = h.process_batch(events, processing_time=clock)
        expected = []
        for ev in events:
            stamp = (ev["ts"] if column_time else clock) if event_time else clock
            expected.append((ev["k"], ev["op"], model.apply(ev["k"], ev["op"], ev["arg"], clock, stamp)))
        assert rows == expected, f"seed {seed}, clock {clock}"
        model.write_back({ev["k"] for ev in events}, clock)
        assert {k: h.state(k) for k in h.keys()} == model.stored(), f"seed {seed}, clock {clock}"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("update", [UPDATE.OnCreateAndWrite, UPDATE.OnReadAndWrite], ids=lambda u: u.name)
@pytest.mark.parametrize("visibility", [VISIBILITY.NeverReturnExpired, VISIBILITY.ReturnExpiredIfNotCleanedUp],
                         ids=lambda v: v.name)
@pytest.mark.parametrize("event_time", [False, True], ids=["processing", "event"])
def test_ttl_against_the_model(kind, update, visibility, event_time):
    for seed in range(10):
        run_random(kind, update, visibility, event_time, seed)


@pytest.mark.parametrize("kind", KINDS)
def test_event_time_without_an_element_time_stamps_with_the_watermark(kind):
    """No timestamp column: an entry's time is the watermark of its batch."""
    for seed in range(4):
        run_random(kind, UPDATE.OnReadAndWrite, VISIBILITY.ReturnExpiredIfNotCleanedUp, True, seed, column_time=False)


# --------------------------------------------------------------------------- directed cases


class Seen(KeyedProcessFunction):
    def __init__(self, desc):
        self.desc = desc

    def open(self, ctx):
        self.seen = ctx.get_state(self.desc)

    def process_element(self, ev, ctx):
        yield (ev["k"], self.seen.value())
        self.seen.update(ev["v"])


@pytest.mark.parametrize("event_time", [False, True])
def test_boundary_exactly(event_time):
    """Written at 100 with a TTL of 10: alive at 109, expired at 110 (Flink: ts + ttl <= now)."""
    cfg = config(UPDATE.OnCreateAndWrite, VISIBILITY.NeverReturnExpired, event_time)
    desc = ValueStateDescriptor("seen", int, default=0).enable_time_to_live(cfg)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(10**9).with_timestamp_column("ts") if event_time else None
    h = KeyedHarness(Seen(desc), "k", watermark_strategy=strategy)
    clock = {"watermark"} if event_time else {"processing_time"}
    (name,) = clock
    assert h.process_batch([{"k": "a", "v": 1, "ts": 100}], **{name: 100}) == [("a", 0)]
    assert h.state("a") == {"seen": (1, 100)}
    assert h.process_batch([{"k": "b", "v": 1, "ts": 109}], **{name: 109}) == [("b", 0)]
    h2 = KeyedHarness(Seen(desc), "k", watermark_strategy=strategy)
    h2.process_batch([{"k": "a", "v": 1, "ts": 100}], **{name: 100})
    assert h2.process_batch([{"k": "a", "v": 2, "ts": 109}], **{name: 109}) == [("a", 1)]
    assert h.process_batch([{"k": "a", "v": 2, "ts": 110}], **{name: 110}) == [("a", 0)]


def test_value_default_is_returned_when_absent_or_expired_and_copied():
    cfg = config(UPDATE.OnCreateAndWrite, VISIBILITY.NeverReturnExpired, False)
    desc = ValueStateDescriptor("seen", list, default=[]).enable_time_to_live(cfg)

    class Append(KeyedProcessFunction):
        def open(self, ctx):
            self.s = ctx.get_state(desc)

        def process_element(self, ev, ctx):
            items = self.s.value()
            yield list(items)
            items.append(ev["v"])
            self.s.update(items)

    h = KeyedHarness(Append(), "k", processing_time=0)
    assert h.process_element({"k": "a", "v": 1}) == [[]]
    assert h.process_element({"k": "a", "v": 2}, processing_time=5) == [[1]]
    assert h.process_element({"k": "a", "v": 3}, processing_time=14) == [[1, 2]]
    assert h.process_element({"k": "a", "v": 4}, processing_time=24) == [[]]  # the default, a fresh copy
    assert desc.default == []


def test_return_expired_returns_once_then_it_is_gone():
    cfg = config(UPDATE.OnCreateAndWrite, VISIBILITY.ReturnExpiredIfNotCleanedUp, False)
    desc = ValueStateDescriptor("v", int).enable_time_to_live(cfg)

    class Read(KeyedProcessFunction):
        def open(self, ctx):
            self.s = ctx.get_state(desc)

        def process_element(self, ev, ctx):
            if ev["v"] is not None:
                self.s.update(ev["v"])
            yield (self.s.value(), self.s.value())

    h = KeyedHarness(Read(), "k", processing_time=0)
    assert h.process_element({"k": "a", "v": 7}) == [(7, 7)]
    assert h.process_element({"k": "a", "v": None}, processing_time=10) == [(7, None)]
    assert h.keys() == []  # the read removed it: the key's record is gone


def test_on_read_and_write_keeps_a_read_entry_alive():
    cfg = config(UPDATE.OnReadAndWrite, VISIBILITY.NeverReturnExpired, False)
    desc = MapStateDescriptor("m", str, int).enable_time_to_live(cfg)

    class Touch(KeyedProcessFunction):
        def open(self, ctx):
            self.m = ctx.get_map_state(desc)

        def process_element(self, ev, ctx):
            if ev["put"]:
                self.m.put(ev["put"], 1)
            yield sorted(self.m.keys()) if ev["read"] else None

    h = KeyedHarness(Touch(), "k", processing_time=0)
    h.process_element({"k": "a", "put": "x", "read": False})
    h.process_element({"k": "a", "put": "y", "read": False}, processing_time=5)
    assert h.process_element({"k": "a", "put": None, "read": True}, processing_time=9) == [["x", "y"]]
    assert h.state("a") == {"m": {"x": (1, 9), "y": (1, 9)}}
    assert h.process_element({"k": "a", "put": None, "read": True}, processing_time=18) == [["x", "y"]]
    assert h.process_element({"k": "a", "put": None, "read": True}, processing_time=28) == [[]]
    assert h.keys() == []


def test_event_time_stamp_in_on_timer_is_the_timer_time():
    # a TTL that outlives the batch's watermark (200): else the write-back drops the entry at once
    cfg = config(UPDATE.OnCreateAndWrite, VISIBILITY.NeverReturnExpired, True, ttl=1000)
    desc = ValueStateDescriptor("v", int).enable_time_to_live(cfg)

    class Timer(KeyedProcessFunction):
        def open(self, ctx):
            self.s = ctx.get_state(desc)

        def process_element(self, ev, ctx):
            ctx.timer_service().register_event_time_timer(ev["ts"] + 50)

        def on_timer(self, ts, ctx):
            self.s.update(1)
            yield ("fired", ts)

    strategy = WatermarkStrategy.for_bounded_out_of_orderness(10**9).with_timestamp_column("ts")
    h = KeyedHarness(Timer(), "k", watermark_strategy=strategy)
    h.process_batch([{"k": "a", "ts": 100}], watermark=90)
    assert h.process_batch([], watermark=200) == [("fired", 150)]
    assert h.state("a") == {"v": (1, 150)}


def test_ttl_handles_are_the_plain_kinds_and_plain_state_is_untouched():
    cfg = config(UPDATE.OnCreateAndWrite, VISIBILITY.NeverReturnExpired, False)
    with_ttl = Ops(ValueStateDescriptor("s", int).enable_time_to_live(cfg))
    without = Ops(ValueStateDescriptor("s", int))
    KeyedHarness(with_ttl, "k")
    KeyedHarness(without, "k")
    assert isinstance(with_ttl.s, TtlValueState) and isinstance(with_ttl.s, ValueState)
    assert type(without.s) is ValueState
    for kind, plain in (("list", ListState), ("map", MapState)):
        fn = Ops(descriptor(kind, cfg))
        KeyedHarness(fn, "k")
        assert isinstance(fn.s, plain) and type(fn.s) is not plain
    # DISABLED turns the TTL off again
    desc = ValueStateDescriptor("s", int).enable_time_to_live(cfg)
    from sparkstate.api.ttl import DISABLED

    assert desc.enable_time_to_live(DISABLED).ttl_config is None


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("ttl", [0, -1, timedelta(0), timedelta(seconds=-5), "0 seconds"])
def test_zero_or_negative_ttl_is_refused(ttl):
    with pytest.raises(StateDescriptorError, match="positive"):
        StateTtlConfig.new_builder(ttl)


def test_a_ttl_that_is_not_a_duration_is_refused():
    with pytest.raises(StateDescriptorError, match="StateTtlConfig"):
        StateTtlConfig.new_builder("soon")


@pytest.mark.parametrize("given", [timedelta(hours=1), 1000, None, "1 hour"])
def test_enable_time_to_live_takes_a_config_only(given):
    with pytest.raises(StateDescriptorError, match=r"'seen'.*enable_time_to_live takes a StateTtlConfig.*new_builder"):
        ValueStateDescriptor("seen", bool).enable_time_to_live(given)


@pytest.mark.parametrize("kind,op,arg", [
    ("value", "update", "x"), ("list", "add", "x"), ("list", "add_all", [1, "x"]), ("list", "replace", ["x"]),
    ("map", "put", ("a", "x")), ("map", "put", (1, 1)), ("reducing", "add", "x"),
])
def test_wrong_type_writes_are_still_refused(kind, op, arg):
    cfg = config(UPDATE.OnCreateAndWrite, VISIBILITY.NeverReturnExpired, False)
    h = KeyedHarness(Ops(descriptor(kind, cfg)), "k")
    with pytest.raises(Exception) as info:
        h.process_element({"k": "a", "op": op, "arg": arg})
    cause = info.value if isinstance(info.value, StateTypeError) else info.value.__cause__
    assert isinstance(cause, StateTypeError), info.value
    assert "'s'" in str(cause) and "'a'" in str(cause)
    assert h.state("a") == {}


def test_a_bad_accumulator_is_refused_with_ttl():
    class Bad(SumCount):
        def add(self, value, acc):
            return None

    cfg = config(UPDATE.OnCreateAndWrite, VISIBILITY.NeverReturnExpired, False)
    desc = AggregatingStateDescriptor("s", Bad(), tuple).enable_time_to_live(cfg)
    h = KeyedHarness(Ops(desc), "k")
    with pytest.raises(Exception, match="accumulator returned by add"):
        h.process_element({"k": "a", "op": "add", "arg": 1})


# --------------------------------------------------------------------------- savepoints


class AllKinds(KeyedProcessFunction):
    """One state of each kind, TTL'd by ``cfg`` (None: no TTL); ``v`` of an event is written to
    all of them and every event emits what they hold."""

    def __init__(self, cfg, value_type=int):
        self.cfg, self.value_type = cfg, value_type

    def open(self, ctx):
        def ttl(d):
            return d.enable_time_to_live(self.cfg) if self.cfg is not None else d

        self.value = ctx.get_state(ttl(ValueStateDescriptor("value", self.value_type)))
        self.list = ctx.get_list_state(ttl(ListStateDescriptor("list", self.value_type)))
        self.map = ctx.get_map_state(ttl(MapStateDescriptor("map", str, self.value_type)))
        self.red = ctx.get_reducing_state(ttl(ReducingStateDescriptor("red", lambda a, b: a + b, self.value_type)))
        self.agg = ctx.get_aggregating_state(ttl(AggregatingStateDescriptor("agg", SumCount(), tuple)))

    def process_element(self, ev, ctx):
        if ev["v"] is not None:
            v = ev["v"]
            self.value.update(v), self.list.add(v), self.map.put(f"m{v}", v), self.red.add(v), self.agg.add(v)
        yield (ev["k"], self.value.value(), self.list.get(), self.map.items(), self.red.get(), self.agg.get())


PT_CFG = config(UPDATE.OnCreateAndWrite, VISIBILITY.NeverReturnExpired, False, ttl=100)


def test_savepoint_round_trip_keeps_every_entry_time(tmp_path):
    from sparkstate.savepoint.format import ENCODING, read_table

    h = KeyedHarness(AllKinds(PT_CFG), "k", processing_time=1000)
    h.process_element({"k": "a", "v": 1})
    h.process_element({"k": "a", "v": 2}, processing_time=1050)
    h.process_element({"k": "b", "v": 3}, processing_time=1060)
    before = {k: h.state(k) for k in h.keys()}
    assert before["a"]["list"] == [(1, 1000), (2, 1050)] and before["a"]["value"] == (2, 1050)
    meta = h.savepoint(tmp_path / "sp")
    assert meta["state_ttl"] == {n: PT_CFG.describe() for n in ("agg", "list", "map", "red", "value")}
    # the typed-Arrow columns are for bare values: a (value, ts) column is JSON
    sp = open_savepoint(LocalDirectory(str(tmp_path / "sp")))
    for kg in sp.key_groups:
        table = read_table(sp.group_bytes(kg))
        assert all(table.schema.field(n).metadata[ENCODING] == b"json" for n in ("value", "red", "list", "map"))
    restored = KeyedHarness(AllKinds(PT_CFG), "k", from_savepoint=tmp_path / "sp")
    assert {k: restored.state(k) for k in restored.keys()} == before
    assert restored.restore_notes == []
    # the restored times decide: at 1100 a's first writes (1000) expired, the second ones (1050) not
    assert restored.process_element({"k": "a", "v": None}, processing_time=1100) == [
        ("a", 2, [2], [("m2", 2)], 3, "3/2")]
    assert restored.process_element({"k": "a", "v": None}, processing_time=1150) == [("a", None, [], [], None, None)]


def test_restore_without_ttl_into_ttl_stamps_values_with_the_savepoint_time(tmp_path):
    h = KeyedHarness(AllKinds(None), "k", processing_time=5000)
    h.process_element({"k": "a", "v": 1})
    h.process_element({"k": "a", "v": 2}, processing_time=5010)
    h.savepoint(tmp_path / "sp")
    restored = KeyedHarness(AllKinds(PT_CFG), "k", from_savepoint=tmp_path / "sp")
    assert restored.state("a") == {
        "value": (2, 5010), "list": [(1, 5010), (2, 5010)], "map": {"m1": (1, 5010), "m2": (2, 5010)},
        "red": (3, 5010), "agg": ((3, 2), 5010)}
    assert any("'value' now has a time-to-live" in n and "5010" in n for n in restored.restore_notes)
    assert restored.process_element({"k": "a", "v": None}, processing_time=5109)[0][1] == 2
    assert restored.process_element({"k": "a", "v": None}, processing_time=5110) == [("a", None, [], [], None, None)]


def test_restore_with_ttl_into_no_ttl_drops_the_times(tmp_path):
    h = KeyedHarness(AllKinds(PT_CFG), "k", processing_time=5000)
    h.process_element({"k": "a", "v": 1})
    h.process_element({"k": "a", "v": 2}, processing_time=5010)
    h.savepoint(tmp_path / "sp")
    restored = KeyedHarness(AllKinds(None), "k", from_savepoint=tmp_path / "sp")
    assert restored.state("a") == {"value": 2, "list": [1, 2], "map": {"m1": 1, "m2": 2}, "red": 3, "agg": (3, 2)}
    assert any("'list' no longer has a time-to-live" in n for n in restored.restore_notes)
    # nothing expires any more
    assert restored.process_element({"k": "a", "v": None}, processing_time=10**9)[0][1] == 2


def test_a_type_migration_of_a_ttl_state_converts_inside_the_times(tmp_path):
    h = KeyedHarness(AllKinds(PT_CFG), "k", processing_time=5000)
    h.process_element({"k": "a", "v": 1})
    h.savepoint(tmp_path / "sp")
    restored = KeyedHarness(AllKinds(PT_CFG, value_type=float), "k", from_savepoint=tmp_path / "sp")
    state = restored.state("a")
    assert state["value"] == (1.0, 5000) and type(state["value"][0]) is float
    assert state["list"] == [(1.0, 5000)] and type(state["list"][0][0]) is float
    assert type(state["map"]["m1"][0]) is float and type(state["red"][0]) is float
    # and gaining a TTL along with the type change
    h2 = KeyedHarness(AllKinds(None), "k", processing_time=7000)
    h2.process_element({"k": "a", "v": 1})
    h2.savepoint(tmp_path / "sp2")
    state = KeyedHarness(AllKinds(PT_CFG, value_type=float), "k", from_savepoint=tmp_path / "sp2").state("a")
    assert state["value"] == (1.0, 7000) and type(state["value"][0]) is float and state["map"] == {"m1": (1.0, 7000)}


def test_event_time_ttl_restored_from_a_savepoint_without_ttl_takes_its_watermark(tmp_path):
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(0).with_timestamp_column("ts")
    h = KeyedHarness(AllKinds(None), "k", watermark_strategy=strategy, processing_time=1)
    h.process_element({"k": "a", "v": 1, "ts": 1_000_000})
    h.process_element({"k": "b", "v": 1, "ts": 1_000_500})
    sp = h.savepoint(tmp_path / "sp")
    cfg = config(UPDATE.OnCreateAndWrite, VISIBILITY.NeverReturnExpired, True, ttl=100)
    restored = KeyedHarness(AllKinds(cfg), "k", watermark_strategy=strategy, from_savepoint=tmp_path / "sp")
    assert restored.state("a")["value"] == (1, sp["watermark_ms"]) == (1, 1_000_499)


def test_a_bootstrapped_savepoint_restored_with_ttl_takes_its_creation_time(tmp_path):
    import datetime as dt

    import pandas as pd

    from sparkstate import Job, ListSource, MemorySink
    from sparkstate.savepoint.bootstrap import write_savepoint

    def job():
        return (Job("boot").source(ListSource([[{"k": "a", "v": 1}]], schema="k string, v bigint")).key_by("k")
                .process(AllKinds(PT_CFG), output_schema="k string").sink(MemorySink()).with_settings(key_groups=8))

    meta = write_savepoint(job(), {"value": pd.DataFrame({"k": ["a"], "value": [5]})}, tmp_path / "sp")
    assert meta["state_ttl"] == {}  # these bootstrapped values carry no times
    created = int(dt.datetime.fromisoformat(meta["created"]).timestamp() * 1000)
    h = job().harness(from_savepoint=tmp_path / "sp")
    assert h.state("a") == {"value": (5, created)}


def test_the_reader_shows_last_access_and_a_bootstrap_from_its_frames_keeps_the_times(tmp_path):
    from sparkstate import Job, ListSource, MemorySink
    from sparkstate.savepoint.bootstrap import write_savepoint
    from sparkstate.savepoint.reader import read_savepoint

    def job():
        return (Job("boot").source(ListSource([[{"k": "a", "v": 1}]], schema="k string, v bigint")).key_by("k")
                .process(AllKinds(PT_CFG), output_schema="k string").sink(MemorySink()).with_settings(key_groups=8))

    h = KeyedHarness(AllKinds(PT_CFG), "k", processing_time=1000, job_name="boot", key_groups=8)
    h.process_element({"k": "a", "v": 1})
    h.process_element({"k": "a", "v": 2}, processing_time=1050)
    h.savepoint(tmp_path / "sp")
    reader = read_savepoint(tmp_path / "sp")
    assert reader.state("list").to_dict("records") == [
        {"k": "a", "index": 0, "value": 1, "last_access": 1000}, {"k": "a", "index": 1, "value": 2, "last_access": 1050}]
    assert reader.state("value").to_dict("records") == [{"k": "a", "value": 2, "last_access": 1050}]
    assert list(reader.state("map").columns) == ["k", "map_key", "value", "last_access"]
    meta = write_savepoint(job(), {n: reader.state(n) for n in reader.states}, tmp_path / "sp2")
    assert set(meta["state_ttl"]) == {"value", "list", "map", "red", "agg"}
    assert job().harness(from_savepoint=tmp_path / "sp2").state("a") == h.state("a")
