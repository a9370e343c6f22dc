"""Turning a job into a Spark streaming query: the operator's spec, the query, its checkpoint and trigger.

The query of the Python path is::

    packed source (or source -> mapInArrow(pack)) -> [withWatermark(ts)]
        -> groupBy(key group).transformWithStateInPandas(KeyGroupProcessor) -> sink

(``native_windows`` builds the native path's). Spark checkpoints the source offsets, the
watermark and the state store together at every micro-batch, and a batch that fails commits
none of them, so a restart replays it whole. The job's
:class:`~sparkstate.api.checkpointing.CheckpointConfig` gives the query its trigger.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sparkstate.api.functions import KeyedProcessFunction
from sparkstate.api.job import JobDescription as Job
from sparkstate.api.state import StateDescriptor
from sparkstate.engine.events import END_OF_INPUT_MS, EVERY_KEY_GROUP
from sparkstate.errors import JobDefinitionError
from sparkstate.runtime.checkpoint.directory import CheckpointDir


def output_arrow(job: Job) -> Any:
    """The Arrow schema of the job's output (needs a running Spark to parse the DDL)."""
    from pyspark.errors import PySparkException
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    assert job.output is not None, "the output schema is known once the job runs (with_output_from)"
    try:
        struct = StructType.fromDDL(job.output.ddl)
    except PySparkException as exc:
        raise JobDefinitionError(f"job {job.name!r}: cannot read output schema ({job.output.ddl}): {exc}") from None
    # pyspark types fromDDL as any DataType; a schema's DDL always gives a StructType
    return to_arrow_schema(struct, timezone="UTC")  # type: ignore[arg-type]


def watermark_delay_ms(job: Job) -> int:
    """Spark's withWatermark delay: Flink's watermark is max(ts) - out_of_orderness - 1 ms."""
    return (job.watermark.max_out_of_orderness_ms if job.watermark else 0) + 1


def connected_job(job: Job) -> Job | None:
    """The job as its connected (second) input sees it: that input's source, key columns and
    watermark strategy, so that it is packed exactly as a first input would be. A broadcast
    input has no key and no event time (its rows do not move the watermark)."""
    c = job.connected
    if c is None:
        return None
    if c.is_broadcast:
        return replace(job, source_spec=c.source, key_columns=(), watermark=None, connected=None, computed_keys=())
    return replace(job, source_spec=c.source, key_columns=c.key_columns, watermark=c.watermark, connected=None,
                   computed_keys=c.computed_keys)


def second_watermarked(job: Job) -> bool:
    """Whether the job's second input is keyed and has a watermark strategy of its own."""
    c = job.connected
    return c is not None and not c.is_broadcast and c.watermark is not None


def check_idleness(job: Job) -> None:
    """Refuse ``WatermarkStrategy.with_idleness`` on a job whose two inputs each have a
    watermark: Spark computes the job's watermark itself, as the smallest of its inputs'
    (``withWatermark`` on each, its ``min`` policy), and has no way to leave an idle input out.
    With one watermarked input idleness changes nothing, and is accepted."""
    if not second_watermarked(job):
        return
    c = job.connected
    assert c is not None and c.watermark is not None
    idle = [what for what, ws in (("first", job.watermark), ("second", c.watermark))
            if ws is not None and ws.idle_timeout_ms is not None]
    if idle:
        raise JobDefinitionError(
            f"job {job.name!r}: the {' and '.join(idle)} input's watermark strategy has with_idleness(...), which a "
            "Spark run cannot honour: Spark takes the job's watermark as the smallest of its two inputs' and cannot "
            "leave an idle one out (the harness can). Drop with_idleness, or keep the quiet input's watermark moving "
            "(send it events, or give it no watermark strategy so that the first input's alone counts); "
            "see docs/guides/joins.md, 'Idle inputs'"
        )


def end_delay_ms(job: Job) -> int:
    """The largest watermark delay of the job's watermarked inputs: once every input has read
    its end-of-input marker, Spark's watermark (the smallest of theirs) is at least
    ``END_OF_INPUT_MS`` minus this."""
    second = connected_job(job)
    delays = [watermark_delay_ms(job)]
    if second is not None and second_watermarked(job):
        delays.append(watermark_delay_ms(second))
    return max(delays)


