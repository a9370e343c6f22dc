"""The text parser and the packing step under hostile input: randomised, seeded lines of every
poison kind known to have stopped a job, mixed with good lines. Reading never raises; every bad
line is a dead letter with a reason, every good line an event, and the packed rows are what
Spark can take (their event times fit pandas' nanoseconds)."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from sparkstate.connectors.text import LineParser
from sparkstate.engine.events import Packer, unpack_events

SCHEMA = "k string, ts timestamp, n int, v double"
NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z, the batch's processing time
AHEAD = 3_600_000
GOOD_TS = NOW - 5_000


def good_json(rng: random.Random, i: int) -> tuple[str, dict]:
    ts = GOOD_TS + rng.randrange(-10**6, AHEAD)
    event = {"k": f"k{rng.randrange(5)}", "ts": ts, "n": rng.randrange(-2**31, 2**31), "v": rng.random(), "i": i}
    if rng.random() < 0.3:
        event["ignored"] = {"nested": [1, 2, "x"]}
    return json.dumps(event), {"k": event["k"], "ts": ts, "n": event["n"], "v": event["v"]}


def good_csv(rng: random.Random, i: int) -> tuple[str, dict]:
    ts = GOOD_TS + rng.randrange(-10**6, AHEAD)
    k, n, v = f"k{rng.randrange(5)}", rng.randrange(-1000, 1000), float(rng.randrange(100))
    return f"{k},{ts},{n},{v}", {"k": k, "ts": ts, "n": n, "v": v}


def bad_json(rng: random.Random) -> str:
    """One of the lines that ended a batch (or would move the watermark for good)."""
    depth = rng.randrange(1_000, 200_000)
    kinds = [
        lambda: f'{{"k": "a", "ts": {GOOD_TS}, "junk": {"9" * rng.randrange(4_301, 6_000)}}}',  # ValueError
        lambda: f'{{"k": "a", "ts": {GOOD_TS}, "x": {"[" * depth}{"]" * depth}}}',  # RecursionError
        lambda: "[" * depth,  # deep and broken
        lambda: f'{{"k": "\\ud800", "ts": {GOOD_TS}}}',  # lone surrogate: UnicodeEncodeError
        lambda: f'{{"k": "a", "ts": {GOOD_TS}, "v": 1, {HARMLESS}}}',  # harmless: see HARMLESS
        lambda: f'{{"k": "a", "ts": {GOOD_TS * 1_000_000}}}',  # nanoseconds: OverflowError
        lambda: f'{{"k": "a", "ts": {GOOD_TS * 1000}}}',  # microseconds read as ms: year 57,000
        lambda: '{"k": "a", "ts": "3000-01-01T00:00:00"}',  # after 2262: out of bounds on Spark
        lambda: '{"k": "a", "ts": "1600-01-01T00:00:00Z"}',  # before 1677
        lambda: f'{{"k": "a", "ts": {NOW + AHEAD + rng.randrange(1, 10**12)}}}',  # runs away
        lambda: '{"k": "a", "ts": "2200-01-01T00:00:00Z"}',  # the year 2200
        lambda: f'{{"k": null, "ts": {GOOD_TS}}}',  # null key
        lambda: f'{{"k": "a", "ts": {GOOD_TS}, "n": {2**31}}}',  # int out of range
        lambda: f'{{"k": "a", "ts": {GOOD_TS}, "n": 1e999}}',  # inf for an int
        lambda: rng.choice(["", "   "]) + "not json " + "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(20)),
        lambda: json.dumps([1, 2, 3]),
        lambda: f'{{"k": "a", "ts": {GOOD_TS}, "v": "NaN?"}}',
        lambda: '{"k": "a", "ts": true}',
        lambda: '{"k": "a", "ts": 1.5e300}',
        lambda: f'{{"k": "a", "ts": "{"9" * 30}"}}',
    ]
    return rng.choice(kinds)()


def bad_csv(rng: random.Random) -> str:
    kinds = [
        lambda: f"a,--{rng.randrange(10)},1,1.0",  # passes isdigit() after lstrip('-')
        lambda: "a,\u00b2,1,1.0",  # '²'.isdigit() is True, int('²') fails
        lambda: "a,\u0665,1,1.0",  # an Arabic-Indic digit
        lambda: f"a,{GOOD_TS * 1_000_000},1,1.0",  # nanoseconds
        lambda: f"a,{GOOD_TS * 1000},1,1.0",  # microseconds
        lambda: f"a,{'9' * 5000},1,1.0",  # 5,000 digits
        lambda: f"a,{GOOD_TS},{'9' * 5000},1.0",  # 5,000-digit int
        lambda: "a,3000-01-01T00:00:00,1,1.0",
        lambda: f"a,{NOW + 2 * AHEAD},1,1.0",  # runs away
        lambda: f",{GOOD_TS},1,1.0",  # empty key
        lambda: f"a,{GOOD_TS},1,1.0,extra",  # a field too many
        lambda: f"a,{GOOD_TS},1",  # a field short
        lambda: f"a,{GOOD_TS},x,1.0",
    ]
    return rng.choice(kinds)()


# a lone surrogate in a field the schema ignores is harmless: the field is never stored
HARMLESS = '"s": "\\udfff"'


def run(lines: list[str], fmt: str) -> tuple[list[dict], list[dict]]:
    parser = LineParser(SCHEMA, fmt, key_columns=["k"], time_column="ts")
    packer = Packer(["k"], 16, "ts", max_ahead_ms=AHEAD)
    batch = pa.RecordBatch.from_pylist([{"value": line} for line in lines], schema=pa.schema([("value", pa.string())]))
    now = pa.array([NOW * 1000] * len(lines), pa.timestamp("us", tz="UTC"))
    packed = list(packer.pack_lines(parser, [batch.append_column("__sparkstate_now", now)], part=0))
    rows = [r for b in packed for r in b.to_pylist()]
    for b in packed:  # what Spark does with the packed rows: pandas in nanoseconds
        b.column("ts").cast(pa.timestamp("ns", tz="UTC"))
    events = unpack_events([(r["part"], r["seq"], r["blob"]) for r in rows])
    return sorted(events, key=lambda e: (e["k"], e["ts"], e["n"])), events.dead_letters


@pytest.mark.parametrize("fmt", ["json", "csv"])
@pytest.mark.parametrize("seed", range(6))
def test_no_line_stops_the_job_each_bad_line_is_a_dead_letter_each_good_one_an_event(fmt, seed):
    rng = random.Random(seed)
    lines, good, bad = [], [], []
    for i in range(rng.randrange(20, 60)):
        if rng.random() < 0.5:
            line, event = (good_json if fmt == "json" else good_csv)(rng, i)
            lines.append(line)
            good.append(event)
        else:
            line = bad_json(rng) if fmt == "json" else bad_csv(rng)
            lines.append(line)
            if HARMLESS in line:
                good.append({"k": "a", "ts": GOOD_TS, "n": None, "v": 1.0})
            elif line.strip():
                bad.append(line)
    events, dead = run(lines, fmt)
    assert events == sorted(good, key=lambda e: (e["k"], e["ts"], e["n"]))
    assert sorted(d["raw"] for d in dead) == sorted(bad)
    assert all(isinstance(d["reason"], str) and d["reason"] for d in dead)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (f'{{"k": "a", "ts": 1, "junk": {"9" * 5000}}}', "not valid JSON here: Exceeds the limit (4300 digits)"),
        ("[" * 100_000, "not valid JSON here: nested deeper than 200 levels"),
        ('{"k": "\\ud800", "ts": 1}', "column 'k' (string): not valid Unicode: a lone surrogate at character 1"),
        ('{"k": "a", "ts": 1735689600000000000}', "column 'ts' (timestamp): epoch milliseconds out of range"),
        ('{"k": "a", "ts": "3000-01-01T00:00:00"}', "event time 3000-01-01T00:00:00.000Z is after 2262-04-09"),
        ('{"k": "a", "ts": 1735689600000000}', "column 'ts' (timestamp): epoch milliseconds out of range"),
        (f'{{"k": "a", "ts": {NOW + 2 * AHEAD}}}', "event time 2026-01-01T02:00:00.000Z is 2 h ahead of processing"),
    ],
)
def test_each_poison_line_names_its_reason(line, reason):
    events, dead = run([line, f'{{"k": "b", "ts": {GOOD_TS}}}'], "json")
    assert [e["k"] for e in events] == ["b"]
    assert len(dead) == 1 and dead[0]["raw"] == line and dead[0]["reason"].startswith(reason), dead[0]["reason"]


@pytest.mark.parametrize("text", ["--5", "\u00b2", "-", "5-"])
def test_csv_epoch_millis_are_ascii_digits(text):
    parser = LineParser("k string, ts timestamp", "csv", key_columns=["k"], time_column="ts")
    events, dead = parser.parse([f"a,{text}", "b,5"])
    assert events.column("k").to_pylist() == ["b"]
    reason = f"column 'ts' (timestamp): expected epoch milliseconds or ISO 8601 text, got {text!r}"
    assert dead == [{"raw": f"a,{text}", "reason": reason}]


def test_a_line_longer_than_the_limit_is_a_dead_letter_keeping_its_start():
    parser = LineParser("k string", key_columns=["k"], max_line_length=50)
    long = '{"k": "' + "x" * 2000 + '"}'
    events, dead = parser.parse([long, '{"k": "a"}'])
    assert events.num_rows == 1
    assert dead == [{"raw": long[:1000] + "...", "reason": "line longer than 50 characters (the source's max_line_length)"}]
