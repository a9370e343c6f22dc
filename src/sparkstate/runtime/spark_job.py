"""Turning a :class:`~sparkstate.api.job.Job` into a Spark streaming query and running it.

The query is::

    packed source (or source -> mapInArrow(pack)) -> [withWatermark(ts)]
        -> groupBy(key group).transformWithStateInPandas(KeyGroupProcessor) -> sink

Spark checkpoints the source offsets, the watermark and the state store together at every
micro-batch, and a batch that fails commits none of them, so a restart replays it whole.
The job's :class:`~sparkstate.api.checkpointing.CheckpointConfig` is applied to the query
(its trigger, and Spark SQL settings set before it starts), and the driver records each
committed batch's checkpoint figures (``metrics/checkpoints.py``) as its progress arrives.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import signal
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from sparkstate.api.job import Job
from sparkstate.errors import JobDefinitionError, JobFailedError
from sparkstate.metrics.checkpoints import CheckpointRecorder, CheckpointStats, state_bytes
from sparkstate.runtime import checkpoint as ckpt
from sparkstate.runtime import storage
from sparkstate.runtime.operator import KeyedOperator
from sparkstate.runtime.packing import END_OF_INPUT_MS
from sparkstate.runtime.planner import NATIVE, plan


@dataclass
class RunResult:
    """What a run did, for the CLI summary and for tests."""

    job: str
    checkpoint_dir: str
    completed: bool = False
    already_complete: bool = False
    batches: int = 0
    #: events read (the end-of-input marker not counted)
    events: int = 0
    output_rows: int | None = None
    seconds: float = 0.0
    first_batch_seconds: float = 0.0
    state_rows: int | None = None
    state_bytes: int | None = None
    #: keys holding state (read from the checkpoint; filled in by the CLI)
    state_keys: int | None = None
    #: peak resident memory of this process and its children (filled in by the CLI)
    peak_memory_bytes: int | None = None
    warnings: list[str] = field(default_factory=list)
    progress: list[dict] = field(default_factory=list)
    #: side-output rows written in this run, per batch id and side output (late_data,
    #: dead_letters...); a batch replayed after a failure counts once
    batch_side_outputs: dict[int, dict[str, int]] = field(default_factory=dict)
    #: "python" or "native" (see ``sparkstate explain``)
    plan: str = "python"
    #: the figures of each checkpoint (committed micro-batch) of this run, in order
    checkpoints: list[CheckpointStats] = field(default_factory=list)

    @property
    def side_outputs(self) -> dict[str, int]:
        """Side-output rows written in this run, by side output."""
        totals: dict[str, int] = {}
        for counts in self.batch_side_outputs.values():
            for name, n in counts.items():
                totals[name] = totals.get(name, 0) + n
        return totals

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    @property
    def steady_events_per_second(self) -> float | None:
        """Throughput after the first micro-batch (which pays Spark's and Python's start-up)."""
        data = [p for p in self.progress if p.get("events")]
        if len(data) < 2:
            return None
        rows = sum(p["events"] for p in data[1:])
        ms = sum(p["durationMs"].get("triggerExecution", 0) for p in data[1:])
        return rows * 1000.0 / ms if ms else None


def _output_arrow(job: Job) -> Any:
    """The Arrow schema of the job's output (needs a running Spark to parse the DDL)."""
    from pyspark.errors import PySparkException
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    try:
        struct = StructType.fromDDL(job.output.ddl)  # type: ignore[union-attr]
    except PySparkException as exc:
        raise JobDefinitionError(f"job {job.name!r}: cannot read output schema ({job.output.ddl}): {exc}") from None  # type: ignore[union-attr]
    return to_arrow_schema(struct, timezone="UTC")


def _watermark_delay_ms(job: Job) -> int:
    """Spark's withWatermark delay: Flink's watermark is max(ts) - out_of_orderness - 1 ms."""
    return (job.watermark.max_out_of_orderness_ms if job.watermark else 0) + 1


