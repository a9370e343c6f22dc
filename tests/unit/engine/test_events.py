"""Packing events per key group and unpacking them in arrival order."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from sparkstate.connectors.generator import UpiPayments
from sparkstate.engine.events import END_OF_INPUT_MS, Packer, end_of_input_row, key_group_of, unpack_events


def _rows(packed):
    return list(zip(*[packed.column(i).to_pylist() for i in range(packed.num_columns)]))


def test_round_trip_keeps_order_per_key_and_groups_by_key_group():
    gen = UpiPayments(events=5000, merchants=50)
    batch = gen.generate(0, 5000)
    packer = Packer(["merchant_id"], 16, "event_time")
    packed = packer.pack(batch, part=0, seq=0)
    rows = _rows(packed)
    assert len({r[0] for r in rows}) == len(rows)  # one row per key group
    events = []
    for kg, part, seq, ts, blob in rows:
        group = unpack_events([(part, seq, blob)])
        assert {key_group_of(e["merchant_id"], 16) for e in group} == {kg}
        assert ts is not None and max(e["event_time"] for e in group) == int(ts.timestamp() * 1000)
        events += group
    expected = gen.events_as_dicts()
    assert sorted(map(repr, events)) == sorted(map(repr, expected))
    def by_key(evs):
        return {k: [e for e in evs if e["merchant_id"] == k] for k in {e["merchant_id"] for e in evs}}

    assert by_key(events) == by_key(expected)  # arrival order within each key


def test_arrival_order_across_parts_and_seqs():
    def mk(v):
        return pa.RecordBatch.from_pylist([{"k": "a", "v": v}])

    packer = Packer(["k"], 4, None)
    rows = [(p, s, _rows(packer.pack(mk(v), p, s))[0][4]) for p, s, v in [(1, 0, 3), (0, 1, 2), (0, 0, 1)]]
    assert [e["v"] for e in unpack_events(rows)] == [1, 2, 3]


def test_multi_column_keys_and_int_keys():
    batch = pa.RecordBatch.from_pylist([{"a": "x", "b": i % 3, "v": i} for i in range(30)])
    packed = Packer(["a", "b"], 8, None).pack(batch, 0, 0)
    for kg, part, seq, _, blob in _rows(packed):
        for e in unpack_events([(part, seq, blob)]):
            assert key_group_of((e["a"], e["b"]), 8) == kg


def test_end_of_input_marker_has_no_events():
    row = _rows(end_of_input_row())[0]
    assert row[4] is None and int(row[3].timestamp() * 1000) == END_OF_INPUT_MS
    assert unpack_events([(0, 0, None)]) == []


def test_sparks_python_processes_put_the_installed_pyspark_before_sparks_zip(tmp_path):
    import importlib.util

    import sparkstate.runtime.session

    source = Path(sparkstate.runtime.session.__file__).with_name("worker_path") / "sitecustomize.py"
    spec = importlib.util.spec_from_file_location("worker_sitecustomize", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    prefer_installed_pyspark = module.prefer_installed_pyspark

    site = tmp_path / "site-packages"
    (site / "pyspark" / "python" / "lib").mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    zips = [str(site / "pyspark" / "python" / "lib" / n) for n in ("pyspark.zip", "py4j-0.10.9.9-src.zip")]
    path = ["/cwd", *zips, "/lib/python3.11", str(site)]
    assert prefer_installed_pyspark(path) == ["/cwd", "/lib/python3.11", str(site), *zips]
    # a separate Spark distribution's zip (no installed pyspark around it) stays first
    other = ["/cwd", "/opt/spark/python/lib/pyspark.zip", str(tmp_path / "elsewhere")]
    assert prefer_installed_pyspark(other) == other


def _independent_group(value: int, key_groups: int) -> int:
    """The key group of an int key by the documented rule, computed apart from the packer:
    pandas' hash_array of the int64 value, mod key_groups."""
    import numpy as np
    import pandas as pd

    return int(pd.util.hash_array(np.array([value], dtype=np.int64), categorize=False)[0] % np.uint64(key_groups))


