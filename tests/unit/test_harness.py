"""The harness itself: batches, watermark derivation, state serialisation, user errors."""

from __future__ import annotations

import datetime as dt

import pytest

from sparkstate import (
    KeyColumnError,
    KeyedHarness,
    KeyedProcessFunction,
    ListStateDescriptor,
    OutputSchemaError,
    ProcessFunctionError,
    ValueStateDescriptor,
    WatermarkStrategy,
)


class Keep(KeyedProcessFunction):
    def open(self, ctx):
        self.items = ctx.get_state(ValueStateDescriptor("items", list, default=[]))

    def process_element(self, e, ctx):
        items = self.items.value()
        items.append(e["v"])
        self.items.update(items)
        yield {"k": ctx.get_current_key(), "n": len(items), "ts": ctx.timestamp()}


def test_watermark_is_derived_from_earlier_batches_like_spark():
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(10).with_timestamp_column("ts")
    h = KeyedHarness(Keep(), "k", watermark_strategy=strategy)
    h.process_batch([{"k": "a", "v": 1, "ts": 100}, {"k": "a", "v": 2, "ts": 50}])
    assert h.watermark == 89  # 100 - 10 - 1, after the batch
    h.process_batch([{"k": "a", "v": 3, "ts": 20}])  # a late element does not move it back
    assert h.watermark == 89


def test_datetimes_become_epoch_millis():
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("ts")
    h = KeyedHarness(Keep(), "k", watermark_strategy=strategy)
    out = h.process_element({"k": "a", "v": 1, "ts": dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)})
    assert out[0]["ts"] == 1735689600000


def test_state_is_detached_between_batches_like_a_checkpoint():
    class Leaky(KeyedProcessFunction):
        def open(self, ctx):
            self.buf = ctx.get_state(ValueStateDescriptor("buf", list, default=[]))

        def process_element(self, e, ctx):
            buf = self.buf.value()
            buf.append(e["v"])
            self.buf.update(buf)
            self.kept = buf  # a reference kept across batches

        def snapshot(self):
            return self.kept

    fn = Leaky()
    h = KeyedHarness(fn, "k")
    h.process_element({"k": "a", "v": 1})
    fn.kept.append("outside")
    assert h.state("a") == {"buf": [1]}


def test_output_schema_turns_tuples_into_dicts():
    class Pair(KeyedProcessFunction):
        def process_element(self, e, ctx):
            yield (ctx.get_current_key(), e["v"])

    h = KeyedHarness(Pair(), "k", output_schema="k string, v bigint")
    assert h.process_element({"k": "a", "v": 1}) == [{"k": "a", "v": 1}]
    with pytest.raises(OutputSchemaError, match="has 1 values; the output schema"):
        KeyedHarness(type("One", (KeyedProcessFunction,), {"process_element": lambda s, e, c: [(1,)]})(), "k",
                     output_schema="k string, v bigint").process_element({"k": "a"})


def test_user_exception_names_function_key_and_event():
    class Boom(KeyedProcessFunction):
        def process_element(self, e, ctx):
            if e["v"] == 2:
                raise ValueError("no twos")
            yield e["v"]

    h = KeyedHarness(Boom(), "k")
    with pytest.raises(ProcessFunctionError, match=r"Boom.process_element failed for key 'a' on event \{.*'v': 2.*\}: ValueError: no twos"):
        h.process_batch([{"k": "a", "v": 1}, {"k": "a", "v": 2}])


def test_user_key_error_is_not_mistaken_for_a_missing_key_column():
    class Lookup(KeyedProcessFunction):
        def process_element(self, e, ctx):
            yield e["missing"]

    with pytest.raises(ProcessFunctionError, match="KeyError: 'missing'"):
        KeyedHarness(Lookup(), "k").process_element({"k": "a"})


def test_missing_and_null_key_columns():
    h = KeyedHarness(Keep(), "k")
    with pytest.raises(KeyColumnError, match=r"has no key column \['k'\]"):
        h.process_element({"key": "a", "v": 1})
    with pytest.raises(KeyColumnError, match=r"no value for key column\(s\) \['k'\]"):
        h.process_element({"k": None, "v": 1})


def test_open_and_close_errors_are_wrapped():
    class BadOpen(KeyedProcessFunction):
        def open(self, ctx):
            raise RuntimeError("no config")

    with pytest.raises(ProcessFunctionError, match="BadOpen.open failed: RuntimeError: no config"):
        KeyedHarness(BadOpen(), "k")


def test_descriptors_are_reported():
    class Two(KeyedProcessFunction):
        def open(self, ctx):
            ctx.get_state(ValueStateDescriptor("a", int))
            ctx.get_list_state(ListStateDescriptor("b", str))

    h = KeyedHarness(Two(), "k")
    assert [d.describe() for d in h.descriptors] == ["ValueState[int]", "ListState[str]"]