def _uses_end_marker(job: Job) -> bool:
    """Whether the bounded source ends with the end-of-input marker for this job.

    Only a function with timers can see the final watermark, so only its job pays the two
    extra micro-batches; and a stream's last run keeps the plan of its earlier ones.
    """
    return bool(getattr(job.source_spec, "has_end_marker", False)) and type(job.function).defines_on_timer()


def _operator_spec(job: Job, output_arrow: Any) -> Any:
    from sparkstate.runtime.spark_processor import OperatorSpec

    marker = _uses_end_marker(job)
    return OperatorSpec(
        fn=job.function,  # type: ignore[arg-type]
        key_columns=job.key_columns,
        timestamp_column=job.timestamp_column,
        output=job.output,  # type: ignore[arg-type]
        output_arrow=output_arrow,
        bucket_size=job.settings.bucket_size,
        event_time=job.watermark is not None or marker,
        end_watermark=END_OF_INPUT_MS - _watermark_delay_ms(job) if marker else None,
        side_outputs=job.side_output_names,
        timestamp_assigner=job.watermark.timestamp_assigner if job.watermark else None,
    )


def side_output_dir(checkpoint_dir: str | Path) -> str:
    """Where side outputs without a sink of their own are kept (Parquet, one folder per batch)."""
    return storage.join(str(checkpoint_dir), "side-outputs")


def scratch_dir(checkpoint_dir: str | Path) -> str | None:
    """Where a list source's events are written for Spark's Python workers to read: beside a
    local checkpoint, else a temporary directory (they are written again by every run)."""
    return storage.join(str(checkpoint_dir), "sparkstate-sources") if storage.is_local(str(checkpoint_dir)) else None


def checkpointed(writer: Any, job: Job, checkpoint_dir: str | Path) -> Any:
    """``writer`` checkpointing into ``checkpoint_dir`` at the job's checkpoint interval."""
    return writer.option("checkpointLocation", str(checkpoint_dir)).trigger(processingTime=job.settings.checkpoint.trigger)


def build_query(
    job: Job, spec: Any, spark: Any, checkpoint_dir: str | Path, side_counts: dict[int, dict[str, int]] | None = None
) -> Any:
    """The configured ``DataStreamWriter`` of ``job``."""
    from sparkstate.runtime.spark_processor import GROUP_STATE_SCHEMA, KeyGroupFunction, KeyGroupProcessor
    from sparkstate.runtime.spark_sinks import attach, attach_dispatch
    from sparkstate.runtime.spark_sources import build_packed

    packed = build_packed(spark, job, _uses_end_marker(job), scratch_dir=scratch_dir(checkpoint_dir))
    if spec.event_time:
        packed = packed.withWatermark("ts", f"{_watermark_delay_ms(job)} milliseconds")
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
    stream = out.writeStream.queryName(_query_name(job.name))
    if spec.side_outputs:
        writer = attach_dispatch(job, stream, side_output_dir(checkpoint_dir), side_counts if side_counts is not None else {})
    else:
        writer = attach(job.sink_spec, stream)
    return checkpointed(writer, job, checkpoint_dir)


def _query_name(name: str) -> str:
    return re.sub(r"\W+", "_", f"sparkstate_{name}")


_ERROR_LINE = re.compile(r"sparkstate\.errors\.(\w+): (.+)")
_ANY_ERROR_LINE = re.compile(r"^([\w.]*(?:Error|Exception|Invalid|Interrupt)): (.+)$")


def _clean_failure(exc: BaseException, checkpoint_dir: str, last_batch: int | None) -> JobFailedError:
    """A short message from a Spark failure: sparkstate's own error if there is one, else the
    innermost Python error line, else the first line of Spark's message."""
    text = str(getattr(exc, "desc", None) or exc)
    matches = _ERROR_LINE.findall(text)
    if matches:
        kind, message = matches[-1]
        summary = f"{kind}: {message.strip()}"
    else:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        errors = [
            ln for ln in lines
            if _ANY_ERROR_LINE.match(ln) and not ln.startswith(("pyspark.errors", "py4j", "org.apache", "java."))
        ]
        summary = (errors[-1] if errors else (lines[0] if lines else type(exc).__name__))[:2000]
    committed = "no batch was committed" if last_batch is None else f"batches up to {last_batch} are committed"
    return JobFailedError(
        f"{summary}\n(The failing batch committed nothing; {committed} in {checkpoint_dir}. "
        "Fix the cause and run again to resume.)"
    )


