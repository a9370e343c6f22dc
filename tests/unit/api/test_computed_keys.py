"""Computed key columns (``key_by(name=function)``): declaration, the harness, the packing step."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from sparkstate import Job, JobDefinitionError, KeyColumnError, KeyedProcessFunction, ListSource, NoopSink
from sparkstate.api import agg
from sparkstate.api.time import WatermarkStrategy
from sparkstate.api.windows import TumblingEventTimeWindows
from sparkstate.engine.events import Packer, key_group_of, unpack_events
from sparkstate.runtime.streaming.planner import explain, native_blockers


class Echo(KeyedProcessFunction):
    def process_element(self, event, ctx):
        yield {"key": ctx.get_current_key(), "v": event["v"]}


def source(rows=None):
    return ListSource([rows or [{"k": "a", "v": 1}]], "k string, v bigint")


def job_of(**computed):
    return Job("ck").source(source()).key_by(**computed).process(Echo(), output_schema="key bigint, v bigint").sink(
        NoopSink())


def test_a_computed_key_is_a_key_column_the_source_does_not_need():
    job = Job("ck").source(source()).key_by("k", tens=lambda e: e["v"] // 10)
    assert job.key_columns == ("k", "tens")
    assert job.source_key_columns == ("k",)
    assert [k.name for k in job.computed_keys] == ["tens"]


@pytest.mark.parametrize("call, message", [
    (lambda j: j.key_by(), "key_by needs one or more column names"),
    (lambda j: j.key_by("v", v=lambda e: 1), "names 'v' both as a column and as a computed key"),
    (lambda j: j.key_by(tens=10), r"key_by\(tens=...\) needs a function of the event"),
    (lambda j: j.key_by(tens=(lambda e: 1, 7)), r"the type is a DDL type such as 'bigint'"),
])
def test_bad_computed_keys_are_refused_when_declared(call, message):
    with pytest.raises(JobDefinitionError, match=message):
        call(Job("ck").source(source()))


def test_a_computed_key_may_not_shadow_a_source_column():
    job = Job("ck").source(source()).key_by(v=lambda e: 1).process(Echo(), output_schema="key bigint, v bigint")
    with pytest.raises(JobDefinitionError, match="the computed key 'v' would replace the source's column"):
        job.sink(NoopSink()).validate()


def test_the_harness_keys_by_the_function_and_makes_failures_dead_letters():
    def tens(event):
        if event["v"] == 99:
            return {"not": "a scalar"}
        return event["v"] // 10

    h = job_of(tens=tens).harness()
    rows = h.process_batch([{"k": "a", "v": 1}, {"k": "b", "v": 12}, {"k": "c", "v": None}, {"k": "d", "v": 99},
                            {"k": "e", "v": 15}])
    assert sorted((r["key"], r["v"]) for r in rows) == [(0, 1), (1, 12), (1, 15)]
    reasons = [d["reason"] for d in h.side_outputs["dead_letters"]]
    assert reasons == [
        "the computed key 'tens' raised TypeError: unsupported operand type(s) for //: 'NoneType' and 'int'",
        "the computed key 'tens' returned dict {'not': 'a scalar'}: a key is an int, float, str or bool",
    ]


def test_a_null_computed_key_is_a_dead_letter_like_a_null_key_column():
    h = job_of(tens=lambda e: None if e["v"] < 0 else e["v"] // 10).harness()
    assert h.process_batch([{"k": "a", "v": -5}]) == []
    assert "null" in h.side_outputs["dead_letters"][0]["reason"]


def test_the_packing_step_puts_each_event_in_its_computed_keys_group():
    """Spark's packing step and the harness agree on the key group of a computed key (a
    savepoint of either restores on the other)."""
    job = Job("ck").source(source()).key_by("k", tens=lambda e: e["v"] // 10)
    packer = Packer(job.key_columns, 128, None, computed_keys=job.computed_keys)
    batch = pa.RecordBatch.from_pylist([{"k": f"k{i % 7}", "v": i} for i in range(200)],
                                       schema=pa.schema([("k", pa.string()), ("v", pa.int64())]))
    packed = packer.pack(batch, 0, 0)
    seen = 0
    for kg, blob in zip(packed.column("kg").to_pylist(), packed.column("blob").to_pylist()):
        events = unpack_events([(0, 0, blob)])
        for i in range(len(events)):
            event = events.row(i)
            assert event["tens"] == event["v"] // 10
            assert kg == key_group_of((event["k"], event["tens"]), 128)
            seen += 1
    assert seen == 200


def test_a_typed_computed_key_refuses_values_of_another_type():
    packer = Packer(["day"], 16, None, computed_keys=Job("x").key_by(day=(lambda e: str(e["v"]), "bigint")).computed_keys)
    batch = pa.RecordBatch.from_pylist([{"v": 1}], schema=pa.schema([("v", pa.int64())]))
    with pytest.raises(KeyColumnError, match="the computed key 'day' returned values that are not bigint"):
        packer.pack(batch, 0, 0)


def test_built_in_window_aggregates_need_the_computed_keys_type():
    watermark = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(0)).with_timestamp_column("ts")
    src = ListSource([[{"ts": 0, "v": 1}, {"ts": 5, "v": 12}, {"ts": 1_200, "v": 14}]], "ts bigint, v bigint")

    def windowed(key):
        return (Job("w").source(src, watermark=watermark).key_by(tens=key)
                .window(TumblingEventTimeWindows.of(timedelta(seconds=1))).aggregate(agg.count("n")).sink(NoopSink()))

    with pytest.raises(JobDefinitionError, match=r"need its type: key_by\(tens=\(function, 'bigint'\)\)"):
        windowed(lambda e: e["v"] // 10).validate()
    job = windowed((lambda e: e["v"] // 10, "bigint"))
    job.validate()
    h = job.harness()
    rows = h.process_batch(src.batches[0]) + h.finish()
    assert sorted((r["tens"], r["window_start"], r["n"]) for r in rows) == [(0, 0, 1), (1, 0, 1), (1, 1_000, 1)]
    assert "computed by Python" in " ".join(native_blockers(job))
    assert "tens (computed)" in explain(job)


def test_the_second_input_of_a_connected_job_may_have_computed_keys():
    job = Job("c").source(source()).key_by(g=lambda e: 0).connect(source(), key_by={"g": lambda e: 0})
    assert job.connected.key_columns == ("g",)
    assert [k.name for k in job.connected.computed_keys] == ["g"]
