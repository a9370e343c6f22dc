"""Bad input on Spark: each ends in an error that names the problem; nothing is committed."""

from __future__ import annotations

import pytest
from spark_helpers import FAST, write_json_files

from sparkstate import (
    CheckpointMismatchError,
    DataFrameSource,
    Job,
    JobDefinitionError,
    JobFailedError,
    KeyColumnError,
    KeyedProcessFunction,
    ListSource,
    MemorySink,
    ValueStateDescriptor,
)
from sparkstate.runtime.checkpoint.directory import CheckpointDir


class Typed(KeyedProcessFunction):
    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", float, default=0.0))

    def process_element(self, e, ctx):
        self.total.update(e["v"])  # v is a string in the bad batch
        yield {"k": ctx.get_current_key(), "total": self.total.value()}


def job_of(fn, batches, schema="k string, v string", out="k string, total double"):
    return (
        Job("bad").source(ListSource(batches, schema)).key_by("k").process(fn, output_schema=out)
        .sink(MemorySink()).with_settings(**FAST)
    )


def test_wrong_state_type_names_state_key_and_value(spark, checkpoint):
    with pytest.raises(
        JobFailedError, match="StateTypeError: ValueState\\[float\\] 'total' for key 'a': the value must be float, got str 'x'"
    ):
        job_of(Typed(), [[{"k": "a", "v": "x"}]]).run(checkpoint_dir=checkpoint, spark=spark)
    assert CheckpointDir.open(checkpoint).last_committed_offset() == (None, None)


class WrongOutput(KeyedProcessFunction):
    def process_element(self, e, ctx):
        yield {"k": ctx.get_current_key(), "total": "not a number"}


def test_output_that_does_not_fit_the_schema_names_the_column(spark, checkpoint):
    with pytest.raises(
        JobFailedError, match="OutputSchemaError: output column 'total' is double but row 0 has str 'not a number'"
    ):
        job_of(WrongOutput(), [[{"k": "a", "v": "1"}]]).run(checkpoint_dir=checkpoint, spark=spark)


def test_checkpoint_of_another_job_is_refused_before_spark_runs(spark, checkpoint):
    job = job_of(Typed(), [[{"k": "a", "v": 1.0}]], schema="k string, v double")
    job.run(checkpoint_dir=checkpoint, spark=spark)
    other = Job("other").source(ListSource([[{"k": "a", "v": 1.0}]], "k string, v double")).key_by("k")
    other = other.process(Typed(), output_schema="k string, total double").sink(MemorySink())
    with pytest.raises(CheckpointMismatchError, match="belongs to job 'bad', not 'other'"):
        other.run(checkpoint_dir=checkpoint, spark=spark)
    with pytest.raises(CheckpointMismatchError, match="the key columns changed"):
        job.key_by("v").run(checkpoint_dir=checkpoint, spark=spark)


def test_missing_checkpoint_directory_is_an_error(spark):
    with pytest.raises(JobDefinitionError, match="a checkpoint directory is required"):
        job_of(Typed(), [[{"k": "a", "v": "1"}]]).run(checkpoint_dir="", spark=spark)


def test_dataframe_source_with_missing_key_column(spark, checkpoint, tmp_path):
    (tmp_path / "in").mkdir()
    src = DataFrameSource(lambda s: s.readStream.schema("key string, v double").json(str(tmp_path / "in")))
    job = Job("df").source(src).key_by("k").process(Typed(), output_schema="k string, total double").sink(MemorySink())
    with pytest.raises(KeyColumnError, match="column 'k' is not in the source's columns \\['key', 'v'\\]"):
        job.run(checkpoint_dir=checkpoint, spark=spark)


class Sum(KeyedProcessFunction):
    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", float, default=0.0))

    def process_element(self, e, ctx):
        self.total.update(self.total.value() + e["v"])
        yield {"k": ctx.get_current_key(), "total": self.total.value(), "ts": ctx.timestamp()}


def test_any_streaming_dataframe_is_packed_and_processed(spark, checkpoint, tmp_path):
    from datetime import timedelta

    from sparkstate import WatermarkStrategy

    folder = tmp_path / "in"
    write_json_files(folder, [
        [{"k": "a", "v": 1.0, "ts": "2025-01-01T00:00:01Z"}, {"k": "b", "v": 2.0, "ts": "2025-01-01T00:00:02Z"}],
        [{"k": "a", "v": 3.0, "ts": "2025-01-01T00:00:03Z"}],
    ])
    src = DataFrameSource(
        lambda s: s.readStream.schema("k string, v double, ts timestamp").option("maxFilesPerTrigger", 1).json(str(folder))
    )
    sink = MemorySink()
    job = (
        Job("files")
        .source(src, watermark=WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=1)).with_timestamp_column("ts"))
        .key_by("k").process(Sum(), output_schema="k string, total double, ts timestamp").sink(sink)
        .with_settings(state_backend="hashmap", **FAST)
    )
    # a file source never ends: stop once both files were read
    result = job.run(checkpoint_dir=checkpoint, spark=spark, timeout=120, until=lambda r: r.events >= 3)
    assert sorted((r["k"], r["total"], r["ts"]) for r in sink.rows()) == [
        ("a", 1.0, 1735689601000), ("a", 4.0, 1735689603000), ("b", 2.0, 1735689602000)
    ]
    assert result.events == 3


def test_console_sink_prints_in_this_process(spark, checkpoint, capsys):
    from sparkstate import ConsoleSink

    job = job_of(Sum(), [[{"k": "a", "v": 1.0}, {"k": "a", "v": 2.0}]], schema="k string, v double",
                 out="k string, total double, ts timestamp").sink(ConsoleSink(rows=1))
    job.run(checkpoint_dir=checkpoint, spark=spark)
    out = " ".join(capsys.readouterr().out.split())
    assert "batch 0: 2 rows (first 1)" in out and "1.0" in out and "0 rows" not in out
