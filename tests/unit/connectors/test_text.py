"""Text lines without Spark: parsing them into events, the reasons for the lines that are not
events, and how those travel packed to the operator's dead-letter output."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sparkstate import DEAD_LETTERS, JobDefinitionError, KeyedProcessFunction, ValueStateDescriptor
from sparkstate.connectors.text import LineParser
from sparkstate.engine.events import Packer, unpack_events
from sparkstate.engine.operator import KeyedOperator

SCHEMA = "ts timestamp, k string, n bigint, v double, ok boolean"


def parse(lines, fmt="json", schema=SCHEMA, keys=("k",), time_column=None):
    events, dead = LineParser(schema, fmt, keys, time_column).parse(lines)
    return events.to_pylist(), dead


def test_json_lines_become_typed_events_in_line_order():
    events, dead = parse([
        '{"ts": 1735689601000, "k": "a", "n": 1, "v": 2, "ok": true, "extra": [1]}',
        '{"ts": "2025-01-01T00:00:02Z", "k": "b", "n": -3, "v": 2.5}',
        '{"k": "c", "ts": "2025-01-01T01:00:03+01:00", "ok": false}',
    ])
    assert dead == []
    stamps = [int(e["ts"].timestamp() * 1000) for e in events]
    assert stamps == [1735689601000, 1735689602000, 1735689603000]
    assert [(e["k"], e["n"], e["v"], e["ok"]) for e in events] == [
        ("a", 1, 2.0, True), ("b", -3, 2.5, None), ("c", None, None, False)
    ]


@pytest.mark.parametrize("line, reason", [
    ('{"k": "a", "v": 1', "not valid JSON: Expecting ',' delimiter at the end of the line"),
    ("hello", "not valid JSON: Expecting value at character 1"),
    ('["a", 1]', "expected a JSON object, got array"),
    ('{"v": 1.0}', "key column 'k' is missing"),
    ('{"k": null, "v": 1.0}', "key column 'k' is null"),
    ('{"k": 7}', "column 'k' (string): expected a string, got number 7"),
    ('{"k": "a", "v": "abc"}', "column 'v' (double): expected a number, got string \"abc\""),
    ('{"k": "a", "v": true}', "column 'v' (double): expected a number, got boolean true"),
    ('{"k": "a", "n": 1.5}', "column 'n' (bigint): expected an integer, got number 1.5"),
    ('{"k": "a", "n": 9223372036854775808}', "column 'n' (bigint): out of range for bigint, got number 9223372036854775808"),
    ('{"k": "a", "ok": "yes"}', "column 'ok' (boolean): expected true or false, got string \"yes\""),
    (
        '{"k": "a", "ts": "yesterday"}',
        "column 'ts' (timestamp): expected epoch milliseconds or ISO 8601 text, got string \"yesterday\"",
    ),
])
def test_a_json_line_that_is_not_an_event_is_a_dead_letter_with_the_reason(line, reason):
    events, dead = parse(['{"k": "a", "v": 1.0}', line, '{"k": "b", "v": 2.0}'])
    assert [e["k"] for e in events] == ["a", "b"]  # the lines around it go on
    assert dead == [{"raw": line, "reason": reason}]


def test_event_time_column_is_required_when_the_job_has_event_time():
    _, dead = parse(['{"k": "a"}', '{"k": "a", "ts": null}'], time_column="ts")
    assert [d["reason"] for d in dead] == ["event-time column 'ts' is missing", "event-time column 'ts' is null"]
    events, dead = parse(['{"k": "a"}'])  # without event time it is an ordinary nullable column
    assert dead == [] and events[0]["ts"] is None


def test_blank_lines_are_not_records_and_carriage_returns_go():
    events, dead = parse(["", "   ", None, '{"k": "a", "v": 1.0}\r'])
    assert dead == [] and [e["k"] for e in events] == ["a"]


def test_csv_lines_in_schema_order():
    events, dead = parse(
        ["1735689601000,a,1,2.5,true", '2025-01-01T00:00:02Z,"b,c",,,FALSE', "x,a,1,2.5,true", "1,a,1",
         ",,1,1.0,true", "1,a,one,1.0,true"],
        fmt="csv",
    )
    assert [(e["k"], e["n"], e["v"], e["ok"]) for e in events] == [("a", 1, 2.5, True), ("b,c", None, None, False)]
    assert [d["reason"] for d in dead] == [
        "column 'ts' (timestamp): expected epoch milliseconds or ISO 8601 text, got 'x'",
        "expected 5 comma-separated fields (ts, k, n, v, ok), got 3",
        "key column 'k' is empty",
        "column 'n' (bigint): expected an integer, got 'one'",
    ]


def test_other_types_go_through_arrow():
    schema = "k string, d date, amount decimal(10,2), tags array<string>"
    events, dead = parse(
        ['{"k": "a", "d": "2025-01-02", "amount": "12.30", "tags": ["x"]}', '{"k": "a", "d": "2 Jan"}',
         '{"k": "a", "tags": "x"}'],
        schema=schema,
    )
    assert [(str(e["d"]), str(e["amount"]), e["tags"]) for e in events] == [("2025-01-02", "12.30", ["x"])]
    assert [d["reason"] for d in dead] == [
        "column 'd' (date): expected an ISO 8601 date (YYYY-MM-DD), got string \"2 Jan\"",
        "column 'tags' (array<string>): expected a JSON array, got string \"x\"",
    ]


def test_parser_checks_its_arguments():
    with pytest.raises(JobDefinitionError, match="unknown text format 'xml'"):
        LineParser(SCHEMA, "xml")
    with pytest.raises(JobDefinitionError, match="column 'merchant_id' is not in the source's schema"):
        LineParser(SCHEMA, key_columns=["merchant_id"])


class Total(KeyedProcessFunction):
    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", float, default=0.0))

    def process_element(self, event, ctx):
        self.total.update(self.total.value() + event["v"])
        yield ctx.get_current_key(), self.total.value()


def test_dead_letters_travel_packed_beside_the_events_to_the_dead_letter_output():
    parser = LineParser("k string, v double", key_columns=["k"])
    lines = pa.RecordBatch.from_pylist([{"value": v} for v in ['{"k": "a", "v": 1}', "oops", '{"k": "a", "v": 2}']])
    packed = list(Packer(["k"], 4, None).pack_lines(parser, [lines, lines], part=0))
    # per input batch: a row for the events' key group, then one for the dead letters
    rows = [row for batch in packed for row in batch.to_pylist()]
    dead_rows = rows[1::2]
    assert len(rows) == 4 and [(r["kg"], r["seq"], r["ts"]) for r in dead_rows] == [(0, 0, None), (0, 1, None)]
    events = unpack_events([(r["part"], r["seq"], r["blob"]) for r in rows])
    assert [e["v"] for e in events] == [1.0, 2.0, 1.0, 2.0]
    reason = "not valid JSON: Expecting value at character 1"
    assert events.dead_letters == [{"raw": "oops", "reason": reason}] * 2

    op = KeyedOperator(Total(), ["k"])
    op.open()
    records: dict = {}
    op.begin_batch(0, 0, lambda key: records.setdefault(key, {}))
    assert op.run_batch(events) == [("a", 1.0), ("a", 3.0), ("a", 4.0), ("a", 6.0)]
    assert op.take_side() == [(DEAD_LETTERS.name, {"raw": "oops", "reason": reason})] * 2
    only_dead = unpack_events([(r["part"], r["seq"], r["blob"]) for r in dead_rows])
    assert len(only_dead) == 0 and len(only_dead.dead_letters) == 2