def _progress_dicts(query: Any) -> list[dict]:
    out = []
    for p in query.recentProgress:
        if isinstance(p, dict):
            out.append(p)
        else:
            out.append(json.loads(p.json))
    return out


def _end_reached(entries: list[dict], end: int | None) -> bool:
    """True once a completed micro-batch has read its source to ``end``."""
    if end is None or not entries:
        return False
    from sparkstate.runtime.spark_sources import source_offset

    sources = entries[-1].get("sources") or []
    offset = source_offset(sources[0]) if sources else None
    return offset is not None and offset >= end


def _already_complete(store: storage.Storage, end: int | None) -> bool:
    if end is None:
        return False
    _, offset = ckpt.last_committed_offset(store)
    return isinstance(offset, dict) and int(offset.get("offset", -1)) >= end


def run_job(
    job: Job,
    *,
    checkpoint_dir: str | Path | None,
    spark: Any = None,
    on_progress: Callable[[dict], None] | None = None,
    timeout: float | None = None,
    log_file: str | Path | None = None,
    until: Callable[[RunResult], bool] | None = None,
) -> RunResult:
    """Run ``job`` until its bounded source is done, ``until(result)`` holds, ``timeout``
    passes, or Ctrl-C."""
    from sparkstate.runtime.spark_session import active_session, get_spark, local_cores, state_store_class
    from sparkstate.runtime.spark_sinks import open_database_sinks
    from sparkstate.runtime.spark_sources import batch_events

    if checkpoint_dir is None or str(checkpoint_dir).strip() == "":
        raise JobDefinitionError(
            "a checkpoint directory is required: Spark keeps the source offsets and the state there "
            "(Job.run(checkpoint_dir=...), Job.with_checkpointing(directory=...), or --checkpoint on the command line)"
        )
    job.validate()
    checkpoint_dir = storage.normalize(checkpoint_dir)
    if not storage.is_local(checkpoint_dir):  # Hadoop's file systems are reached through Spark's JVM
        spark = spark or get_spark(parallelism=job.settings.parallelism, log_file=log_file)
    store = storage.open_storage(checkpoint_dir, spark)
    # declared state, from a copy: the job's function object stays unopened for Spark to ship
    descriptors = KeyedOperator(copy.deepcopy(job.function), job.key_columns).open()  # type: ignore[arg-type]
    result = RunResult(job=job.name, checkpoint_dir=checkpoint_dir)
    chosen = plan(job)
    # an unreachable database or a table that does not fit stops the job here, before Spark starts
    job = open_database_sinks(job, checkpoint_dir, native=chosen.path == NATIVE)

    # resolving the output's Arrow schema needs Spark: it comes once Spark runs
    spec = _operator_spec(job, output_arrow=None)
    spark = spark or active_session()
    if job.settings.parallelism:
        partitions = job.settings.parallelism
    elif spark is not None:
        partitions = int(spark.sparkContext.defaultParallelism)
    else:
        partitions = local_cores(None)  # what the session get_spark starts will have
    settings = {"parallelism": partitions}
    result.plan = chosen.path
    meta = ckpt.job_metadata(job, spec, descriptors, settings)
    # a checkpoint of another job, a finished run and a read-only or full directory are
    # found before Spark starts (10 s and more on a small machine)
    result.warnings = ckpt.check_or_write(store, meta)

    end = job.source_spec.end_offset(_uses_end_marker(job)) if hasattr(job.source_spec, "end_offset") else None
    if _already_complete(store, end):
        result.completed = result.already_complete = True
        return result
    ckpt.ensure_writable(store)

    spark = spark or get_spark(parallelism=partitions, log_file=log_file)
    spec = replace(spec, output_arrow=_output_arrow(job))

    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", state_store_class(job.settings.state_backend))
    for key, value in job.settings.checkpoint.spark_conf().items():
        spark.conf.set(key, value)
    if chosen.path == NATIVE:
        from sparkstate.runtime.native_windows import build_native_query

        writer = build_native_query(job, spark, checkpoint_dir, _uses_end_marker(job))
    else:
        writer = build_query(job, spec, spark, checkpoint_dir, result.batch_side_outputs)

    recorder = CheckpointRecorder(store)
    seen = -1

    def take_progress() -> None:
        nonlocal seen
        for p in _progress_dicts(query):
            if p["batchId"] > seen and _ran(p):
                seen = p["batchId"]
                _account(result, p, batch_events(job.source_spec, p))
                _record_checkpoint(result, recorder, p)
                if on_progress is not None:
                    on_progress(p)

    started = time.monotonic()
    with _ctrl_c_stops() as interrupted:
        query = writer.start()
        try:
            while True:
                take_progress()
                if not query.isActive:
                    exc = query.exception()
                    if exc is not None:
                        problem = ckpt.diagnose_failure(store)
                        if problem is not None:
                            raise problem from None
                        batch, _ = ckpt.last_committed_offset(store)
                        raise _clean_failure(exc, checkpoint_dir, batch) from None
                    result.completed = True
                    break
                if _end_reached(result.progress, end) or (until is not None and until(result)):
                    result.completed = True
                    break
                if timeout is not None and time.monotonic() - started > timeout:
                    break
                if interrupted.is_set():
                    result.warnings.append("interrupted: the run stopped; run again to resume from the checkpoint")
                    break
                time.sleep(0.1)
        finally:
            # the run's time is the input's processing time; stopping the query is not part of it
            result.seconds = time.monotonic() - started
            try:
                query.stop()
            except Exception:
                pass
    take_progress()  # a batch that committed between the last look and the stop
    return result


