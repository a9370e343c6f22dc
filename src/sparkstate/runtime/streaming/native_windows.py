"""The native path: built-in window aggregates as Spark SQL ``groupBy(window(...)).agg(...)``.

It gives the rows of the Python path (``engine/windows.py``) with Spark's own operator:

* Spark emits a window in append mode once ``window.end <= watermark`` and drops rows of
  windows already emitted; Flink fires at ``watermark >= end - 1`` and drops elements of windows
  with ``end - 1 <= watermark``. The Python path sets Spark's watermark delay to
  ``out_of_orderness + 1 ms`` so that Spark's watermark *is* Flink's; here the delay is
  ``out_of_orderness`` alone, one millisecond later, which turns Spark's ``end <= W`` into
  Flink's ``end - 1 <= W``. So both paths fire and drop the same windows.
* Windows are aligned to the epoch plus the assigner's offset on both paths.
* ``count`` counts rows, the others skip nulls (Spark's and the built-ins' rules alike).
* A bounded source ends with its end-of-input marker row (event time 2262-04-10, every
  other column null): its watermark closes every window, and its own window never closes.
"""

from __future__ import annotations

from typing import Any

from sparkstate.api.agg import BuiltinAggregates
from sparkstate.runtime.checkpoint.directory import CheckpointDir
from sparkstate.runtime.io.sources import raw_marker_options, spark_source


def native_frame(spark: Any, job: Any, marker: bool, scratch_dir: str | None = None) -> Any:
    """The job's output as a streaming DataFrame computed by Spark SQL alone."""
    from pyspark.sql import functions as F

    options = raw_marker_options(job) if marker else None
    df = spark_source(job.source_spec).raw(spark, scratch_dir, options)
    ts = job.timestamp_column
    types = dict(df.dtypes)
    event_time = "__event_time"
    if types.get(ts, "").startswith("timestamp"):
        df = df.withColumn(event_time, F.col(ts))
    else:
        df = df.withColumn(event_time, F.timestamp_millis(F.col(ts)))
    df = df.withWatermark(event_time, f"{job.watermark.max_out_of_orderness_ms} milliseconds")
    assigner = job.window_assigner
    window = F.window(
        event_time, f"{assigner.size} milliseconds", f"{assigner.slide} milliseconds", f"{assigner.offset} milliseconds"
    )
    aggs: BuiltinAggregates = job.window_function
    exprs = []
    for a in aggs.aggs:
        if a.function == "count":
            exprs.append(F.count(F.lit(1)).alias(a.name))
        else:
            assert a.column is not None, "every aggregate but count reads a column"
            exprs.append(getattr(F, a.function)(F.col(a.column)).alias(a.name))
    out = df.groupBy(window.alias("__window"), *job.key_columns).agg(*exprs)
    out = out.withColumn("window_start", F.col("__window.start")).withColumn("window_end", F.col("__window.end"))
    schema = job.output
    return out.select(*[F.col(n).cast(t).alias(n) for n, t in zip(schema.names, schema.types)])


def build_native_query(
    job: Any,
    spark: Any,
    checkpoint: CheckpointDir,
    marker: bool,
    side_counts: dict[int, dict[str, int]] | None = None,
    warnings: list[str] | None = None,
    refused_counts: dict[int, int] | None = None,
    mailbox: Any = None,
) -> Any:
    """The configured ``DataStreamWriter`` of a native window job."""
    from sparkstate.runtime.streaming.query import write_stream

    out = native_frame(spark, job, marker, scratch_dir=checkpoint.list_source_dir)
    return write_stream(job, out, checkpoint, side_counts, warnings, refused_counts=refused_counts, mailbox=mailbox)
