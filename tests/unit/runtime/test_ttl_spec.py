"""A job with TTL'd state runs Spark in processing-time mode (Spark then gives each batch the
timestamp it records in its offset log, so a replayed batch decides every expiry the same);
an event-time TTL needs a watermark."""

from __future__ import annotations

import copy

import pytest

from sparkstate import (
    Job,
    JobDefinitionError,
    KeyedProcessFunction,
    ListSource,
    MemorySink,
    StateTtlConfig,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from sparkstate.engine.operator import KeyedOperator
from sparkstate.runtime.streaming.query import operator_spec


class Seen(KeyedProcessFunction):
    def __init__(self, ttl=None):
        self.ttl = ttl

    def open(self, ctx):
        desc = ValueStateDescriptor("seen", bool)
        self.seen = ctx.get_state(desc.enable_time_to_live(self.ttl) if self.ttl else desc)

    def process_element(self, e, ctx):
        yield (e["k"],)


def spec_of(fn, watermark=None):
    job = (Job("j").source(ListSource([[{"k": "a", "ts": 1}]], "k string, ts bigint", "ts"), watermark=watermark)
           .key_by("k").process(fn, output_schema="k string").sink(MemorySink()))
    descriptors = KeyedOperator(copy.deepcopy(fn), job.key_columns).open()
    return operator_spec(job, fn, None, descriptors)


def test_ttl_state_puts_spark_in_processing_time_mode():
    assert spec_of(Seen()).time_mode == "None"  # no timers, no watermark, no TTL: no clock needed
    spec = spec_of(Seen(StateTtlConfig.new_builder(1000).build()))
    assert spec.state_ttl and spec.needs_clock and spec.time_mode == "ProcessingTime"


def test_event_time_ttl_without_a_watermark_is_refused():
    ttl = StateTtlConfig.new_builder(1000).use_event_time().build()
    with pytest.raises(JobDefinitionError, match=r"state 'seen' .*event-time TTL.*the job has none.*watermark="):
        spec_of(Seen(ttl))
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(0).with_timestamp_column("ts")
    assert spec_of(Seen(ttl), strategy).needs_clock
