"""Keyed state handles: Flink's semantics for the five kinds, and type checks on every write."""

from __future__ import annotations

import dataclasses

import pytest

from sparkstate import (
    AggregateFunction,
    AggregatingStateDescriptor,
    KeyedHarness,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateAccessError,
    StateDescriptorError,
    StateTypeError,
    ValueStateDescriptor,
)


class Probe(KeyedProcessFunction):
    """Runs ``event["do"](self, ctx)`` so each test can drive the state directly."""

    def __init__(self, *descriptors):
        self.descriptors = descriptors

    def open(self, ctx):
        self.states = {}
        for d in self.descriptors:
            getter = {
                "value": ctx.get_state,
                "list": ctx.get_list_state,
                "map": ctx.get_map_state,
                "reducing": ctx.get_reducing_state,
                "aggregating": ctx.get_aggregating_state,
            }[d.kind]
            self.states[d.name] = getter(d)

    def process_element(self, event, ctx):
        result = event["do"](self.states)
        if result is not None:
            yield result


def harness(*descriptors):
    return KeyedHarness(Probe(*descriptors), "k", serialize_state=False)


def run(h, fn, key="a"):
    out = h.process_element({"k": key, "do": fn})
    return out[0] if out else None


def test_value_state_default_update_clear():
    h = harness(ValueStateDescriptor("total", float, default=0.0), ValueStateDescriptor("name", str))
    assert run(h, lambda s: s["total"].value()) == 0.0
    assert run(h, lambda s: s["name"].value()) is None
    run(h, lambda s: s["total"].update(2.5))
    run(h, lambda s: s["total"].update(3))  # ints are valid floats
    assert h.state("a") == {"total": 3}
    run(h, lambda s: s["total"].update(None))  # None clears, as in Flink
    assert h.state("a") == {}
    assert "a" not in h.keys()  # a key without state takes no room


def test_value_state_is_per_key():
    h = harness(ValueStateDescriptor("n", int, default=0))
    run(h, lambda s: s["n"].update(s["n"].value() + 1), "a")
    run(h, lambda s: s["n"].update(s["n"].value() + 1), "a")
    run(h, lambda s: s["n"].update(s["n"].value() + 1), "b")
    assert h.state("a") == {"n": 2} and h.state("b") == {"n": 1}


def test_mutable_default_is_not_shared():
    h = harness(ValueStateDescriptor("seen", list, default=[]))
    run(h, lambda s: s["seen"].value().append(1), "a")
    assert run(h, lambda s: s["seen"].value(), "b") == []


