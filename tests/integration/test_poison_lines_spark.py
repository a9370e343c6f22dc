"""Poison input on Spark: a file holding one of every line known to have stopped a job (or to
move the watermark for good), among good lines. The job completes; every good line's effect
is in the sink and every bad line is in the dead letters, with its reason, counted in the
progress figures. A ListSource on the same rules: null keys and event times Spark cannot hold."""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta

from spark_helpers import FAST

from sparkstate import FileSource, Job, KeyedProcessFunction, ListSource, MemorySink, ValueStateDescriptor, WatermarkStrategy

T0 = 1_735_689_600_000  # 2025-01-01


class Sum(KeyedProcessFunction):
    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", float, default=0.0))

    def process_element(self, e, ctx):
        self.total.update(self.total.value() + (e["v"] or 0.0))
        yield {"k": ctx.get_current_key(), "total": self.total.value(), "wm": ctx.timer_service().current_watermark()}


def job_of(source, sink, dead):
    watermark = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(0)).with_timestamp_column("ts")
    return (
        Job("poison").source(source, watermark=watermark).key_by("k")
        .process(Sum(), output_schema="k string, total double, wm bigint")
        .sink(sink).dead_letters(dead).with_settings(**FAST)
    )


def test_a_file_of_poison_lines_and_good_lines_completes_with_every_effect_and_every_dead_letter(spark, checkpoint, tmp_path):
    later = int(time.time() * 1000) + 2 * 3_600_000  # two hours ahead of the batch's processing time
    good = [
        {"k": "a", "ts": T0, "v": 1.0}, {"k": "b", "ts": T0 + 1, "v": 2.0}, {"k": "a", "ts": "2025-01-01T00:00:02Z", "v": 3.0}
    ]
    poison = {
        f'{{"k": "a", "ts": {T0}, "junk": {"9" * 5000}}}': "not valid JSON here: Exceeds the limit (4300 digits)",
        '{"k": "a", "x": ' + "[" * 50_000 + "]" * 50_000 + "}": "not valid JSON here: nested deeper than 200 levels",
        f'{{"k": "\\ud800", "ts": {T0}}}': "column 'k' (string): not valid Unicode: a lone surrogate",
        f'{{"k": "a", "ts": {T0 * 1_000_000}}}': "column 'ts' (timestamp): epoch milliseconds out of range",
        f'{{"k": "a", "ts": {T0 * 1000}}}': "column 'ts' (timestamp): epoch milliseconds out of range",
        '{"k": "a", "ts": "3000-01-01T00:00:00"}': "event time 3000-01-01T00:00:00.000Z is after 2262-04-09",
        '{"k": "a", "ts": "1600-01-01T00:00:00Z"}': "event time 1600-01-01T00:00:00.000Z is before 1677-09-22",
        '{"k": "a", "ts": "2200-01-01T00:00:00Z", "v": 100}': "event time 2200-01-01T00:00:00.000Z is ",
        f'{{"k": "a", "ts": {later}, "v": 100}}': "event time ",
        f'{{"k": null, "ts": {T0}}}': "key column 'k' is null",
        "not json": "not valid JSON: Expecting value at character 1",
    }
    lines = [json.dumps(good[0]), *list(poison)[:6], json.dumps(good[1]), *list(poison)[6:], json.dumps(good[2])]
    # a second file, read in the next micro-batch: the runaway events did not move the
    # watermark, so this event of 2025 is on time
    more = [json.dumps({"k": "b", "ts": T0 + 5, "v": 1.0})]
    folder = tmp_path / "in"
    folder.mkdir()
    for i, (name, content) in enumerate([("poison.json", lines), ("more.json", more)]):
        (tmp_path / name).write_text("\n".join(content) + "\n")
        os.utime(tmp_path / name, (1_700_000_000 + i, 1_700_000_000 + i))
        (tmp_path / name).rename(folder / name)

    sink, dead = MemorySink(), MemorySink()
    source = FileSource(str(folder), "k string, ts timestamp, v double", time_column="ts", max_files_per_trigger=1)
    result = job_of(source, sink, dead).run(
        checkpoint_dir=checkpoint, spark=spark, timeout=180, until=lambda r: r.events >= len(lines) + 1
    )

    rows = [(r["k"], r["total"]) for r in sink.rows()]
    assert sorted(rows[:3]) == [("a", 1.0), ("a", 4.0), ("b", 2.0)]
    assert [(r["k"], r["total"], r["wm"]) for r in sink.rows()[3:]] == [("b", 3.0, T0 + 2000 - 1)]
    got = {d["raw"]: d["reason"] for d in dead.rows()}
    assert sorted(got) == sorted(poison)
    for raw, reason in poison.items():
        assert got[raw].startswith(reason), (raw[:80], got[raw])
    assert "ahead of processing time" in got[f'{{"k": "a", "ts": {later}, "v": 100}}']
    assert "ahead of processing time" in got['{"k": "a", "ts": "2200-01-01T00:00:00Z", "v": 100}']
    assert result.side_outputs == {"dead_letters": len(poison)}


def test_list_source_null_keys_and_times_out_of_range_are_dead_letters(spark, checkpoint):
    schema = "k bigint, ts timestamp, v double"
    batches = [
        [{"k": 5, "ts": T0, "v": 1.0}, {"k": None, "ts": T0, "v": 9.0}, {"k": 5, "ts": 32_503_680_000_000, "v": 9.0}],
        [{"k": 5, "ts": T0 + 1, "v": 2.0}, {"k": 6, "ts": 7_258_118_400_000, "v": 9.0}],
    ]
    sink, dead = MemorySink(), MemorySink()
    job = job_of(ListSource(batches, schema), sink, dead).process(Sum(), output_schema="k bigint, total double, wm bigint")
    result = job.run(checkpoint_dir=checkpoint, spark=spark, timeout=180)
    assert [(r["k"], r["total"]) for r in sink.rows()] == [(5, 1.0), (5, 3.0)]
    null_key = "key column(s) ['k'] null: an event without its key reaches no key's state"
    assert [(d["raw"], d["reason"].split(",")[0]) for d in dead.rows()] == [
        ('{"k": null, "ts": 1735689600000, "v": 9.0}', null_key),
        ('{"k": 5, "ts": 32503680000000, "v": 9.0}', "event time 3000-01-01T00:00:00.000Z is after 2262-04-09"),
        ('{"k": 6, "ts": 7258118400000, "v": 9.0}', dead.rows()[2]["reason"].split(",")[0]),
    ]
    assert "ahead of processing time" in dead.rows()[2]["reason"]
    assert result.side_outputs == {"dead_letters": 3}