def test_a_null_key_never_moves_other_keys_to_another_key_group():
    expected = {k: _independent_group(k, 128) for k in range(20)}
    for batch_keys in ([5], [5, None], [None, 5, 7], list(range(20)) + [None] * 3):
        schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
        batch = pa.RecordBatch.from_pylist([{"k": k, "v": 1} for k in batch_keys], schema=schema)
        packed = Packer(["k"], 128, None).pack(batch, 0, 0)
        seen = {}
        events = unpack_events([])
        for kg, part, seq, _, blob in _rows(packed):
            events = unpack_events([(part, seq, blob)])
            for e in events:
                seen[e["k"]] = kg
            if len(events.dead_letters):
                assert kg == 0 and [d["reason"] for d in events.dead_letters] == [
                    "key column(s) ['k'] null: an event without its key reaches no key's state"
                ] * batch_keys.count(None)
        assert seen == {k: expected[k] for k in batch_keys if k is not None}, batch_keys
        assert key_group_of(5, 128) == expected[5]


def test_event_times_spark_cannot_hold_are_dead_letters_not_a_failed_batch():
    from sparkstate.api.time import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS

    times = [MIN_EVENT_TIME_MS - 1, MIN_EVENT_TIME_MS, 1000, MAX_EVENT_TIME_MS, MAX_EVENT_TIME_MS + 1, 32503680000000]
    schema = pa.schema([("k", pa.string()), ("ts", pa.timestamp("us", tz="UTC"))])
    batch = pa.RecordBatch.from_pylist([{"k": f"k{i}", "ts": t * 1000} for i, t in enumerate(times)], schema=schema)
    packed = Packer(["k"], 8, "ts").pack(batch, 0, 0)
    packed.column("ts").cast(pa.timestamp("ns", tz="UTC"))  # what Spark does: raised ArrowInvalid out of bounds
    rows = _rows(packed)
    events = unpack_events([(p, s, b) for _, p, s, _, b in rows])
    assert sorted(e["ts"] for e in events) == [MIN_EVENT_TIME_MS, 1000, MAX_EVENT_TIME_MS]
    assert [d["raw"] for d in events.dead_letters] == [
        '{"k": "k0", "ts": -9223286400001}', '{"k": "k4", "ts": 9223200000000}', '{"k": "k5", "ts": 32503680000000}'
    ]
    assert [d["reason"].split(",")[0] for d in events.dead_letters] == [
        "event time 1677-09-21T23:59:59.999Z is before 1677-09-22",
        "event time 2262-04-10T00:00:00.000Z is after 2262-04-09",
        "event time 3000-01-01T00:00:00.000Z is after 2262-04-09",
    ]


def test_event_time_further_ahead_of_the_batch_processing_time_than_the_bound_is_a_dead_letter():
    now, hour = 1_767_225_600_000, 3_600_000
    schema = pa.schema([("k", pa.string()), ("ts", pa.int64())])
    rows = [{"k": "a", "ts": now + hour}, {"k": "a", "ts": now + hour + 1}, {"k": "b", "ts": 0}]
    batch = pa.RecordBatch.from_pylist(rows, schema=schema)
    packer = Packer(["k"], 8, "ts", max_ahead_ms=hour)
    events = unpack_events([(p, s, b) for _, p, s, _, b in _rows(packer.pack(batch, 0, 0, now=now))])
    assert sorted(e["ts"] for e in events) == [0, now + hour]
    assert events.dead_letters == [{
        "raw": '{"k": "a", "ts": 1767229200001}',
        "reason": "event time 2026-01-01T01:00:00.001Z is 1 h 1 ms ahead of processing time 2026-01-01T00:00:00.000Z, "
        "more than max_event_time_ahead (1 h): it would move the watermark past the events still to come "
        "(a wrong clock or unit?); raise max_event_time_ahead if such times are real",
    }]
    # without the batch's processing time (an offset of an older run), or without a bound: no check
    assert len(unpack_events([(p, s, b) for _, p, s, _, b in _rows(packer.pack(batch, 0, 0))])) == 3
    assert len(unpack_events([(p, s, b) for _, p, s, _, b in _rows(Packer(["k"], 8, "ts").pack(batch, 0, 0, now=now))])) == 3


def test_a_window_job_whose_list_source_holds_a_runaway_event_keeps_off_the_native_path():
    from datetime import timedelta

    from sparkstate import Job, ListSource, MemorySink, TumblingEventTimeWindows, WatermarkStrategy, agg
    from sparkstate.runtime.streaming.planner import native_blockers

    def job(ts):
        wm = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(0)).with_timestamp_column("ts")
        return (
            Job("w").source(ListSource([[{"k": "a", "ts": ts}]], "k string, ts timestamp"), watermark=wm).key_by("k")
            .window(TumblingEventTimeWindows.of(timedelta(seconds=1))).aggregate(agg.count()).sink(MemorySink())
        )

    assert native_blockers(job(1000)) == []
    runaway = native_blockers(job(7_258_118_400_000))  # 2200: the native path has no dead-letter output
    assert "further ahead of now than max_event_time_ahead" in " ".join(runaway)
    assert native_blockers(job(7_258_118_400_000).max_event_time_ahead(None)) == []