@pytest.mark.parametrize(
    "desc, bad, message",
    [
        (
            ValueStateDescriptor("total", float), "7",
            "ValueState[float] 'total' for key 'a': the value must be float, got str '7'",
        ),
        (ValueStateDescriptor("n", int), True, "must be int, got bool True"),
        (ValueStateDescriptor("n", int), 1.5, "must be int, got float 1.5"),
    ],
)
def test_value_state_rejects_wrong_type(desc, bad, message):
    h = harness(desc)
    with pytest.raises(StateTypeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        run(h, lambda s: s[desc.name].update(bad))
    assert h.state("a") == {}  # nothing written


def test_list_state():
    h = harness(ListStateDescriptor("buf", int))
    assert run(h, lambda s: s["buf"].get()) == []
    run(h, lambda s: s["buf"].add(1))
    run(h, lambda s: s["buf"].add_all([2, 3]))
    assert run(h, lambda s: s["buf"].get()) == [1, 2, 3]
    assert run(h, lambda s: len(s["buf"])) == 3
    got = run(h, lambda s: s["buf"].get())
    got.append(99)  # get() is a copy
    assert h.state("a") == {"buf": [1, 2, 3]}
    run(h, lambda s: s["buf"].update([7]))
    assert h.state("a") == {"buf": [7]}
    run(h, lambda s: s["buf"].update([]))
    assert h.state("a") == {}
    with pytest.raises(StateTypeError, match="ListState\\[int\\] 'buf' for key 'a': an element must be int, got str 'x'"):
        run(h, lambda s: s["buf"].add_all([4, "x"]))
    assert h.state("a") == {}  # add_all checks every element before adding any


def test_map_state():
    h = harness(MapStateDescriptor("m", str, int))
    run(h, lambda s: s["m"].put("x", 1))
    run(h, lambda s: s["m"].put_all({"y": 2, "z": 3}))
    assert run(h, lambda s: (s["m"].get("x"), s["m"].get("q", -1), s["m"].contains("y"), "z" in s["m"])) == (1, -1, True, True)
    assert run(h, lambda s: sorted(s["m"].items())) == [("x", 1), ("y", 2), ("z", 3)]
    assert run(h, lambda s: (sorted(s["m"].keys()), sorted(s["m"].values()), len(s["m"]), s["m"]["y"])) == (
        ["x", "y", "z"], [1, 2, 3], 3, 2
    )
    run(h, lambda s: s["m"].remove("x"))
    run(h, lambda s: s["m"].remove("nope"))
    assert run(h, lambda s: s["m"].is_empty()) is False
    run(h, lambda s: s["m"].clear())
    assert run(h, lambda s: s["m"].is_empty()) is True
    with pytest.raises(StateTypeError, match="a map key must be str, got int 1"):
        run(h, lambda s: s["m"].put(1, 1))
    with pytest.raises(StateTypeError, match="a map value must be int, got str 'v'"):
        run(h, lambda s: s["m"].put("k", "v"))


def test_reducing_state():
    h = harness(ReducingStateDescriptor("max", max, int))
    assert run(h, lambda s: s["max"].get()) is None
    for v in (3, 9, 4):
        run(h, lambda s, v=v: s["max"].add(v))
    assert run(h, lambda s: s["max"].get()) == 9
    bad = harness(ReducingStateDescriptor("x", lambda a, b: str(a + b), int))
    run(bad, lambda s: s["x"].add(1))
    with pytest.raises(StateTypeError, match="the reduce function's result must be int, got str '3'"):
        run(bad, lambda s: s["x"].add(2))


class Avg(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


def test_aggregating_state():
    h = harness(AggregatingStateDescriptor("avg", Avg(), tuple))
    assert run(h, lambda s: s["avg"].get()) is None
    run(h, lambda s: s["avg"].add(2))
    run(h, lambda s: s["avg"].add(4))
    assert run(h, lambda s: s["avg"].get()) == 3.0
    assert h.state("a") == {"avg": (6, 2)}


def test_descriptors_are_frozen_values():
    d = ValueStateDescriptor("total", float, default=0.0)
    assert d == ValueStateDescriptor("total", float, default=0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ValueStateDescriptor("", int), "non-empty string"),
        (lambda: ValueStateDescriptor("__x", int), "reserved"),
        (lambda: ReducingStateDescriptor("r", None, int), "reduce_function must be callable"),
        (lambda: AggregatingStateDescriptor("a", object()), "must be an AggregateFunction"),
        (lambda: ValueStateDescriptor("v", 42), "unsupported type 42"),
    ],
)
def test_bad_descriptors(make, message):
    with pytest.raises(StateDescriptorError, match=message):
        make()


def test_reusing_a_name_for_another_kind_is_an_error():
    class Reuse(KeyedProcessFunction):
        def open(self, ctx):
            ctx.get_state(ValueStateDescriptor("total", float))
            ctx.get_list_state(ListStateDescriptor("total", float))

    with pytest.raises(
        StateDescriptorError,
        match="'total' is already registered as ValueState\\[float\\]; it cannot be registered again as ListState\\[float\\]",
    ):
        KeyedHarness(Reuse(), "k")


def test_same_descriptor_twice_returns_same_handle():
    class Twice(KeyedProcessFunction):
        def open(self, ctx):
            self.a = ctx.get_state(ValueStateDescriptor("n", int))
            self.b = ctx.get_state(ValueStateDescriptor("n", int))

    fn = Twice()
    KeyedHarness(fn, "k")
    assert fn.a is fn.b


def test_wrong_getter_for_descriptor():
    class Wrong(KeyedProcessFunction):
        def open(self, ctx):
            ctx.get_list_state(ValueStateDescriptor("n", int))

    with pytest.raises(StateDescriptorError, match="get_list_state expects a ListStateDescriptor"):
        KeyedHarness(Wrong(), "k")


def test_state_outside_keyed_context():
    class Early(KeyedProcessFunction):
        def open(self, ctx):
            ctx.get_state(ValueStateDescriptor("n", int)).value()

    with pytest.raises(StateAccessError, match="outside of a keyed context"):
        KeyedHarness(Early(), "k")


def test_unpicklable_state_names_state_and_key():
    import threading

    h = KeyedHarness(Probe(ValueStateDescriptor("lock", object)), "k")
    with pytest.raises(StateTypeError, match="state 'lock' of key 'a' holds lock"):
        h.process_element({"k": "a", "do": lambda s: s["lock"].update(threading.Lock())})
