"""The savepoint format (savepoint/format.py): a key group's records through a table and
Parquet bytes and back are exactly the records, whatever their keys and values."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import pytest

from sparkstate.api.state import HELD_FIELD, TIMERS_FIELD
from sparkstate.savepoint.format import read_table, records_to_table, table_bytes, table_to_records


@dataclass
class Acc:
    count: int
    total: float
    tags: list[str]


def same(a: Any, b: Any) -> bool:
    """Equal values of the same types (NaN equal to NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, Acc):
        return same(a.count, b.count) and same(a.total, b.total) and same(a.tags, b.tags)
    return bool(a == b)


def random_value(rnd: random.Random, depth: int = 0) -> Any:
    simple = [
        lambda: rnd.randint(-(2**63), 2**63 - 1),
        lambda: rnd.choice([2**63, -(2**63) - 1, 10**30]),  # beyond int64
        lambda: rnd.choice([0.0, -0.0, 1.5, float("nan"), float("inf"), -float("inf"), 1e308]),
        lambda: rnd.choice(["", "m000042", "ünïcødé ✓", "a\x00b"]),
        lambda: rnd.choice([True, False]),
        lambda: rnd.randbytes(rnd.randint(0, 8)),
        lambda: None,
    ]
    if depth < 2:
        simple += [
            lambda: [random_value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))],
            lambda: {str(i): random_value(rnd, depth + 1) for i in range(rnd.randint(0, 3))},
            lambda: tuple(random_value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))),
            lambda: {(rnd.randint(0, 9), rnd.randint(0, 9)): random_value(rnd, depth + 1)},  # a window map
            lambda: Acc(rnd.randint(0, 9), rnd.random(), ["x"] * rnd.randint(0, 2)),
        ]
    return rnd.choice(simple)()


def random_key(rnd: random.Random) -> Any:
    return rnd.choice([
        lambda: f"m{rnd.randint(0, 10**6):06d}",
        lambda: rnd.randint(-(2**70), 2**70),
        lambda: (rnd.randint(0, 10**12), rnd.randint(0, 10**12)),  # a window (start, end)
        lambda: ("upi", rnd.randint(0, 99), rnd.random()),
        lambda: rnd.random(),
    ])()


def random_records(rnd: random.Random, states: list[str]) -> list[tuple[Any, dict]]:
    column_kind = {s: rnd.choice(["any", "int", "float", "str", "bool", "bytes"]) for s in states}
    typed = {
        "int": lambda: rnd.randint(-(2**63), 2**63 - 1), "float": lambda: rnd.choice([rnd.random(), float("nan")]),
        "str": lambda: str(rnd.random()), "bool": lambda: rnd.random() < 0.5, "bytes": lambda: rnd.randbytes(3),
    }
    keys = {random_key(rnd) for _ in range(rnd.randint(0, 30))}
    keys = {k for k in keys if not (isinstance(k, float) and math.isnan(k))}
    out = []
    for key in keys:
        rec: dict[str, Any] = {}
        for s in states:
            if rnd.random() < 0.7:
                kind = column_kind[s]
                rec[s] = random_value(rnd) if kind == "any" or rnd.random() < 0.05 else typed[kind]()
        if rnd.random() < 0.5:
            rec[TIMERS_FIELD] = {(rnd.randint(0, 1), rnd.randint(-(2**62), 2**62)) for _ in range(rnd.randint(0, 4))}
        if rnd.random() < 0.3:
            rec[HELD_FIELD] = rnd.randint(-(2**63), 2**63 - 1)
        out.append((key, rec))
    return out


def round_trip(records, states):
    return table_to_records(read_table(table_bytes(records_to_table(records, states))))


@pytest.mark.parametrize("seed", range(60))
def test_random_records_round_trip_exactly(seed):
    rnd = random.Random(seed)
    states = rnd.sample(["total", "seen", "last", "windows", "acc"], rnd.randint(0, 5))
    records = random_records(rnd, states)
    back = round_trip(records, states)
    assert len(back) == len(records)
    for (k1, r1), (k2, r2) in zip(records, back):
        assert same(k1, k2)
        assert r1.keys() == r2.keys(), (r1, r2)
        for name in r1:
            if name == TIMERS_FIELD:
                assert r1[name] == r2[name]
            else:
                assert same(r1[name], r2[name]), (name, r1[name], r2[name])


def test_none_values_absent_values_and_typed_columns_stay_apart():
    records = [("a", {"n": 1}), ("b", {"n": None}), ("c", {}), ("d", {"n": 2**64})]
    assert round_trip(records, ["n"]) == records
    typed = records_to_table([("a", {"n": 1}), ("c", {})], ["n"])
    assert typed.schema.field("n").metadata == {b"encoding": b"arrow"}


def test_an_empty_timer_set_and_a_missing_one_round_trip():
    records = [("a", {TIMERS_FIELD: set()}), ("b", {}), ("c", {TIMERS_FIELD: {(1, 5), (0, -3)}, HELD_FIELD: 7})]
    assert round_trip(records, []) == records


def test_a_state_left_out_of_the_states_is_not_written():
    assert round_trip([("a", {"x": 1, "gone": 2})], ["x"]) == [("a", {"x": 1})]


def test_bools_and_ints_keep_their_types_in_one_column():
    back = round_trip([("a", {"v": True}), ("b", {"v": 1})], ["v"])
    assert [type(r["v"]) for _, r in back] == [bool, int]