def uses_end_marker(job: Job, fn: KeyedProcessFunction) -> bool:
    """Whether the bounded source ends with the end-of-input marker for this job.

    Only a function with timers can see the final watermark, so only its job pays the two
    extra micro-batches; and a stream's last run keeps the plan of its earlier ones.
    """
    assert job.source_spec is not None, "a validated job has a source"
    return job.source_spec.has_end_marker and type(fn).defines_on_timer()


def second_uses_end_marker(job: Job, fn: KeyedProcessFunction) -> bool:
    """Whether the second input ends with the end-of-input marker too: when it is keyed and
    has a watermark of its own, Spark's watermark (the smaller of the two) reaches the end only
    once both inputs have. A broadcast input never holds the watermark back."""
    return uses_end_marker(job, fn) and second_watermarked(job)


def operator_spec(job: Job, fn: KeyedProcessFunction, output_arrow: Any, descriptors: Sequence[StateDescriptor] = ()) -> Any:
    """The Spark side's spec of ``job``; ``descriptors``: the state the function declared in
    its ``open`` (one with a TTL puts Spark in processing-time mode: see ``OperatorSpec.state_ttl``)."""
    from sparkstate.runtime.streaming.processor import OperatorSpec

    marker = uses_end_marker(job, fn)
    event_time = job.watermark is not None or marker or second_watermarked(job)
    for d in descriptors:
        if d.ttl_config is not None and d.ttl_config.event_time and not event_time:
            raise JobDefinitionError(
                f"job {job.name!r}: state {d.name!r} ({d.describe()}) has an event-time TTL, measured against the "
                "watermark, and the job has none, so its entries would never expire. Give the source a watermark "
                "(Job.source(..., watermark=WatermarkStrategy.for_bounded_out_of_orderness(...)"
                ".with_timestamp_column(...))), or use a processing-time TTL"
            )
    return OperatorSpec(
        fn=fn,
        key_columns=job.key_columns,
        timestamp_column=job.timestamp_column,
        output=job.output,  # type: ignore[arg-type]
        output_arrow=output_arrow,
        bucket_size=job.settings.bucket_size,
        event_time=event_time,
        end_watermark=END_OF_INPUT_MS - end_delay_ms(job) if marker else None,
        side_outputs=job.side_output_names,
        timestamp_assigner=job.watermark.timestamp_assigner if job.watermark else None,
        state_ttl=any(d.ttl_config is not None for d in descriptors),
        connected=job.connected,
    )


def checkpointed(writer: Any, job: Job, checkpoint: CheckpointDir) -> Any:
    """``writer`` checkpointing into ``checkpoint`` at the job's checkpoint interval."""
    return writer.option("checkpointLocation", checkpoint.root).trigger(processingTime=job.settings.checkpoint.trigger)


def write_stream(
    job: Job,
    out: Any,
    checkpoint: CheckpointDir,
    side_counts: dict[int, dict[str, int]] | None = None,
    warnings: list[str] | None = None,
    split: bool = False,
    refused_counts: dict[int, int] | None = None,
    mailbox: Any = None,
) -> Any:
    """The configured ``DataStreamWriter`` of the job's output stream ``out``, on both paths:
    its rows counted on the way to the sink (``spark_sinks.count_rows_out``), attached to the
    job's sinks (``split``: ``out`` carries side-output rows) and checkpointed."""
    from sparkstate.runtime.io.sinks import attach_job, count_rows_out

    stream = count_rows_out(out, split).writeStream.queryName(query_name(job.name)).outputMode("append")
    writer = attach_job(job, stream, checkpoint.side_output_dir, side_counts, warnings, split=split,
                        refused_counts=refused_counts, mailbox=mailbox)
    return checkpointed(writer, job, checkpoint)


