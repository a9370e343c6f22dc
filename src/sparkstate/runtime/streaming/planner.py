"""Choosing how a job runs: the Python operator, or Spark SQL for built-in window aggregates.

A window job whose window function is only built-in aggregates (count, sum, min, max, avg)
over tumbling or sliding event-time windows can run as Spark's own
``groupBy(window(...)).agg(...)``: the JVM does the aggregation, no Python runs per event.
Both paths give the same rows (Flink's window semantics; see ``native_windows``) as long as
no event is late: Spark's aggregation has no allowed lateness, no side outputs, and does not
drop rows behind the watermark (it may still aggregate them, where Flink drops them). So the
native path is possible only when the job asks for no lateness and no side-output sink, and
the source guarantees that every event has an event time and none arrives behind the
watermark (the generators, whose disorder is bounded by the watermark's; a list source is
checked event by event).

``window_path="auto"`` (the default) runs the Python path: it is the faster of the two
(``benchmarks/windows.py``, docs/design/windows.md: 17.7 s against 33.1 s for 2,000,000 events, the
native path being bound by reading unpacked rows into the JVM) and the only one whose state
has key groups, so the only one that takes and restores savepoints. The native path runs
when ``window_path="native"`` asks for it (and refuses a job it cannot run).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

from sparkstate.api.agg import BuiltinAggregates
from sparkstate.api.job import WindowPath
from sparkstate.api.windows import SlidingEventTimeWindows, TumblingEventTimeWindows
from sparkstate.connectors.sources import describe_guarantee
from sparkstate.engine.combine import combine_blockers
from sparkstate.errors import JobDefinitionError
from sparkstate.runtime.checkpoint.directory import CheckpointDir

PYTHON = WindowPath.PYTHON
NATIVE = WindowPath.NATIVE


@dataclass(frozen=True)
class Plan:
    path: WindowPath
    #: why this path: the checks that passed (native) or the first that failed (python)
    reasons: tuple[str, ...] = field(default_factory=tuple)


def native_blockers(job: Any) -> list[str]:
    """Why ``job`` cannot run on the native path (empty: it can)."""
    if job.window_assigner is None:
        return ["it is not a window job"]
    out = []
    if not isinstance(job.window_assigner, (TumblingEventTimeWindows, SlidingEventTimeWindows)):
        out.append(f"its windows are {job.window_assigner.describe()} (native: tumbling or sliding event-time)")
    if not isinstance(job.window_function, BuiltinAggregates):
        out.append(f"its window function is {job.window_kind}() with user code (native: built-in aggregates only)")
    elif job.window_process is not None:
        out.append("a ProcessWindowFunction turns its aggregates into rows (native: built-in aggregates only)")
    if job.computed_keys:
        out.append(f"its key {', '.join(k.name for k in job.computed_keys)} is computed by Python (native: key columns)")
    if job.lateness_ms:
        out.append("it allows lateness (Spark SQL cannot re-fire a window)")
    if job.early_firing:
        out.append("it fires early (Spark SQL emits a window once)")
    routed = [name for name, _ in job.side_sinks]
    if routed:
        out.append(f"it routes side outputs {routed} to sinks (Spark SQL drops late rows)")
    if job.watermark is not None and job.watermark.timestamp_assigner is not None:
        out.append("its event time comes from a Python function (native: a timestamp column)")
    if not job.source_spec.always_has_event_time(job.timestamp_column):
        out.append("its source may have events without event time (they go to the dead-letter output)")
    ahead = job.settings.max_event_time_ahead
    latest = getattr(job.source_spec, "latest_event_time", None)
    top = latest(job.timestamp_column) if latest is not None and ahead is not None else None
    if top is not None and top > time.time() * 1000 + ahead:
        out.append("its source holds an event further ahead of now than max_event_time_ahead (a dead letter)")
    if job.watermark is not None and not job.source_spec.never_behind_watermark(job.watermark):
        # Spark's aggregation does not drop rows behind the watermark: it aggregates them into
        # windows it has not emitted yet, or emits a second row. Flink drops them (late data).
        # Before the epoch, Spark's watermark (which starts at 0) drops windows Flink fires.
        out.append(
            "its source may deliver events behind the watermark or before the epoch "
            "(Spark SQL would still aggregate the first, and drop windows ending at the epoch)"
        )
    return out


#: why ``window_path="auto"`` runs a window job on the Python path
AUTO_REASON = (
    "the Python path is the default: faster than Spark SQL's window aggregation (benchmarks/windows.py) "
    "and the one that takes savepoints"
)


def plan(job: Any) -> Plan:
    """The path ``job`` runs on, honouring ``JobSettings.window_path``: the Python path unless
    ``"native"`` is asked for (and possible)."""
    wanted = job.settings.window_path
    if wanted == PYTHON:
        return Plan(PYTHON, ("window_path='python' was asked for",))
    if wanted == WindowPath.AUTO:
        return Plan(PYTHON, (AUTO_REASON,) if job.window_assigner is not None else ("it is not a window job",))
    blockers = native_blockers(job)
    if blockers:
        raise JobDefinitionError(
            f"job {job.name!r}: window_path='native' is not possible because " + "; ".join(blockers)
        )
    return Plan(NATIVE, ("built-in aggregates over tumbling/sliding event-time windows, no lateness, no side-output sinks",))


#: the order of two inputs inside a micro-batch (``sparkstate.api.connected``), for ``explain``
ORDER_RULE = ("per key group and micro-batch: timers already due, then the connected input's elements, then the "
              "first input's, each in arrival order, then timers that came due (a replayed batch gives the same output)")
BROADCAST_ORDER_RULE = (
    ORDER_RULE + "; every key group applies every broadcast element (its broadcast state is stored once in the "
    "checkpoint), and only key group 0 emits what process_broadcast_element yields and its dead letters")


def _state_lines(job: Any) -> list[str]:
    """The keyed state the job's function declares in ``open``, each with its TTL, and its
    broadcast states (nothing when ``open`` needs more than the job to run)."""
    from sparkstate.api.ttl import describe_cleanup
    from sparkstate.engine.compile import keyed_function
    from sparkstate.engine.operator import KeyedOperator

    try:
        descriptors = KeyedOperator(copy.deepcopy(keyed_function(job)), job.key_columns, connected=job.connected).open()
    except Exception:  # noqa: BLE001 - a function whose open needs its runtime: the plan goes on without
        return []
    lines = []
    for d in descriptors:
        ttl = f"; {d.ttl_config.describe()}; {describe_cleanup(d.ttl_config)}" if d.ttl_config is not None else ""
        lines.append(f"  state:      {d.name}: {d.describe()}{ttl}")
    if job.connected is not None:
        for d in job.connected.broadcast:
            lines.append(f"  broadcast:  {d.name}: {d.describe()} (one copy in the checkpoint; read-only in process_element)")
    return lines


def _idleness(strategy: Any) -> str:
    timeout = strategy.idle_timeout_ms
    return "" if timeout is None else f", idle after {timeout} ms without events"


def explain(job: Any) -> str:
    """A readable plan: what the job reads, how it keys and windows, and which path runs it."""
    p = plan(job)
    lines = [f"job {job.name}"]
    src = job.source_spec
    lines.append(f"  source:     {_describe(src)} ({describe_guarantee(src)})")
    if job.watermark is not None:
        lines.append(
            f"  event time: {job.watermark.describe_timestamps()}, "
            f"watermark = max - {job.watermark.max_out_of_orderness_ms} ms - 1 ms{_idleness(job.watermark)}"
        )
    computed = {k.name for k in job.computed_keys}
    lines.append(f"  key by:     {', '.join(c + (' (computed)' if c in computed else '') for c in job.key_columns)}")
    c = job.connected
    if c is not None:
        lines.append(f"  connected:  {c.describe()}: {_describe(c.source)} ({describe_guarantee(c.source)})")
        if c.watermark is not None and not c.is_broadcast:
            lines.append(
                f"              event time: {c.watermark.describe_timestamps()}, watermark = max - "
                f"{c.watermark.max_out_of_orderness_ms} ms - 1 ms{_idleness(c.watermark)}; the job's is the smaller "
                "of the two inputs'"
            )
        lines.append(f"  order:      {ORDER_RULE if not c.is_broadcast else BROADCAST_ORDER_RULE}")
    if job.window_assigner is not None:
        lines.append(f"  window:     {job.window_assigner.describe()}" + (
            f", allowed lateness {job.lateness_ms} ms" if job.lateness_ms else "") + (
            ", early firing: each micro-batch emits the windows it changed" if job.early_firing else ""))
        if isinstance(job.window_function, BuiltinAggregates):
            what = ", ".join(f"{a.function}({a.column or '*'}) as {a.name}" for a in job.window_function.aggs)
        else:
            fn = job.window_function
            what = getattr(fn, "__name__", None) or type(fn).__name__
        if job.window_process is not None:
            what += f", then {type(job.window_process).__name__}"
        lines.append(f"  function:   {job.window_kind}: {what}")
        if p.path != NATIVE:
            blockers = combine_blockers(job)
            lines.append("  combine:    " + (
                "two-phase: each source batch is combined per key and window before the shuffle, "
                "and the operator merges the accumulators (pre_aggregate)" if not blockers
                else "one phase (every event to the operator) because " + "; ".join(blockers)))
    else:
        what = "interval join function" if job.connected is not None and job.connected.join_bounds else "keyed process function"
        lines.append(f"  function:   {type(job.function).__name__} ({what})")
        lines.extend(_state_lines(job))
    lines.append(f"  output:     {job.output.ddl if job.output else '?'}")
    sink = job.sink_spec
    lines.append(f"  sink:       {_describe(sink)}")
    if job.settings.state_backend == "rocksdb":
        lines.append(f"  rocksdb:    {job.settings.checkpoint.describe_rocksdb()}")
    if p.path == NATIVE:
        lines.append("  side outputs: none on this path (the source delivers no late events and none without event time)")
    elif job.side_output_names:
        from sparkstate.connectors.database import bind_job_sinks, side_sinks

        # a side output without a sink of its own goes beside a database or Kafka main sink
        routed = side_sinks(bind_job_sinks(job))
        lines.append("  side outputs: " + ", ".join(
            f"{n} -> {_describe(routed[n]) if routed.get(n) is not None else f'checkpoint {CheckpointDir.SIDE_OUTPUTS}/{n}'}"
            for n in job.side_output_names
        ))
    if p.path == NATIVE:
        lines.append("  path:       native (Spark SQL window aggregation on the JVM; no Python per event)")
        lines.append(f"              because: {p.reasons[0]}")
    else:
        lines.append(
            "  path:       python (sparkstate keyed operator: key groups on transformWithStateInPandas, "
            f"{job.settings.state_backend} state)"
        )
        if job.window_assigner is not None:
            lines.append(f"              because: {p.reasons[0]}")
            blockers = native_blockers(job)
            lines.append("              native (window_path='native'): " + (
                "not possible because " + "; ".join(blockers) if blockers
                else "possible (Spark SQL window aggregation; no savepoints)"))
    lines.append(f"  savepoints: {savepoint_promise(job, p)}")
    return "\n".join(lines)


def savepoint_promise(job: Any, chosen: Plan) -> str:
    """What a savepoint of the job holds, and what a restore of its source can promise."""
    if chosen.path == NATIVE:
        return ("not on this path (Spark SQL keeps its own window state, without key groups); "
                "run with window_path='python' to take and restore savepoints")
    from sparkstate.runtime.io.sources import restore_promise

    promise = restore_promise(job.source_spec)
    return f"taken and restored (state, timers and watermark by key group); restored, the source {promise}"


def _describe(thing: Any) -> str:
    return repr(thing) if thing is None else thing.describe()
