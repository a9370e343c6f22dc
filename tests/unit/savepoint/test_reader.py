"""Reading a savepoint offline (savepoint/reader.py): one frame per descriptor in the layout of
Flink's State Processor API, timers, one key's state, without Spark. The savepoints are
written record by record with SavepointWriter, so the expected frames follow from the
records written here, not from the reader's code."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pytest

from sparkstate.api.state import HELD_FIELD, TIMERS_FIELD
from sparkstate.engine.events import key_group_of
from sparkstate.errors import SavepointError
from sparkstate.savepoint.files import LocalDirectory, SavepointWriter
from sparkstate.savepoint.reader import read_key, read_savepoint, read_state, read_timers

EVENT, PROC = 0, 1
STATES = {"total": "ValueState[float]", "recent": "ListState[int]", "features": "MapState[str, float]",
          "max": "ReducingState[float]"}


def write(path, records, *, key_columns=("merchant_id",), states=STATES, function="RunningSum", key_groups=16,
          group=None, **meta):
    """A savepoint of ``records`` (``{key: record}``), each key in the engine's key group
    (or the one ``group`` says)."""
    base = {"job": "j", "function": function, "key_columns": list(key_columns), "key_groups": key_groups,
            "state": dict(states), "batch": 3, "watermark_ms": 1_000, "source_offset": {"offset": 10}, **meta}
    writer = SavepointWriter(LocalDirectory(path), base, sorted(states))
    groups: dict[int, list] = {}
    for key, rec in records.items():
        kg = group[key] if group is not None else key_group_of(key, key_groups)
        groups.setdefault(kg, []).append((key, rec))
    for kg in sorted(groups):
        writer.add_group(kg, groups[kg])
    writer.publish()
    return path


@pytest.fixture
def savepoint(tmp_path):
    return write(tmp_path / "sp", {
        "m1": {"total": 5.0, "recent": [3, 1, 2], "features": {"a": 1.0, "b": 2.0}, "max": 4.0,
               TIMERS_FIELD: {(EVENT, 2_000), (PROC, 7_000)}, HELD_FIELD: 1_500},
        "m2": {"total": 7.5},
        "m3": {"recent": [9], TIMERS_FIELD: {(EVENT, 3_000)}},
    })


def rows(frame):
    def order(row):  # numbers by value, anything else by its text, None last
        return [(x is None, x if isinstance(x, (int, float)) else 0, "" if isinstance(x, (int, float)) else repr(x))
                for x in row]

    return sorted(frame.itertuples(index=False, name=None), key=order)


def test_value_state_is_one_row_per_key_holding_it(savepoint):
    frame = read_state(savepoint, "total")
    assert list(frame.columns) == ["merchant_id", "value"]
    assert rows(frame) == [("m1", 5.0), ("m2", 7.5)]
    assert rows(read_state(savepoint, "max")) == [("m1", 4.0)]


def test_list_state_is_one_row_per_element_with_its_index(savepoint):
    frame = read_state(savepoint, "recent")
    assert list(frame.columns) == ["merchant_id", "index", "value"]
    assert rows(frame) == [("m1", 0, 3), ("m1", 1, 1), ("m1", 2, 2), ("m3", 0, 9)]


def test_map_state_is_one_row_per_entry(savepoint):
    frame = read_state(savepoint, "features")
    assert list(frame.columns) == ["merchant_id", "map_key", "value"]
    assert rows(frame) == [("m1", "a", 1.0), ("m1", "b", 2.0)]


def test_timers_are_their_own_frame(savepoint):
    frame = read_timers(savepoint)
    assert list(frame.columns) == ["merchant_id", "domain", "timestamp"]
    assert rows(frame) == [("m1", "event_time", 2_000), ("m1", "processing_time", 7_000), ("m3", "event_time", 3_000)]


def test_limit_gives_the_first_rows(savepoint):
    assert len(read_savepoint(savepoint).state("recent", limit=2)) == 2
    assert len(read_savepoint(savepoint).state("recent", limit=100)) == 4


def test_a_state_no_key_holds_is_an_empty_frame_with_its_columns(tmp_path):
    sp = write(tmp_path / "sp", {"m1": {"total": 1.0}})
    frame = read_state(sp, "features")
    assert frame.empty and list(frame.columns) == ["merchant_id", "map_key", "value"]


def test_unknown_state_is_refused_naming_the_states_there_are(savepoint):
    with pytest.raises(SavepointError, match=r"no state 'balance'.*features \(MapState\[str, float\]\).*total"):
        read_state(savepoint, "balance")


def test_one_key_all_its_state_and_timers(savepoint):
    ks = read_key(savepoint, "m1")
    assert ks.key == "m1" and ks.key_group == key_group_of("m1", 16)
    assert ks.state == {"total": 5.0, "recent": [3, 1, 2], "features": {"a": 1.0, "b": 2.0}, "max": 4.0}
    assert ks.timers == [("event_time", 2_000), ("processing_time", 7_000)]
    assert ks.held == 1_500
    text = str(ks)
    assert 'key "m1"' in text and "ValueState[float]" in text and "[3, 1, 2]" in text
    assert "event time 1970-01-01T00:00:02.000Z (2000)" in text and "processing time" in text
    assert read_key(savepoint, "nobody") is None


def test_a_key_in_another_group_than_its_hash_is_still_found(tmp_path):
    # a source column of another Arrow type (float32, say) hashes to another group than the
    # Python value does: the lookup falls back to every group
    other = (key_group_of("m1", 16) + 1) % 16
    sp = write(tmp_path / "sp", {"m1": {"total": 1.0}}, group={"m1": other})
    assert read_key(sp, "m1").key_group == other


def test_key_given_as_text_matches_json_or_plain_string(tmp_path):
    sp = write(tmp_path / "sp", {"m1": {"total": 1.0}, 42: {"total": 2.0}, "42": {"total": 3.0}})
    reader = read_savepoint(sp)
    assert [k.key for k in reader.find("m1")] == ["m1"]
    assert [k.key for k in reader.find('"m1"')] == ["m1"]
    assert sorted(k.state["total"] for k in reader.find("42")) == [2.0, 3.0]  # the number and the string
    assert [k.key for k in reader.find('"42"')] == ["42"]
    assert reader.find("m9") == []


def test_multi_column_key_splits_into_columns_and_is_found_as_a_json_array(tmp_path):
    sp = write(tmp_path / "sp", {("a", 1): {"total": 1.0}, ("b", 2): {"total": 2.0, TIMERS_FIELD: {(EVENT, 5)}}},
               key_columns=("user", "region"))
    assert rows(read_state(sp, "total")) == [("a", 1, 1.0), ("b", 2, 2.0)]
    assert list(read_timers(sp).columns) == ["user", "region", "domain", "timestamp"]
    reader = read_savepoint(sp)
    assert [k.key for k in reader.find('["b", 2]')] == [("b", 2)]
    assert [k.key for k in reader.find('["b",2]')] == [("b", 2)]
    assert reader.key(("a", 1)).state == {"total": 1.0}


@dataclass
class Account:
    owner: str
    balance: float


def test_dataclass_values_come_back_as_objects(tmp_path):
    sp = write(tmp_path / "sp", {"m1": {"acct": Account("x", 2.5)}}, states={"acct": "ValueState[Account]"})
    (value,) = read_state(sp, "acct")["value"]
    assert value == Account("x", 2.5)


def test_damaged_file_is_refused_when_read(savepoint):
    (path,) = [p for p in (savepoint / "state").iterdir() if p.name == f"kg-{key_group_of('m2', 16):05d}.parquet"]
    path.write_bytes(path.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(SavepointError, match="is damaged: its SHA-256"):
        read_state(savepoint, "total")


def test_describe_says_what_the_savepoint_holds(savepoint):
    described = dict(read_savepoint(savepoint).describe())
    assert described["batch"] == "3" and described["key columns"] == "merchant_id"
    assert described["keys"] == "3" and described["watermark"] == "1970-01-01T00:00:01.000Z"
    assert described["source offset"] == '{"offset": 10}'


# --------------------------------------------------------------------------- window jobs

WINDOW_STATES = {"windows": "MapState[tuple, object]"}


def test_window_panes_are_one_row_per_key_and_window(tmp_path):
    # tumbling windows: one record per window (its start and end), {user key: accumulator}
    sp = write(tmp_path / "sp", {
        (0, 60_000): {"windows": {"m1": (2, 10.0), "m2": (1, 5.0)}, TIMERS_FIELD: {(EVENT, 59_999)}},
        (60_000, 120_000): {"windows": {"m1": (1, 1.0)}, TIMERS_FIELD: {(EVENT, 119_999)}},
    }, function="WindowOperator", states=WINDOW_STATES)
    reader = read_savepoint(sp)
    frame = reader.state("windows")
    assert list(frame.columns) == ["merchant_id", "window_start", "window_end", "accumulator"]
    assert rows(frame) == [("m1", 0, 60_000, (2, 10.0)), ("m1", 60_000, 120_000, (1, 1.0)), ("m2", 0, 60_000, (1, 5.0))]
    timers = reader.timers()
    assert list(timers.columns) == ["merchant_id", "domain", "timestamp", "window_start", "window_end"]
    assert rows(timers) == [(None, "event_time", 59_999, 0, 60_000), (None, "event_time", 119_999, 60_000, 120_000)]
    (m1,) = reader.find("m1")
    assert m1.windows == [(0, 60_000, (2, 10.0)), (60_000, 120_000, (1, 1.0))]
    assert m1.timers == [("event_time", 59_999), ("event_time", 119_999)]
    assert "window [1970-01-01T00:00:00.000Z, 1970-01-01T00:01:00.000Z)" in str(m1)


def test_sessions_are_one_row_per_key_and_session(tmp_path):
    # session windows: one record per key, {(start, end): accumulator}
    sp = write(tmp_path / "sp", {
        "u1": {"windows": {(1_000, 31_000): ["a"], (90_000, 120_000): ["b", "c"]},
               TIMERS_FIELD: {(EVENT, 30_999), (EVENT, 119_999)}},
    }, key_columns=("user",), function="WindowOperator", states=WINDOW_STATES)
    reader = read_savepoint(sp)
    assert rows(reader.state("windows")) == [("u1", 1_000, 31_000, ["a"]), ("u1", 90_000, 120_000, ["b", "c"])]
    assert rows(reader.timers()) == [("u1", "event_time", 30_999, None, None), ("u1", "event_time", 119_999, None, None)]
    (u1,) = reader.find("u1")
    assert u1.windows == [(1_000, 31_000, ["a"]), (90_000, 120_000, ["b", "c"])]
    assert u1.timers == [("event_time", 30_999), ("event_time", 119_999)]


def test_two_int_key_columns_tell_panes_from_sessions_by_their_timers(tmp_path):
    # a user key of two ints looks like a window: the earliest timer (a window's end - 1)
    # says which record key is the window
    sp = write(tmp_path / "sp", {
        (0, 60_000): {"windows": {(7, 8): 1}, TIMERS_FIELD: {(EVENT, 59_999)}},  # a pane: key (7, 8) in [0, 60000)
        (3, 4): {"windows": {(1_000, 31_000): 2}, TIMERS_FIELD: {(EVENT, 30_999)}},  # key (3, 4)'s session
    }, key_columns=("a", "b"), function="WindowOperator", states=WINDOW_STATES)
    assert rows(read_state(sp, "windows")) == [(3, 4, 1_000, 31_000, 2), (7, 8, 0, 60_000, 1)]


def test_frames_are_pandas(savepoint):
    assert isinstance(read_state(savepoint, "total"), pd.DataFrame)


def _window_job(assigner, key_columns=("k",)):
    from sparkstate import Job, ListSource, WatermarkStrategy, agg

    return (Job("w").source(ListSource([], schema="k string, n bigint, n2 bigint, ts timestamp, v double",
                                        time_column="ts"),
                            watermark=WatermarkStrategy.for_bounded_out_of_orderness(0))
            .key_by(*key_columns).window(assigner).aggregate(agg.count(), agg.sum("v")))


@pytest.mark.parametrize("key_columns", [("k",), ("n", "n2")])
def test_the_engines_window_records_read_as_windows(tmp_path, key_columns):
    # the records the window operator keeps (run in the harness), saved and read back
    from sparkstate import EventTimeSessionWindows, TumblingEventTimeWindows

    events = [{"k": "a", "n": 1, "n2": 2, "ts": 1_000, "v": 1.0}, {"k": "a", "n": 1, "n2": 2, "ts": 2_000, "v": 2.0},
              {"k": "b", "n": 3, "n2": 4, "ts": 61_000, "v": 5.0}]
    key = (lambda e: e["k"]) if len(key_columns) == 1 else (lambda e: (e["n"], e["n2"]))
    for assigner, expected in [
        (TumblingEventTimeWindows.of(60_000), {(key(events[0]), 0, 60_000, 2), (key(events[2]), 60_000, 120_000, 1)}),
        (EventTimeSessionWindows.with_gap(10_000),
         {(key(events[0]), 1_000, 12_000, 2), (key(events[2]), 61_000, 71_000, 1)}),
    ]:
        job = _window_job(assigner, key_columns)
        h = job.harness()
        for ev in events:
            h.process_element({c: ev[c] for c in (*key_columns, "ts", "v")})
        sp = tmp_path / f"{type(assigner).__name__}-{len(key_columns)}"
        write(sp, dict(h.records), key_columns=key_columns, function="WindowOperator", states=WINDOW_STATES,
              group={k: 0 for k in h.records})
        frame = read_state(sp, "windows")
        got = set()
        for row in frame.itertuples(index=False, name=None):
            *k, start, end, acc = row
            got.add((k[0] if len(k) == 1 else tuple(k), start, end, acc[0]))
        assert got == expected, assigner