def build_query(
    job: Job,
    spec: Any,
    spark: Any,
    checkpoint: CheckpointDir,
    side_counts: dict[int, dict[str, int]] | None = None,
    warnings: list[str] | None = None,
    restore: Any = None,
    refused_counts: dict[int, int] | None = None,
    mailbox: Any = None,
) -> Any:
    """The configured ``DataStreamWriter`` of ``job``; with ``restore`` (``restore.py``), its
    first batch also reads the savepoint's state and its source starts at the savepoint's offsets."""
    from sparkstate.runtime.io.sources import spark_source
    from sparkstate.runtime.streaming.processor import GROUP_STATE_SCHEMA, KeyGroupFunction, KeyGroupProcessor

    assert job.source_spec is not None and job.sink_spec is not None, "a validated job has a source and a sink"
    start = restore.savepoint.meta if restore is not None else None
    packed = spark_source(job.source_spec).packed(
        spark, job, spec.end_watermark is not None, checkpoint.list_source_dir, start)
    if restore is not None:
        from sparkstate.runtime.savepoints.restore import restore_rows

        packed = packed.union(restore_rows(spark, restore, watermark_delay_ms(job)))
    if spec.event_time and (job.watermark is not None or spec.end_watermark is not None):
        packed = packed.withWatermark("ts", f"{watermark_delay_ms(job)} milliseconds")
    if job.connected is not None:
        packed = packed.union(connected_rows(job, spec, spark, checkpoint, start))
    # No filter for the end-of-input marker (blob NULL): Spark would push it below the
    # watermark, which would then never see the marker. The processor skips empty blobs.
    # ``ts`` stays in the operator's input: applyInPandasWithState only sees a watermark
    # when its input carries the watermarked column.
    grouped = packed.groupBy("kg")
    if job.settings.state_backend == "rocksdb":
        out = grouped.transformWithStateInPandas(
            KeyGroupProcessor(spec),
            outputStructType=spec.output_ddl,
            outputMode="Append",
            timeMode=spec.time_mode,
        )
    else:  # transformWithState refuses Spark's in-memory store; this operator takes it
        out = grouped.applyInPandasWithState(
            KeyGroupFunction(spec),
            outputStructType=spec.output_ddl,
            stateStructType=GROUP_STATE_SCHEMA,
            outputMode="Append",
            timeoutConf="ProcessingTimeTimeout" if spec.needs_clock else "NoTimeout",
        )
    return write_stream(job, out, checkpoint, side_counts, warnings, split=bool(spec.side_outputs),
                        refused_counts=refused_counts, mailbox=mailbox)


def connected_rows(job: Job, spec: Any, spark: Any, checkpoint: CheckpointDir, start: dict | None) -> Any:
    """The packed rows of the job's second input, tagged for the operator: ``part`` offset by
    ``SECOND_PART`` (keyed) or ``BROADCAST_PART`` (broadcast), so they can share one
    ``groupBy("kg")`` with the first input's (Spark's stateful operators take one input).

    A keyed input is packed by its own key columns into the same key groups, with its own
    watermark (Spark then takes the smaller of the two watermarks: its default ``min`` policy,
    the harness's and Flink's rule). A broadcast input's rows go to every key group (each row
    packed once, then repeated for key groups ``0 .. key_groups - 1``), with no event time; its
    dead letters stay in key group 0, which alone reports them.
    """
    from pyspark.sql import functions as F

    from sparkstate.runtime.io.sources import spark_source
    from sparkstate.runtime.streaming.processor import BROADCAST_PART, SECOND_PART

    second = connected_job(job)
    assert second is not None and second.source_spec is not None
    c = job.connected
    assert c is not None
    scratch = checkpoint.list_source_dir
    scratch = None if scratch is None else f"{scratch}/connected"
    marker = second_uses_end_marker(job, spec.fn)
    rows = spark_source(second.source_spec).packed(spark, second, marker, scratch, connected_start(start))
    if not c.is_broadcast:
        if second_watermarked(job):
            rows = rows.withWatermark("ts", f"{watermark_delay_ms(second)} milliseconds")
        return rows.withColumn("part", F.col("part") + F.lit(SECOND_PART))
    groups = F.sequence(F.lit(0), F.lit(job.settings.key_groups - 1))
    kg = F.col("kg")
    return rows.select(
        F.explode(F.when(kg == F.lit(EVERY_KEY_GROUP), groups).otherwise(F.array(kg))).alias("kg"),
        (F.col("part") + F.lit(BROADCAST_PART)).alias("part"),
        F.col("seq"),
        F.lit(None).cast("timestamp").alias("ts"),
        F.col("blob"),
    )


def connected_start(start: dict | None) -> dict | None:
    """A restored savepoint's metadata as the second input's source sees it: its position is
    recorded under ``connected`` (``runtime/savepoints/take.py``)."""
    if start is None:
        return None
    second = start.get("connected")
    return second if isinstance(second, dict) else None


def query_name(name: str) -> str:
    return re.sub(r"\W+", "_", f"sparkstate_{name}")
