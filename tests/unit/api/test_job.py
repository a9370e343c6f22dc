"""Building jobs: what is checked before Spark starts."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from sparkstate import (
    CheckpointConfig,
    Job,
    JobDefinitionError,
    KeyColumnError,
    ListSource,
    MemorySink,
    Schema,
    UpiPayments,
    WatermarkStrategy,
)
from sparkstate.jobs.running_sum import RunningSum


def base():
    return Job("j").source(UpiPayments(events=10)).key_by("merchant_id").process(
        RunningSum(), output_schema="merchant_id string, count bigint, total double"
    ).sink(MemorySink())


def test_a_complete_job_validates_and_is_immutable():
    job = base()
    job.validate()
    assert job.with_settings(key_groups=64).settings.key_groups == 64
    assert job.settings.key_groups == 128


def test_missing_pieces_are_named():
    with pytest.raises(JobDefinitionError, match=r"missing a key \(.key_by\(...\)\), a function"):
        Job("j").source(UpiPayments(events=1)).sink(MemorySink()).validate()


def test_unknown_key_column_is_named_with_the_columns_there_are():
    with pytest.raises(KeyColumnError, match="key column 'merchant' is not in the source's columns"):
        base().key_by("merchant").validate()


def test_timestamp_column_is_checked():
    src = ListSource([[{"k": "a", "v": 1}]], "k string, v string")
    job = Job("j").source(src, watermark=WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("v"))
    job = job.key_by("k").process(RunningSum(), output_schema="k string").sink(MemorySink())
    with pytest.raises(JobDefinitionError, match="timestamp column 'v' has type string"):
        job.validate()


def test_watermark_defaults_to_the_source_time_column():
    job = Job("j").source(
        UpiPayments(events=1), watermark=WatermarkStrategy.for_bounded_out_of_orderness(dt.timedelta(seconds=5))
    )
    assert job.timestamp_column == "event_time" and job.watermark.max_out_of_orderness_ms == 5000


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda j: j.with_settings(key_groups=0), "key_groups must be an int from 1 to 32768"),
        (lambda j: j.with_settings(state_backend="memory"), "state_backend must be 'rocksdb' or 'hashmap'"),
        (lambda j: j.with_settings(colour="red"), "unknown job settings"),
        (lambda j: j.process(RunningSum, output_schema="a string"), "a class: add \\(\\)"),
        (lambda j: j.key_by(), "key_by needs one or more column names"),
        (lambda j: j.process(RunningSum(), output_schema="a"), "expected 'name type'"),
    ],
)
def test_bad_settings_are_rejected(change, message):
    with pytest.raises(JobDefinitionError, match=message):
        change(base())


def test_schema_from_ddl_and_dataclass():
    s = Schema.of("a string, `b c` decimal(10,2), m map<string, double>, t timestamp")
    assert s.names == ("a", "b c", "m", "t") and s.types[1] == "decimal(10,2)" and s.timestamp_columns == ("t",)

    @dataclasses.dataclass
    class Out:
        merchant_id: str
        total: float
        at: dt.datetime | None

    assert Schema.of(Out).ddl == "`merchant_id` string, `total` double, `at` timestamp"
    rows = [Out("m", 1.0, None), {"merchant_id": "n", "total": 2.0, "at": None}]
    assert Schema.of(Out).columns(rows) == {"merchant_id": ["m", "n"], "total": [1.0, 2.0], "at": [None, None]}


def test_harness_of_a_job_uses_its_key_watermark_and_schema():
    h = base().harness()
    assert h.process_element({"merchant_id": "m1", "amount": 2.0}) == [{"merchant_id": "m1", "count": 1, "total": 2.0}]


def test_job_builder_and_the_old_setting_names():
    j = base().with_checkpointing(directory="c", interval="2 seconds", retained=5, incremental=False)
    c = j.settings.checkpoint
    assert (c.directory, c.interval_ms, c.retained, c.incremental) == ("c", 2000, 5, False)
    assert j.with_checkpointing(retained=7).settings.checkpoint.directory == "c"  # fields change one at a time
    assert j.with_checkpointing(CheckpointConfig(retained=3)).settings.checkpoint == CheckpointConfig(retained=3)
    # ``with_settings(trigger_interval=..., state_backend=...)`` set the same fields
    old = base().with_settings(trigger_interval="100 milliseconds", state_backend="hashmap", key_groups=64)
    assert old.settings.trigger_interval == "100 milliseconds" and old.settings.state_backend == "hashmap"
    assert old.settings.checkpoint.interval_ms == 100 and old.settings.key_groups == 64
    with pytest.raises(JobDefinitionError, match=r"unknown checkpoint settings \['every'\]"):
        base().with_checkpointing(every=5)
    with pytest.raises(JobDefinitionError, match="state_backend must be 'rocksdb' or 'hashmap'"):
        base().with_settings(state_backend="memory")


def test_run_needs_a_directory_from_somewhere():
    with pytest.raises(JobDefinitionError, match="a checkpoint directory is required"):
        base().run()


def test_every_source_and_sink_spec_offers_its_contract():
    from sparkstate.api.io import SinkSpec, SourceSpec
    from sparkstate.connectors import (
        ClickEvents,
        ConsoleSink,
        DataFrameSource,
        FileSource,
        ForeachBatchSink,
        NoopSink,
        ParquetSink,
        PostgresSink,
        SocketSource,
        SqliteSink,
        TaxiRides,
    )

    sources = [
        UpiPayments(events=1), TaxiRides(events=None), ClickEvents(), ListSource([[{"k": "a"}]], "k string"),
        FileSource("in", "k string"), SocketSource("localhost", 9000, "k string"), DataFrameSource(lambda s: None),
    ]
    for source in sources:
        assert isinstance(source, SourceSpec), source
        assert isinstance(source.describe(), str) and isinstance(source.identity(), dict)
    sinks = [
        MemorySink(), ConsoleSink(), NoopSink(), ParquetSink("out"), ForeachBatchSink(print),
        PostgresSink("postgresql://u@localhost/db"), SqliteSink("out.db"),
    ]
    assert all(isinstance(s, SinkSpec) for s in sinks)
    # what a source does not know, it says so: no columns, no end, no event counts by offset
    df = DataFrameSource(lambda s: None)
    assert (df.schema_ddl, df.bounded, df.end_offset(), df.events_between(0, 5)) == (None, False, None, None)
    assert UpiPayments(events=10, rate=5).identity() == UpiPayments(events=10).identity() != UpiPayments(events=11).identity()


def test_an_unsupported_source_is_refused_naming_the_ones_there_are():
    with pytest.raises(JobDefinitionError, match="unsupported source 42; use a generator"):
        Job("j").source(42)


def test_builtin_window_aggregates_over_a_dataframe_get_their_output_when_the_columns_are_known():
    from sparkstate import TumblingEventTimeWindows, agg
    from sparkstate.connectors import DataFrameSource

    wm = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("ts")
    job = (
        Job("df-windows").source(DataFrameSource(lambda s: None), watermark=wm).key_by("k")
        .window(TumblingEventTimeWindows.of(dt.timedelta(minutes=1))).aggregate(agg.count(), agg.sum("v"))
    )
    assert job.output is None  # only Spark knows a DataFrame's columns
    with pytest.raises(JobDefinitionError, match="the source's columns are not known here; pass output_schema="):
        job.harness()
    known = job.with_output_from(Schema.of("k string, v double, ts timestamp"))
    assert known.output.ddl == (
        "`k` string, `window_start` timestamp, `window_end` timestamp, `count` bigint, `sum_v` double"
    )
    with pytest.raises(KeyColumnError, match="key column 'k' is not in the source's columns"):
        job.with_output_from(Schema.of("key string, v double, ts timestamp"))