def test_a_timestamp_assigner_returning_a_time_beyond_int64_gives_a_dead_letter():
    batch = pa.RecordBatch.from_pylist([{"k": "a", "s": str(10**30)}, {"k": "b", "s": "5"}])
    packer = Packer(["k"], 8, None, timestamp_assigner=lambda e: int(e["s"]) * 1000)
    events = unpack_events([(p, s, b) for _, p, s, _, b in _rows(packer.pack(batch, 0, 0))])
    assert [e["k"] for e in events] == ["b"]
    assert [d["reason"].split(",")[0] for d in events.dead_letters] == [
        "event time 9223372036854775807 ms since the epoch is after 2262-04-09"
    ]


def _file_batches(rng, files, rows_per_batch):
    """Spark's file source in miniature: each file's lines (JSON ``{"k", "file", "line"}``), cut
    into splits, the splits packed into partitions largest first (not in the files' order), each
    partition's rows in Arrow batches of at most ``rows_per_batch``, with the file columns."""
    import json

    from sparkstate.engine.events import FILE_COLUMNS

    splits = []
    for path, mtime, n in files:
        lines = [json.dumps({"k": f"k{rng.randrange(4)}", "file": path, "line": i}) for i in range(n)]
        cut = sorted(rng.sample(range(1, n), min(n - 1, rng.randrange(3)))) if n > 1 else []
        for lo, hi in zip([0, *cut], [*cut, n]):
            splits.append((path, mtime, lo * 100, lines[lo:hi]))  # a split's start: its first byte
    splits.sort(key=lambda s: -len(s[3]))  # largest first
    parts: list[list] = [[] for _ in range(rng.randrange(1, 4))]
    for split in splits:
        min(parts, key=lambda p: sum(len(s[3]) for s in p)).append(split)
    out = []
    for part in parts:
        rows = [(line, path, mtime, start) for path, mtime, start, lines in part for line in lines]
        batches = []
        for at in range(0, len(rows), rows_per_batch):
            chunk = rows[at : at + rows_per_batch]
            batches.append(pa.RecordBatch.from_arrays([
                pa.array([r[0] for r in chunk]), pa.array([r[1] for r in chunk]),
                pa.array([r[2] * 1000 for r in chunk], pa.timestamp("us", tz="UTC")), pa.array([r[3] for r in chunk], pa.int64()),
            ], names=["value", *FILE_COLUMNS]))
        out.append(batches)
    return out


def test_a_batchs_files_reach_each_key_by_modification_time_then_path_whatever_the_partitions():
    """The order rule against a model of it: files by modification time, then path; each file's
    lines in order; Spark's partitions (largest split first) and Arrow batches do not change it."""
    import random

    from sparkstate.connectors.text import LineParser

    for seed in range(30):
        rng = random.Random(seed)
        names = rng.sample(["a.json", "b.json", "c.json", "d/e.json", "d.json", "b.json.1", "z"], rng.randrange(1, 6))
        files = [(f"file:///in/{name}", rng.choice([1000, 2000, 3000]), rng.randrange(1, 40)) for name in names]
        packer = Packer(["k"], 4, None)
        parser = LineParser("k string, file string, line int", key_columns=["k"])
        packed = [r for p, batches in enumerate(_file_batches(rng, files, rng.choice([3, 7, 100])))
                  for b in packer.pack_lines(parser, batches, p) for r in _rows(b)]
        model = [(path, i) for path, mtime, n in sorted(files, key=lambda f: (f[1], f[0])) for i in range(n)]
        for kg in {r[0] for r in packed}:
            got = [(e["file"], e["line"]) for e in unpack_events([(p, s, blob) for k, p, s, _, blob in packed if k == kg])]
            assert got == [m for m in model if m in set(got)], seed
        assert sum(len(unpack_events([(p, s, blob)])) for _, p, s, _, blob in packed) == sum(n for *_, n in files)


def test_rows_of_other_sources_keep_their_partitions_order():
    packer = Packer(["k"], 1, None)
    late = packer.pack(pa.RecordBatch.from_pylist([{"k": "a", "v": 1}]), part=1, seq=0)
    early = packer.pack(pa.RecordBatch.from_pylist([{"k": "a", "v": 2}]), part=0, seq=5)
    rows = _rows(late) + _rows(early)
    assert [e["v"] for e in unpack_events([(p, s, blob) for _, p, s, _, blob in rows])] == [2, 1]
