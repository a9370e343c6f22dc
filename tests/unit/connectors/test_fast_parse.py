# ruff: noqa: UP031 - the poison lines are JSON text with a time spliced in, clearest with %
"""Reading a block of JSON or CSV lines at once (Arrow's readers) gives exactly what reading them one
by one gives: the same events (types and values, to the sign of a zero), the same dead letters
with the same reasons, the same raw lines and indexes. Randomised, seeded blocks mix good lines
of every shape the fast path takes with the lines it must leave to the line-by-line reading."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from sparkstate.connectors.text import FAST_MIN_LINES, LineParser

SCHEMA = "k string, ts timestamp, n int, b bigint, s smallint, v double, ok boolean, note string"
NOW = 1_767_225_600_000
WORDS = ["x", "naïve", "日本", "emoji 😀", 'quote "q"', "back\\slash", "tab\there", "nul\x00", "line\nbreak", ""]


def _iso(rng: random.Random, ms: int) -> str:
    import datetime as dt

    t = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    form = rng.randrange(4)
    if form == 0:
        return t.replace(tzinfo=None).isoformat()
    if form == 1:
        return t.isoformat()
    if form == 2:
        return t.astimezone(dt.timezone(dt.timedelta(hours=5, minutes=30))).isoformat()
    return t.strftime("%Y-%m-%d %H:%M:%S")


def good(rng: random.Random, iso: bool) -> str:
    ms = NOW + rng.randrange(-10**9, 10**9)
    event: dict = {"k": rng.choice(WORDS) + str(rng.randrange(9)), "ts": _iso(rng, ms) if iso else ms}
    if rng.random() < 0.8:
        event["n"] = rng.randrange(-2**31, 2**31)
    if rng.random() < 0.8:
        event["b"] = rng.choice([rng.randrange(-2**63, 2**63), 0, -1, 2**63 - 1, -2**63])
    if rng.random() < 0.5:
        event["s"] = rng.randrange(-2**15, 2**15)
    if rng.random() < 0.9:
        rare_zero = -0.0 if rng.random() < 0.02 else 2.5  # a block with -0.0 is read line by line
        event["v"] = rng.choice([rng.random() * 10 ** rng.randrange(-300, 300), rare_zero, 0.0, rng.randrange(-10**6, 10**6),
                                 rng.randrange(-2**70, 2**70), 1e308, 5e-324, 0.1 + 0.2])
    if rng.random() < 0.5:
        event["ok"] = rng.random() < 0.5
    if rng.random() < 0.1:  # digits beyond a double's precision: both readings must round alike
        event["v"] = float(f"{rng.random():.30f}")
    if rng.random() < 0.7:
        event["note"] = rng.choice([None, rng.choice(WORDS), "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(8))])
    if rng.random() < 0.2:
        event["extra"] = rng.choice([{"nested": [1, {"a": None}]}, [1, 2], "text", 12, None, True])
    items = list(event.items())
    rng.shuffle(items)
    ascii_only = rng.random() < 0.5
    line = json.dumps(dict(items), ensure_ascii=ascii_only, separators=rng.choice([(",", ":"), (", ", ": ")]))
    if "v" in event and type(event["v"]) is float and rng.random() < 0.2:
        # the number as a producer may write it: many digits, an exponent
        digits = rng.choice([f"{event['v']:.25e}", f"{event['v']:.17g}", f"{event['v']:.40f}"])
        line = line.replace(json.dumps(event["v"]), digits, 1)
    return " " + line + " " if rng.random() < 0.05 else line


def poison(rng: random.Random) -> str | None:
    ms = NOW + rng.randrange(10**6)
    kinds = [
        lambda: None,  # a tombstone
        lambda: "",
        lambda: "   \t",
        lambda: "\u3000",
        lambda: "not json",
        lambda: "[1, 2]",
        lambda: "42",
        lambda: '"text"',
        lambda: "null",
        lambda: json.dumps({"k": 1, "ts": ms}),  # a number for a string
        lambda: json.dumps({"k": None, "ts": ms}),  # a null key
        lambda: json.dumps({"ts": ms}),  # no key
        lambda: json.dumps({"k": "a"}),  # no event time
        lambda: json.dumps({"k": "a", "ts": None}),
        lambda: json.dumps({"k": "a", "ts": ms, "n": 2**31}),  # out of range for int
        lambda: json.dumps({"k": "a", "ts": ms, "s": -(2**15) - 1}),
        lambda: json.dumps({"k": "a", "ts": ms, "b": 2**63}),
        lambda: json.dumps({"k": "a", "ts": ms, "n": 1.0}),  # a float for an integer
        lambda: json.dumps({"k": "a", "ts": ms, "n": "1"}),
        lambda: '{"k": "a", "ts": %d, "n": 1e3}' % ms,
        lambda: json.dumps({"k": "a", "ts": ms, "ok": 1}),  # a number for a boolean
        lambda: json.dumps({"k": "a", "ts": ms, "ok": "true"}),
        lambda: json.dumps({"k": "a", "ts": ms, "v": "1.5"}),
        lambda: json.dumps({"k": "a", "ts": ms, "v": True}),
        lambda: '{"k": "a", "ts": %d, "v": NaN}' % ms,
        lambda: '{"k": "a", "ts": %d, "v": Infinity}' % ms,
        lambda: '{"k": "a", "ts": %d, "v": -Infinity}' % ms,
        lambda: '{"k": "a", "ts": %d, "v": 1e400}' % ms,
        lambda: '{"k": "a", "ts": %d, "v": 1%s}' % (ms, "0" * 400),
        lambda: '{"k": "a", "ts": %d, "z": nan}' % ms,
        lambda: '{"k": "a", "ts": %d, "z": NaN}' % ms,
        lambda: json.dumps({"k": "a", "ts": 1.5e12}),  # a float time
        lambda: json.dumps({"k": "a", "ts": 10**17}),  # microseconds? out of range
        lambda: json.dumps({"k": "a", "ts": -(10**16)}),
        lambda: json.dumps({"k": "a", "ts": "yesterday"}),
        lambda: json.dumps({"k": "a", "ts": str(ms)}),  # digits as text
        lambda: json.dumps({"k": "a", "ts": "2024-13-01T00:00:00"}),
        lambda: json.dumps({"k": "a", "ts": True}),
        lambda: json.dumps({"k": "a", "ts": ms, "note": ["x"]}),
        lambda: json.dumps({"k": "a", "ts": ms, "note": {"x": 1}}),
        lambda: '{"k": "a", "k": "b", "ts": %d}' % ms,  # a field twice
        lambda: '{"\\u006b": "escaped name", "ts": %d}' % ms,
        lambda: '{"k": "\\ud800", "ts": %d}' % ms,  # a lone surrogate
        lambda: '{"k": "\\ud83d\\ude00 pair", "ts": %d}' % ms,
        lambda: '{"k": "raw \x01 control", "ts": %d}' % ms,
        lambda: '{"k": "a", "ts": %d}{"k": "b", "ts": %d}' % (ms, ms),  # two objects on a line
        lambda: '{"k": "a", "ts": %d} trailing' % ms,
        lambda: '{"k": "a", "ts": %d,}' % ms,
        lambda: "{'k': 'a'}",
        lambda: '{"k": "a",\n "ts": %d}' % ms,  # a line break inside the value
        lambda: '{"k": "a", "ts": %d}\r' % ms,
        lambda: '{"k": "a", "ts": %d}\r\n' % ms,
        lambda: "\ufeff" + json.dumps({"k": "a", "ts": ms}),
        lambda: '{"k": "a", "ts": %d, "deep": %s%s}' % (ms, "[" * 250, "]" * 250),
        lambda: '{"k": "a", "ts": %d, "deep": %s%s}' % (ms, "[" * 150, "]" * 150),
        lambda: '{"k": "a", "ts": %d, "big": 1%s}' % (ms, "0" * 5000),
        lambda: json.dumps({"k": "a" * 5000, "ts": ms}),
        lambda: json.dumps({"k": "a", "ts": ms, "note": "x" * 3990}),
        lambda: '{"k": "a", "ts": %d, "n": 01}' % ms,  # numbers JSON does not allow
        lambda: '{"k": "a", "ts": %d, "n": +1}' % ms,
        lambda: '{"k": "a", "ts": %d, "v": .5}' % ms,
        lambda: '{"k": "a", "ts": %d, "v": 1.}' % ms,
        lambda: '{"k": "a", "ts": %d, "v": -}' % ms,
        lambda: '{"k": "a", "ts": %d, "v": 1e-400}' % ms,  # rounds to zero
        lambda: '{"k": "a", "ts": %d, "v": 0x10}' % ms,
        lambda: '{"k": "a", "ts": %d, "ok": True}' % ms,
        lambda: '{"k": "a", "ts": %d, "note": \'x\'}' % ms,
        lambda: '{"k": "a", "ts": 0%d}' % ms,
        lambda: '{"k": "a", "ts": %d, "v": -0}' % ms,  # Python: the integer 0, so 0.0; Arrow: -0.0
        lambda: '{"k": "a", "ts": %d, "v": -0.0}' % ms,
    ]
    return rng.choice(kinds)()


def _same(parser: LineParser, lines: list) -> bool:
    """Asserts the block reading equals the line-by-line one; True when the block path answered."""
    fast = parser._parse_block(list(lines))
    got = parser.parse_indexed(lines)
    want = parser._parse_each(list(lines))
    assert got[0].schema == want[0].schema
    assert repr(got[0].to_pylist()) == repr(want[0].to_pylist())
    assert got[1:] == want[1:]
    if fast is not None:
        assert fast[0].schema == want[0].schema
        assert repr(fast[0].to_pylist()) == repr(want[0].to_pylist())
        assert fast[1:] == want[1:]
    try:
        column = pa.array(lines, pa.string())
    except (pa.ArrowException, UnicodeEncodeError):  # a lone surrogate: Arrow holds no such line
        return fast is not None
    at_once = parser.parse_column(column)
    if at_once is not None:  # the lines as Arrow holds them (a file's): only when every line is an event
        assert want[1] == [] and want[3] == list(range(len(lines))), "every line read at once is an event"
        assert at_once.schema == want[0].schema
        assert repr(at_once.to_pylist()) == repr(want[0].to_pylist())
    return fast is not None


def _random_blocks(parser: LineParser, rng: random.Random, make_good, make_poison, iso_share: float) -> None:
    """120 random blocks, half with a few poison lines: each read both ways and compared."""
    fast = 0
    blocks = 120
    for _ in range(blocks):
        iso = rng.random() < iso_share
        n = rng.choice([FAST_MIN_LINES, 50, 200])
        lines: list = [make_good(rng, iso and rng.random() < 0.95) for _ in range(n)]
        if rng.random() < 0.5:
            for _ in range(rng.randrange(1, 4)):
                lines[rng.randrange(n)] = make_poison(rng)
        fast += _same(parser, lines)
    assert fast > blocks // 4, "the block reading must answer for the blocks it can read"


@pytest.mark.parametrize("seed", range(6))
def test_blocks_read_at_once_equal_the_lines_read_one_by_one(seed: int) -> None:
    parser = LineParser(SCHEMA, key_columns=["k"], time_column="ts")
    _random_blocks(parser, random.Random(seed), good, poison, 0.3)


def test_every_poison_line_alone_in_a_good_block() -> None:
    """Each kind of line the block reading must not get wrong, in a block of good lines."""
    rng = random.Random(99)
    parser = LineParser(SCHEMA, key_columns=["k"], time_column="ts")
    for _ in range(400):
        lines: list = [good(rng, False) for _ in range(FAST_MIN_LINES)]
        lines[rng.randrange(len(lines))] = poison(rng)
        _same(parser, lines)


def test_a_good_block_is_read_at_once_epoch_and_iso() -> None:
    rng = random.Random(3)
    parser = LineParser(SCHEMA, key_columns=["k"], time_column="ts")

    def line(ts: object) -> str:
        return json.dumps({"k": rng.choice(WORDS), "ts": ts, "n": rng.randrange(99), "v": rng.random() * 1e6,
                           "ok": True, "note": rng.choice(WORDS + [None]), "other": [1]}, ensure_ascii=rng.random() < 0.5)

    assert _same(parser, [line(NOW + i) for i in range(100)])
    assert _same(parser, [line(_iso(rng, NOW + i)) for i in range(100)])
    assert _same(parser, [line(NOW + i) for i in range(100)])


def test_without_key_or_time_columns_nulls_are_events() -> None:
    rng = random.Random(4)
    parser = LineParser(SCHEMA)
    lines = [good(rng, False) for _ in range(60)] + [json.dumps({"k": None}), json.dumps({"n": 3})]
    assert _same(parser, lines)


def test_schemas_the_block_reading_does_not_take_are_read_line_by_line() -> None:
    for schema in ("k string, d date", "k string, x decimal(10,2)", "k string, f float", "k string, a array<int>",
                   "k string, m map<string,int>"):
        assert LineParser(schema)._fast is None
    assert LineParser("k string, d date", format="csv")._fast is None
    assert LineParser("k string", max_line_length=100)._fast is None
    lines = [json.dumps({"k": "a", "d": "2024-01-01"})] * 40
    events, dead = LineParser("k string, d date").parse(lines)
    assert events.num_rows == 40 and not dead


def test_the_batch_types_are_the_schemas() -> None:
    parser = LineParser(SCHEMA, key_columns=["k"], time_column="ts")
    batch, dead = parser.parse([json.dumps({"k": "a", "ts": NOW, "n": 1, "s": 2, "b": 3})] * 40)
    assert not dead and batch.schema == parser.schema
    assert batch.column(1).type == pa.timestamp("us", tz="UTC")
    assert batch.column(1)[0].value == NOW * 1000


@pytest.mark.parametrize("seed", range(3))
def test_record_values_read_at_once_equal_the_lines_read_one_by_one(seed: int) -> None:
    """Kafka record values (bytes, a record each) read at once give the line-by-line events, or
    are left to the line-by-line reading (None); never other events."""
    rng = random.Random(100 + seed)
    parser = LineParser(SCHEMA, key_columns=["k"], time_column="ts")
    fast = 0
    for _ in range(100):
        n = rng.choice([FAST_MIN_LINES, 80])
        iso = rng.random() < 0.2
        lines = [good(rng, iso) for _ in range(n)]
        if rng.random() < 0.5:
            lines[rng.randrange(n)] = poison(rng) or ""
        values = [line.encode("utf-8", "surrogatepass") for line in lines]
        if rng.random() < 0.1:
            values[rng.randrange(n)] = rng.choice([b"\xff\xfe{}", b"\xef\xbb\xbf{}", b" ", b"{\"k\": \"a\r\"}"])
        got = parser.parse_values(values)
        if got is None:
            continue
        fast += 1
        want = parser._parse_each([v.decode("utf-8", "replace") for v in values])
        assert want[1] == [] and len(want[3]) == n, "every value read at once is an event"
        assert got.schema == want[0].schema
        assert repr(got.to_pylist()) == repr(want[0].to_pylist())
    assert fast > 20


# --------------------------------------------------------------------------- CSV

CSV_WORDS = ["x", "naïve", "日本", "emoji 😀", "comma, inside", "tab\there", "'single'", " spaced ", "K"]
#: forms of a field that are rare in a block (each one sends its block line by line, or not)
CSV_RARE = ['quote "q"', "+5", "-0", "1.", ".5", "-0.0", "+2.5", "TRUE", "False", "1E5"]


def _rare(rng: random.Random, usual: str) -> str:
    return rng.choice(CSV_RARE) if rng.random() < 0.004 else usual


def _csv_float(rng: random.Random) -> str:
    v = rng.choice([rng.random() * 10 ** rng.randrange(-300, 300), 0.1 + 0.2, 1e308, 5e-324, rng.randrange(-10**6, 10**6)])
    return rng.choice([repr(float(v)), f"{v:.17g}", f"{v:.25e}", f"{v:.40f}", str(v), "007", f"{rng.random():.30f}",
                       "2e-3", "1e5"])


def good_csv(rng: random.Random, iso: bool) -> str:
    import csv
    import io

    ms = NOW + rng.randrange(-10**9, 10**9)
    fields = [
        rng.choice(CSV_WORDS) + str(rng.randrange(9)),
        _iso(rng, ms) if iso else str(ms),
        _rare(rng, rng.choice([str(rng.randrange(-2**31, 2**31)), "", "007"])),
        rng.choice([str(rng.randrange(-2**63, 2**63)), str(2**63 - 1), str(-2**63), "0", ""]),
        rng.choice([str(rng.randrange(-2**15, 2**15)), ""]),
        _rare(rng, rng.choice([_csv_float(rng), ""])),
        _rare(rng, rng.choice(["true", "false", "True", "FALSE", ""])),
        _rare(rng, rng.choice(["", rng.choice(CSV_WORDS), "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(8))])),
    ]
    out = io.StringIO()
    csv.writer(out, quoting=rng.choice([csv.QUOTE_MINIMAL, csv.QUOTE_ALL]), lineterminator="").writerow(fields)
    return out.getvalue()


def poison_csv(rng: random.Random) -> str | None:
    ms = NOW + rng.randrange(10**6)
    rest = "1,2,3,4.5,true,note"
    kinds = [
        lambda: None, lambda: "", lambda: "   \t",
        lambda: f"a,{ms}",  # too few fields
        lambda: f"a,{ms},{rest},extra",  # too many
        lambda: f",{ms},{rest}",  # an empty key
        lambda: f'"",{ms},{rest}',
        lambda: f"a,,{rest}",  # no event time
        lambda: f"a,{ms},nan,2,3,4.5,true,x",
        lambda: f"a,{ms},1,2,3,nan,true,x", lambda: f"a,{ms},1,2,3,inf,true,x", lambda: f"a,{ms},1,2,3,-Infinity,true,x",
        lambda: f"a,{ms},1,2,3,1e400,true,x", lambda: f"a,{ms},1,2,3,1e-400,true,x",
        lambda: f"a,{ms},1,2,3, 4.5,true,x", lambda: f"a,{ms},1,2,3,4.5 ,true,x", lambda: f"a,{ms},1,2,3,1_0.5,true,x",
        lambda: f"a,{ms},1,2,3,0x10,true,x", lambda: f"a,{ms},1,2,3,١٢,true,x",
        lambda: f"a,{ms}, 1,2,3,4.5,true,x", lambda: f"a,{ms},1_000,2,3,4.5,true,x", lambda: f"a,{ms},٥,2,3,4.5,true,x",
        lambda: f"a,{ms},{2**31},2,3,4.5,true,x", lambda: f"a,{ms},1,{2**63},3,4.5,true,x",
        lambda: f"a,{ms},1,{'9' * 45},3,4.5,true,x",
        lambda: f"a,{ms},1,2,{2**15},4.5,true,x", lambda: f"a,{ms},1.0,2,3,4.5,true,x",
        lambda: f"a,{ms},1,2,3,4.5,yes,x", lambda: f"a,{ms},1,2,3,4.5,1,x", lambda: f"a,{ms},1,2,3,4.5,ᴛrue,x",
        lambda: f"a,{ms},1,2,3,4.5, true,x",
        lambda: f"a,+{ms},{rest}", lambda: f"a,{'1' * 21},{rest}", lambda: f"a,{10**17},{rest}", lambda: f"a,-{10**16},{rest}",
        lambda: f"a,1.5e12,{rest}", lambda: f"a,yesterday,{rest}",
        lambda: f"a,2024-13-01T00:00:00,{rest}", lambda: f"a,2024-02-30 00:00:00,{rest}",
        lambda: f"a,2024-12-31 24:00:00,{rest}", lambda: f"a,2016-12-31T23:59:60Z,{rest}",
        lambda: f"a,0000-01-01 00:00:00,{rest}", lambda: f"a,0001-01-01T00:30:00+01:00,{rest}",
        lambda: f"a,9999-12-31T23:30:00-01:00,{rest}", lambda: f"a,2024-12-31T23:59:58.1234567,{rest}",
        lambda: f"a,20241231T235958,{rest}", lambda: f"a,2024-12-31,{rest}", lambda: f"a,2024-12-31T23:59:58+0530,{rest}",
        lambda: f"a,2024-12-31T23:59:58.5+05:30,{rest}", lambda: f"a,2024-12-31t23:59:58,{rest}",
        lambda: f'"a"b,{ms},{rest}', lambda: f'a"b",{ms},{rest}', lambda: f'"a,{ms},{rest}', lambda: f'"a""b",{ms},{rest}',
        lambda: f' "a",{ms},{rest}', lambda: f'"a" ,{ms},{rest}', lambda: f'a,{ms},{rest}"', lambda: f'a,{ms},1,2,3,4.5,true,"x',
        lambda: f"nul\x00,{ms},{rest}", lambda: f"a,{ms},{rest}\r", lambda: f"\ufeffa,{ms},{rest}",
        lambda: f"\ud800,{ms},{rest}",  # a lone surrogate
        lambda: f"{'a' * 5000},{ms},{rest}",
        lambda: f'"line\nbreak",{ms},{rest}',
    ]
    return rng.choice(kinds)()


@pytest.mark.parametrize("seed", range(6))
def test_csv_blocks_read_at_once_equal_the_lines_read_one_by_one(seed: int) -> None:
    parser = LineParser(SCHEMA, format="csv", key_columns=["k"], time_column="ts")
    _random_blocks(parser, random.Random(1000 + seed), good_csv, poison_csv, 0.4)


def test_every_csv_poison_line_alone_in_a_good_block() -> None:
    rng = random.Random(199)
    parser = LineParser(SCHEMA, format="csv", key_columns=["k"], time_column="ts")
    for _ in range(500):
        lines: list = [good_csv(rng, rng.random() < 0.5) for _ in range(FAST_MIN_LINES)]
        lines[rng.randrange(len(lines))] = poison_csv(rng)
        _same(parser, lines)


def test_a_good_csv_block_is_read_at_once() -> None:
    """The forms producers write: epoch ms, ISO with Z, with an offset, naive; quoted or not."""
    parser = LineParser("t timestamp, k string, v double, n bigint, ok boolean", format="csv",
                        key_columns=["k"], time_column="t")
    for t in ("1735689598603", "2024-12-31 23:59:58.603000Z", "2024-12-31T23:59:58+05:30", "2024-12-31T23:59:58",
              "2024-12-31 23:59"):
        assert _same(parser, [f'{t},"m{i}",{i * 0.1},{i},true' for i in range(40)])
        assert _same(parser, [f"{t},m{i},{i}.5,-{i},False" for i in range(40)])
    assert not _same(parser, ["1735689598603,m,1.5,1,true"] * 39 + ["1735689598603,m,nan,1,true"])


def test_lines_python_finds_blank_are_never_read_as_arrow_lines() -> None:
    """Every character Python's ``str.strip`` removes, alone on a line, sends a block of Arrow
    lines to the line-by-line reading (which skips the line), in both formats."""
    blanks = [chr(c) for c in range(0x110000) if chr(c).isspace()]
    for fmt, good_line in (("json", lambda r: good(r, False)), ("csv", lambda r: good_csv(r, False))):
        parser = LineParser(SCHEMA, format=fmt, key_columns=["k"], time_column="ts")
        rng = random.Random(7)
        for blank in blanks:
            lines = [good_line(rng) for _ in range(FAST_MIN_LINES)]
            lines[rng.randrange(len(lines))] = blank * rng.randrange(1, 3)
            assert parser.parse_column(pa.array(lines)) is None
            _same(parser, lines)


def test_a_block_of_arrow_lines_is_read_at_once() -> None:
    rng = random.Random(8)
    for fmt, good_line in (("json", lambda r: good(r, False)), ("csv", lambda r: good_csv(r, False))):
        parser = LineParser(SCHEMA, format=fmt, key_columns=["k"], time_column="ts")
        answered = sum(parser.parse_column(pa.array([good_line(rng) for _ in range(40)])) is not None for _ in range(20))
        assert answered >= 10, fmt
