"""The Kafka sink's records: the column-wise encoder gives exactly the bytes, keys and dead letters
of the row-by-row JSON encoder, on randomised, seeded tables of every column type an output can
have (strings that need escapes, integers of every width, floats with NaN and infinity, booleans,
nulls, timestamps of every unit with and without a zone, dates, decimals, binary, nested)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random

import pyarrow as pa
import pytest

from sparkstate.connectors.kafka.records import _encode_columns, _encode_rows, encode

STRINGS = ['plain', 'quote " inside', "back\\slash", "new\nline", "tab\t", "cr\r", "nul\x00", "bell\x07", "\x1f",
           "naïve", "日本語", "emoji 😀", "\u2028 line sep", "\x7f del", "", "</script>", "'single'"]


def _column(rng: random.Random, kind: str, n: int) -> pa.Array:
    def maybe(make):
        return [None if rng.random() < 0.15 else make() for _ in range(n)]

    if kind == "string":
        return pa.array(maybe(lambda: rng.choice(STRINGS) + str(rng.randrange(5))), pa.string())
    if kind == "plain_string":
        return pa.array(maybe(lambda: f"m{rng.randrange(10**6)}"), pa.string())
    if kind == "large_string":
        return pa.array(maybe(lambda: rng.choice(STRINGS)), pa.large_string())
    if kind in ("int8", "int16", "int32", "int64"):
        bits = int(kind[3:])
        return pa.array(maybe(lambda: rng.randrange(-(2 ** (bits - 1)), 2 ** (bits - 1))), getattr(pa, kind)())
    if kind == "uint64":
        return pa.array(maybe(lambda: rng.randrange(2**64)), pa.uint64())
    if kind in ("double", "float32"):
        top = 308 if kind == "double" else 38  # a float32 overflows beyond

        def number():
            return rng.choice([rng.random() * 10 ** rng.randrange(-320, top), -0.0, 0.0, 1.0, 1e16, 1e-7, 0.1 + 0.2,
                               float(rng.randrange(-10**9, 10**9)), 5e-324, 3.4e38])
        return pa.array(maybe(number), pa.float64() if kind == "double" else pa.float32())
    if kind == "nan_double":
        return pa.array(maybe(lambda: rng.choice([1.5, float("nan"), float("inf"), -float("inf"), 2.0, 3.0, 4.0])),
                        pa.float64())
    if kind == "bool":
        return pa.array(maybe(lambda: rng.random() < 0.5), pa.bool_())
    if kind == "null":
        return pa.nulls(n)
    if kind.startswith("ts_"):
        unit, tz = kind.split("_")[1], (None if kind.endswith("naive") else "UTC")
        scale = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
        return pa.array(maybe(lambda: rng.randrange(-10**9, 4 * 10**9) * scale + rng.randrange(scale)),
                        pa.int64()).cast(pa.timestamp(unit, tz))
    if kind == "date":
        return pa.array(maybe(lambda: dt.date(1970, 1, 1) + dt.timedelta(days=rng.randrange(-10**5, 10**5))), pa.date32())
    if kind == "decimal":
        return pa.array(maybe(lambda: decimal.Decimal(rng.randrange(-10**8, 10**8)) / 100), pa.decimal128(12, 2))
    if kind == "binary":
        return pa.array(maybe(lambda: rng.randbytes(4)), pa.binary())
    if kind == "list":
        return pa.array(maybe(lambda: [rng.randrange(9) for _ in range(rng.randrange(3))]), pa.list_(pa.int64()))
    if kind == "struct":
        return pa.array(maybe(lambda: {"a": rng.choice(STRINGS), "b": rng.random()}),
                        pa.struct([("a", pa.string()), ("b", pa.float64())]))
    if kind == "map":
        return pa.array(maybe(lambda: [("k", rng.randrange(9))]), pa.map_(pa.string(), pa.int64()))
    raise AssertionError(kind)


FAST = ["string", "plain_string", "large_string", "int8", "int16", "int32", "int64", "uint64", "double", "float32",
        "bool", "null", "ts_s", "ts_ms", "ts_us", "ts_us_naive", "ts_ms_naive", "date"]
SLOW = ["nan_double", "ts_ns", "decimal", "binary", "list", "struct", "map"]


def _table(rng: random.Random, kinds: list[str], n: int) -> pa.Table:
    names = [f"{k}{i}" if rng.random() < 0.7 else f'odd "name" {i} é' for i, k in enumerate(kinds)]
    return pa.table({name: _column(rng, k, n) for name, k in zip(names, kinds)})


@pytest.mark.parametrize("seed", range(8))
def test_the_column_wise_encoder_writes_the_row_encoders_bytes(seed: int) -> None:
    rng = random.Random(seed)
    answered = 0
    for _ in range(40):
        kinds = rng.sample(FAST, rng.randrange(1, 6))
        if rng.random() < 0.3:
            kinds.append(rng.choice(SLOW))
        table = _table(rng, kinds, rng.choice([1, 7, 200]))
        names = table.column_names
        for key in [(), (rng.choice(names),), tuple(rng.sample(names, min(2, len(names))))]:
            want = _encode_rows(table, key)
            assert encode(table, key) == want
            fast = _encode_columns(table, key)
            if fast is not None:
                answered += 1
                assert fast == want
    assert answered > 40


def test_every_fast_type_is_encoded_column_wise() -> None:
    rng = random.Random(1)
    for kind in FAST:
        table = _table(rng, ["plain_string", kind], 50)
        for key in [(), (table.column_names[1],), tuple(table.column_names)]:
            fast = _encode_columns(table, key)
            assert fast is not None, kind
            assert fast == _encode_rows(table, key), kind


def test_rows_with_nan_or_infinity_are_dead_letters() -> None:
    table = pa.table({"k": ["a", "b", "c"], "v": [1.0, float("nan"), float("inf")]})
    values, keys, dead = encode(table, ("k",))
    assert values == [b'{"k":"a","v":1.0}', b"", b""]
    assert keys == [b"a", None, None]
    assert [d["reason"].split(":")[0] for d in dead] == ["row 1 cannot be a JSON record", "row 2 cannot be a JSON record"]


def test_the_record_is_the_json_encoders() -> None:
    table = pa.table({"merchant_id": ["m1", 'q"'], "count": [1, 2], "total": [1.5, 1e16],
                      "at": pa.array([0, 1_000], pa.timestamp("ms", "UTC"))})
    values, keys, dead = encode(table, ("merchant_id",))
    assert [json.loads(v) for v in values] == [
        {"merchant_id": "m1", "count": 1, "total": 1.5, "at": "1970-01-01T00:00:00+00:00"},
        {"merchant_id": 'q"', "count": 2, "total": 1e16, "at": "1970-01-01T00:00:01+00:00"},
    ]
    assert values[1] == b'{"merchant_id":"q\\"","count":2,"total":1e+16,"at":"1970-01-01T00:00:01+00:00"}'
    assert keys == [b"m1", b'q"'] and not dead
