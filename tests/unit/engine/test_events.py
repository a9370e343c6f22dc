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

    import sparkstate.runtime

    source = Path(sparkstate.runtime.__file__).with_name("worker_path") / "sitecustomize.py"
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
