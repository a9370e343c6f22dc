"""The harness itself: batches, watermark derivation, state serialisation, user errors."""

from __future__ import annotations

import datetime as dt

import pytest

from sparkstate import (
    MIN_WATERMARK,
    Job,
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
    out = h.process_element({"k": "a", "v": 1, "ts": dt.datetime(2025, 1, 1, tzinfo=dt.UTC)})
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
    with pytest.raises(
        ProcessFunctionError, match=r"Boom.process_element failed for key 'a' on event \{.*'v': 2.*\}: ValueError: no twos"
    ):
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
    # a null key is one bad record, not a broken job: a dead letter, as on Spark
    assert h.process_batch([{"k": None, "v": 1}, {"k": "a", "v": 2}]) == h.output
    assert h.keys() == ["a"]
    assert h.side_output("dead_letters") == [
        {"raw": '{"k": null, "v": 1}', "reason": "key column(s) ['k'] null: an event without its key reaches no key's state"}
    ]


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


def test_timestamp_is_none_without_a_timestamp_column_even_after_a_timer():
    class Stamps(KeyedProcessFunction):
        def process_element(self, e, ctx):
            ctx.timer_service().register_processing_time_timer(10)
            yield ("element", ctx.timestamp())

        def on_timer(self, ts, ctx):
            yield ("timer", ctx.timestamp())

    h = KeyedHarness(Stamps(), "k")
    h.process_element({"k": "a"})
    # a: its timer fires first; b: the element, then its own timer (already due) before the batch ends
    assert h.process_batch([{"k": "b"}], processing_time=10) == [("timer", 10), ("element", None), ("timer", 10)]


@pytest.mark.parametrize("returned", [{"k": "a"}, ("a", 1), "row"])
def test_returning_a_single_row_instead_of_yielding_is_an_error(returned):
    class Returns(KeyedProcessFunction):
        def process_element(self, e, ctx):
            return returned

    with pytest.raises(ProcessFunctionError, match="returned a .*; yield each output row, or return a list of rows"):
        KeyedHarness(Returns(), "k").process_element({"k": "a"})


def test_output_is_checked_against_the_schema_as_on_spark():
    class Mixed(KeyedProcessFunction):
        def process_element(self, e, ctx):
            yield {"k": ctx.get_current_key(), "at": e["at"]}

    h = KeyedHarness(Mixed(), "k", output_schema="k string, at timestamp")
    assert h.process_element({"k": "a", "at": 1000}) == [{"k": "a", "at": 1000}]
    assert h.process_element({"k": "a", "at": dt.datetime(1970, 1, 1, 0, 0, 2)}) == [{"k": "a", "at": 2000}]
    with pytest.raises(OutputSchemaError, match="output column 'at' is timestamp but row 1 has"):
        h.process_batch([{"k": "a", "at": 1000}, {"k": "b", "at": "soon"}])


def test_a_job_gives_independent_harnesses():
    from sparkstate import Job, ListSource, MemorySink

    class Count(KeyedProcessFunction):
        def open(self, ctx):
            self.n = ctx.get_state(ValueStateDescriptor("n", int, default=0))

        def process_element(self, e, ctx):
            self.n.update(self.n.value() + 1)
            yield (ctx.get_current_key(), self.n.value())

    job = Job("j").source(ListSource([], "k string")).key_by("k").process(Count(), output_schema="k string, n bigint")
    job = job.sink(MemorySink())
    h1, h2 = job.harness(), job.harness()
    assert h1.process_element({"k": "a"}) == [{"k": "a", "n": 1}]
    assert h2.process_element({"k": "a"}) == [{"k": "a", "n": 1}]
    assert h1.process_element({"k": "a"}) == [{"k": "a", "n": 2}]


def test_state_no_longer_declared_is_dropped_when_its_key_is_touched():
    class V2(KeyedProcessFunction):
        def open(self, ctx):
            self.n = ctx.get_state(ValueStateDescriptor("n", int, default=0))

        def process_element(self, e, ctx):
            self.n.update(self.n.value() + 1)

    h = KeyedHarness(V2(), "k")
    h.records["a"] = {"n": 1, "old_state": [1, 2, 3]}  # as restored from an older version's checkpoint
    h.process_element({"k": "a"})
    assert h.state("a") == {"n": 2}


def test_watermark_strategy_without_timestamp_column_is_refused():
    from sparkstate import JobDefinitionError

    with pytest.raises(JobDefinitionError, match="needs a timestamp column"):
        KeyedHarness(Keep(), "k", watermark_strategy=WatermarkStrategy.for_monotonous_timestamps())


class Seen(KeyedProcessFunction):
    def process_element(self, e, ctx):
        yield e["k"], ctx.timestamp(), ctx.timer_service().current_watermark()


def test_an_event_far_ahead_of_processing_time_is_a_dead_letter_and_leaves_the_watermark_alone():
    from datetime import timedelta

    from sparkstate import ListSource, WatermarkStrategy

    now = 1_767_225_600_000  # 2026-01-01
    job = (
        Job("ahead")
        .source(ListSource([], "k string, ts bigint"),
                watermark=WatermarkStrategy.for_bounded_out_of_orderness(timedelta(0)).with_timestamp_column("ts"))
        .key_by("k").process(Seen(), output_schema="k string, ts bigint, wm bigint")
    )
    assert job.settings.max_event_time_ahead == 3_600_000  # the default: one hour
    h = job.harness(processing_time=now)
    h.process_batch([{"k": "a", "ts": now}, {"k": "b", "ts": 7_258_118_400_000}])  # year 2200
    h.process_batch([{"k": "a", "ts": now + 1}])
    assert [(r["k"], r["wm"]) for r in h.output] == [("a", MIN_WATERMARK), ("a", now - 1)]  # not late
    [dead] = h.side_output("dead_letters")
    assert dead["raw"] == '{"k": "b", "ts": 7258118400000}'
    assert dead["reason"].startswith("event time 2200-01-01T00:00:00.000Z is 63552 days ahead of processing time")

    # the same events with the bound off: the year-2200 event takes the watermark along
    h = job.max_event_time_ahead(None).harness(processing_time=now)
    h.process_batch([{"k": "a", "ts": now}, {"k": "b", "ts": 7_258_118_400_000}])
    h.process_batch([{"k": "a", "ts": now + 1}])
    assert h.output[-1]["wm"] == 7_258_118_400_000 - 1 and not h.side_output("dead_letters")
    # a harness whose clock was never set (it stands at 1970) applies no bound
    h = job.harness()
    h.process_batch([{"k": "a", "ts": now}])
    assert len(h.output) == 1 and not h.side_output("dead_letters")
    # but no event time outside what Spark can hold, as on Spark
    h.process_batch([{"k": "a", "ts": 32_503_680_000_000_000}])
    assert len(h.output) == 1 and "after 2262-04-09" in h.side_output("dead_letters")[0]["reason"]


def test_max_event_time_ahead_takes_durations_and_refuses_nonsense():
    from datetime import timedelta

    from sparkstate import JobDefinitionError
    from sparkstate.api.job import JobSettings

    assert JobSettings(max_event_time_ahead="2 hours").max_event_time_ahead == 7_200_000
    assert JobSettings(max_event_time_ahead=timedelta(minutes=5)).max_event_time_ahead == 300_000
    assert JobSettings(max_event_time_ahead=None).max_event_time_ahead is None
    assert Job("j").with_settings(max_event_time_ahead=10).settings.max_event_time_ahead == 10
    with pytest.raises(JobDefinitionError, match="max_event_time_ahead must not be negative"):
        JobSettings(max_event_time_ahead=-1)
    with pytest.raises(JobDefinitionError, match="max_event_time_ahead must be a duration such as"):
        JobSettings(max_event_time_ahead="soon")