@contextlib.contextmanager
def _ctrl_c_stops() -> Iterator[threading.Event]:
    """Ctrl-C (SIGINT) while the query runs sets the event, and the run stops the query
    between two looks at its progress; a second Ctrl-C interrupts at once.

    PySpark's own SIGINT handler cancels Spark's jobs through py4j and raises
    KeyboardInterrupt wherever the driver is; inside another py4j call that surfaces as a
    Py4JError ("Gateway must be connected to send cancel cmd") instead, and the run ended
    with a traceback rather than its summary.
    """
    pressed = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield pressed  # signals reach the main thread only
        return

    def handler(signum: int, frame: Any) -> None:
        if pressed.is_set():
            raise KeyboardInterrupt
        pressed.set()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


def _record_checkpoint(result: RunResult, recorder: CheckpointRecorder, p: dict) -> None:
    """Measure and log the checkpoint of a committed batch; the figures go on the result and,
    as ``p["checkpoint"]``, to the progress line."""
    try:
        stats = recorder.record(p)
    except OSError as exc:
        raise ckpt.failed_write(recorder.files.store, exc) from exc
    if stats is not None:
        result.checkpoints.append(stats)
        p["checkpoint"] = asdict(stats)


def _ran(progress: dict) -> bool:
    """Whether a progress report is of a micro-batch that ran. A trigger that found no new
    input reports the *next* batch id without running it; counting it would hide the real
    batch of that id (its events and side outputs) when it comes."""
    return "addBatch" in (progress.get("durationMs") or {})


def _account(result: RunResult, p: dict, events: int) -> None:
    p["events"] = events
    side = result.batch_side_outputs.get(p.get("batchId", -1))
    if side:
        p["sideOutputs"] = side
    result.progress.append(p)
    result.batches += 1
    result.events += events
    if events and result.first_batch_seconds == 0.0:
        result.first_batch_seconds = p.get("durationMs", {}).get("triggerExecution", 0) / 1000.0
    sink_rows = (p.get("sink") or {}).get("numOutputRows")
    if sink_rows is not None and sink_rows >= 0:
        result.output_rows = (result.output_rows or 0) + sink_rows
    ops = p.get("stateOperators") or []
    if ops:
        result.state_rows = ops[0].get("numRowsTotal")
        result.state_bytes = state_bytes(ops[0])

