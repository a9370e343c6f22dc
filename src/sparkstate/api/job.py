"""Describing a job: source, key, keyed function or window, sink, and the settings that shape its state.

A :class:`JobDescription` is immutable and only declares: every builder call returns a new
description, checked as far as it can be without running anything. Running it (on Spark) and
harnessing it (in-process) is :class:`sparkstate.Job`'s part, one layer up, so this module
imports neither the engine nor the runtime. A window job's keyed function is compiled from
its window settings when it runs (``sparkstate.engine.compile``), not here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Self

from sparkstate.api.agg import Agg, BuiltinAggregates
from sparkstate.api.checkpointing import CheckpointConfig
from sparkstate.api.connected import LEFT_LATE_DATA_NAME, RIGHT_LATE_DATA_NAME, check_two_inputs
from sparkstate.api.functions import DEAD_LETTERS, LATE_DATA_NAME, KeyedProcessFunction, OutputTag
from sparkstate.api.io import SinkSpec, SourceSpec, check_source_columns
from sparkstate.api.keys import ComputedKey, KeyFunction
from sparkstate.api.schema import Schema
from sparkstate.api.state import AggregateFunction, MapStateDescriptor
from sparkstate.api.time import Duration, TimeDomain, WatermarkStrategy, to_millis
from sparkstate.api.windows import ProcessWindowFunction, WindowAssigner, WindowKind
from sparkstate.errors import JobDefinitionError, KeyColumnError


class WindowPath(StrEnum):
    """How a window job runs (``sparkstate explain`` shows the choice and why)."""

    #: the Python path (the faster one, and the one that takes savepoints)
    AUTO = "auto"
    #: sparkstate's keyed operator on Spark's stateful Python API
    PYTHON = "python"
    #: Spark SQL's own ``groupBy(window(...)).agg(...)`` (built-in aggregates only)
    NATIVE = "native"

#: ``with_settings`` names that are fields of the checkpoint configuration
_CHECKPOINT_ALIASES = {"state_backend": "state_backend", "trigger_interval": "interval"}

#: Flink's default maximum parallelism; also what measured best here (docs/design/performance.md, "Choices measured").
DEFAULT_KEY_GROUPS = 128
DEFAULT_BUCKET_SIZE = 128
#: How far an event's time may run ahead of processing time by default: one hour, the bound
#: Kafka's brokers put on record timestamps in the future (``message.timestamp.after.max.ms``).
#: Far more than clock skew or batching delay between sane producers, it still catches a
#: wrong unit or a wrong year, and caps what one bad event can do to the watermark: at worst
#: the events of the next hour count as late, instead of every event from then on.
DEFAULT_MAX_EVENT_TIME_AHEAD_MS = 3_600_000


@dataclass(frozen=True)
class JobSettings:
    """How a job's state is laid out and run.

    * ``key_groups`` - keys are hashed into this many groups (Flink's max parallelism). It is
      fixed for the life of a checkpoint; it bounds how far state can later be rescaled.
    * ``parallelism`` - Spark shuffle partitions (default: the machine's cores). Also fixed by
      the first run of a checkpoint (Spark keeps it).
    * ``bucket_size`` - keys per state-store entry inside a key group.
    * ``window_path`` - ``"auto"`` (default), ``"python"`` or ``"native"``: see ``sparkstate explain``.
    * ``max_event_time_ahead`` - how far an event's time may run ahead of processing time
      (a timedelta, int ms, text such as ``"1 hour"``, or None for no bound; default one hour).
      An event beyond it is a dead letter with the reason instead of moving the watermark, which
      is checkpointed: one event stamped in the year 2200 would otherwise make every later event
      late, for good. Processing time is the micro-batch's (Spark's batch timestamp, logged with
      its offsets, so a replayed batch decides the same); in the test harness it is the clock the
      test sets, and a harness whose clock was never set applies no bound.
    * ``pre_aggregate`` - window aggregates (``aggregate`` with a ``merge``, built-ins,
      ``reduce``) over event-time tumbling or sliding windows combine each source batch's events
      per key and window before the shuffle, and the keyed operator merges the accumulators:
      Flink's two-phase (local/global) aggregation, which spreads a hot key's work over every
      source partition (``engine/combine.py`` says when it applies). On by default; False
      sends every event to the operator.
    * ``checkpoint`` - a :class:`CheckpointConfig`: directory, interval (the micro-batch
      trigger), retained checkpoints, incremental checkpoints and the state backend.
      ``state_backend`` and ``trigger_interval`` read its fields (and ``Job.with_settings``
      still takes them as names for those fields).
    """

    key_groups: int = DEFAULT_KEY_GROUPS
    parallelism: int | None = None
    bucket_size: int = DEFAULT_BUCKET_SIZE
    #: window jobs: AUTO runs the Python path; NATIVE asks for the Spark SQL path;
    #: PYTHON or NATIVE force one (NATIVE fails when the job cannot run there); a plain
    #: "auto", "python" or "native" is taken too
    window_path: WindowPath = WindowPath.AUTO
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    #: epoch ms an event may run ahead of processing time (None: no bound); a timedelta or a
    #: text such as "1 hour" is taken too
    max_event_time_ahead: int | None = DEFAULT_MAX_EVENT_TIME_AHEAD_MS
    #: window aggregates: combine per key and window before the shuffle where that is correct
    pre_aggregate: bool = True

    @property
    def state_backend(self) -> str:
        """``"rocksdb"`` or ``"hashmap"`` (``checkpoint.state_backend``)."""
        return self.checkpoint.state_backend

    @property
    def trigger_interval(self) -> str:
        """How often a micro-batch, that is a checkpoint, starts (``checkpoint.interval``, as Spark takes it)."""
        return self.checkpoint.trigger

    def __post_init__(self) -> None:
        if not isinstance(self.key_groups, int) or not 1 <= self.key_groups <= 32768:
            raise JobDefinitionError(f"key_groups must be an int from 1 to 32768, got {self.key_groups!r}")
        if self.parallelism is not None and (not isinstance(self.parallelism, int) or self.parallelism < 1):
            raise JobDefinitionError(f"parallelism must be a positive int, got {self.parallelism!r}")
        if not isinstance(self.checkpoint, CheckpointConfig):
            raise JobDefinitionError(f"checkpoint must be a CheckpointConfig, got {self.checkpoint!r}")
        if self.window_path not in tuple(WindowPath):
            raise JobDefinitionError(f"window_path must be 'auto', 'python' or 'native', got {self.window_path!r}")
        object.__setattr__(self, "window_path", WindowPath(self.window_path))  # a plain string is taken too
        if not isinstance(self.pre_aggregate, bool):
            raise JobDefinitionError(f"pre_aggregate must be True or False, got {self.pre_aggregate!r}")
        if not isinstance(self.bucket_size, int) or self.bucket_size < 1:
            raise JobDefinitionError(f"bucket_size must be a positive int, got {self.bucket_size!r}")
        ahead = self.max_event_time_ahead
        if ahead is not None:
            ms = to_millis(ahead, "max_event_time_ahead", text=True)
            if ms < 0:
                raise JobDefinitionError(f"max_event_time_ahead must not be negative, got {ahead!r}")
            object.__setattr__(self, "max_event_time_ahead", ms)


@dataclass(frozen=True)
class ConnectedInput:
    """The second input of a two-input job (``JobDescription.connect`` / ``interval_join``).

    * broadcast (``broadcast`` holds its MapState descriptors): no key; every key group gets
      every element, and it does not hold back the watermark;
    * keyed (``key_columns``): its own key columns into the first input's key space, its own
      watermark strategy (the job's watermark is the smaller of the two, as in Flink; one that
      has seen no event holds it at MIN unless idle, ``WatermarkStrategy.with_idleness``);
    * an interval join: keyed, with ``join_bounds`` ``(lower, upper)`` in ms.
    """

    source: SourceSpec
    watermark: WatermarkStrategy | None = None
    key_columns: tuple[str, ...] = ()
    broadcast: tuple[MapStateDescriptor[Any, Any], ...] = ()
    join_bounds: tuple[int, int] | None = None
    #: an interval join waits for ``.between(...)``
    pending_join: bool = False
    #: whether each bound of an interval join is inclusive (Flink's default; ``lower_bound_exclusive()``)
    join_inclusive: tuple[bool, bool] = (True, True)
    #: its computed key columns (``connect(key_by={name: function})``)
    computed_keys: tuple[ComputedKey, ...] = ()

    @property
    def is_broadcast(self) -> bool:
        return bool(self.broadcast)

    @property
    def timestamp_column(self) -> str | None:
        return self.watermark.timestamp_column if self.watermark else None

    def describe(self) -> str:
        if self.is_broadcast:
            return f"broadcast {', '.join(d.name for d in self.broadcast)} from {type(self.source).__name__}"
        if self.join_bounds is not None:
            lo, hi = self.join_bounds
            left, right = "[" if self.join_inclusive[0] else "(", "]" if self.join_inclusive[1] else ")"
            return (
                f"interval join with {type(self.source).__name__} by {', '.join(self.key_columns)} "
                f"{left}{lo} ms, {hi} ms{right}"
            )
        return f"connected {type(self.source).__name__} by {', '.join(self.key_columns)}"


@dataclass(frozen=True)
class JobDescription:
    """A keyed streaming job, as declared: what it reads, how it keys, what it computes, where
    its output goes. :class:`sparkstate.Job` is this description plus ``run`` and ``harness``
    (its docstring has an example); every builder method returns a new description.
    """

    name: str
    source_spec: SourceSpec | None = None
    watermark: WatermarkStrategy | None = None
    key_columns: tuple[str, ...] = ()
    function: KeyedProcessFunction | None = None
    #: None until known: built-in window aggregates over a source whose columns only Spark
    #: knows get theirs when the job runs (:meth:`with_output_from`)
    output: Schema | None = None
    sink_spec: SinkSpec | None = None
    settings: JobSettings = field(default_factory=JobSettings)
    #: windowing: the assigner, the allowed lateness, and the window function as given
    window_assigner: WindowAssigner | None = None
    lateness_ms: int = 0
    window_kind: WindowKind | None = None
    #: emit each window's current result every micro-batch that changes it (:meth:`early_fire`)
    early_firing: bool = False
    window_function: Any = None
    #: a ProcessWindowFunction that turns each aggregated window into rows (aggregate only)
    window_process: Any = None
    #: user-declared side outputs and where each side output goes: ``(tag, sink)``
    side_tags: tuple[OutputTag, ...] = ()
    side_sinks: tuple[tuple[str, Any], ...] = ()
    #: a second input: broadcast, keyed, or an interval join's other side
    connected: ConnectedInput | None = None
    #: computed key columns (``key_by(name=function)``), the last of ``key_columns``
    computed_keys: tuple[ComputedKey, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise JobDefinitionError(f"a job needs a name, got {self.name!r}")

    def source(self, source: SourceSpec, *, watermark: WatermarkStrategy | None = None) -> Self:
        """Read from ``source``; ``watermark`` assigns event time and watermarks."""
        if not isinstance(source, SourceSpec):
            raise JobDefinitionError(
                f"unsupported source {source!r}; use a generator (UpiPayments, TaxiRides, ClickEvents), ListSource, "
                "FileSource, SocketSource, DataFrameSource or a streaming DataFrame"
            )
        if watermark is not None and not isinstance(watermark, WatermarkStrategy):
            raise JobDefinitionError(f"watermark must be a WatermarkStrategy, got {watermark!r}")
        if watermark is not None and not watermark.has_timestamps:
            column = source.time_column
            if not column:
                raise JobDefinitionError(
                    "the watermark strategy needs a timestamp column: "
                    "WatermarkStrategy.for_bounded_out_of_orderness(...).with_timestamp_column('ts')"
                )
            watermark = watermark.with_timestamp_column(column)
        return replace(self, source_spec=source, watermark=watermark)

    def key_by(self, *columns: str, **computed: KeyFunction | tuple[KeyFunction, str]) -> Self:
        """Partition the stream by these columns; each key gets its own state and timers.

        A keyword argument is a *computed* key column, Flink's ``KeySelector`` with a name:
        ``key_by("channel", day=lambda bid: bid["date_time"] // 86_400_000)`` keys each event
        by its channel and the function's value, which is added to the event under that name
        before anything else sees it (so the function, windows and savepoints see a column
        ``day``). The function gets the event as a keyed function does (timestamps as epoch
        ms) and must return a scalar (int, float, str or bool), the same type for every event;
        None makes the event a dead letter, as a null key column does. Built-in window
        aggregates, whose output has the key's type, need it: ``day=(function, "bigint")``.
        """
        if not all(isinstance(c, str) and c for c in columns):
            raise JobDefinitionError(f"key_by takes column names and name=function pairs, got {columns!r}")
        if not columns and not computed:
            raise JobDefinitionError("key_by needs one or more column names (or name=function for a computed key)")
        if len(set(columns)) != len(columns):
            raise JobDefinitionError(f"key_by repeats a column: {columns!r}")
        keys = tuple(ComputedKey.of(name, given) for name, given in computed.items())
        for key in keys:
            if key.name in columns:
                raise JobDefinitionError(f"key_by names {key.name!r} both as a column and as a computed key")
        return replace(self, key_columns=(*columns, *(k.name for k in keys)), computed_keys=keys)

    @property
    def source_key_columns(self) -> tuple[str, ...]:
        """The key columns the source itself must have (the computed ones it does not)."""
        computed = {k.name for k in self.computed_keys}
        return tuple(c for c in self.key_columns if c not in computed)

    def process(self, function: Any, *, output_schema: Any) -> Self:
        """Run ``function`` on the keyed stream; it emits rows of ``output_schema``.

        After ``.window(...)``, ``function`` is a :class:`ProcessWindowFunction` that sees each
        window's elements when it fires.
        """
        if self.window_assigner is not None:
            if not isinstance(function, ProcessWindowFunction):
                raise JobDefinitionError(
                    f"process after .window(...) needs a ProcessWindowFunction instance, got {function!r}"
                )
            return replace(self, window_kind=WindowKind.PROCESS, window_function=function, output=Schema.of(output_schema))
        if self.connected is not None and self.connected.join_bounds is not None:
            return replace(self, function=function, output=Schema.of(output_schema))  # checked by validate
        if not isinstance(function, KeyedProcessFunction):
            raise JobDefinitionError(
                f"process needs a KeyedProcessFunction instance, got {function!r}"
                + (" (a class: add ())" if isinstance(function, type) else "")
            )
        return replace(self, function=function, output=Schema.of(output_schema))

    # ------------------------------------------------------------------ two inputs

    def connect(
        self, source: SourceSpec, *,
        key_by: str | tuple[str, ...] | list[str] | Mapping[str, KeyFunction | tuple[KeyFunction, str]] | None = None,
        watermark: WatermarkStrategy | None = None,
    ) -> Self:
        """Connect a second input (Flink's ``connect``): with ``key_by``, a keyed stream for a
        :class:`~sparkstate.api.connected.KeyedCoProcessFunction`; without, follow with
        ``.broadcast(MapStateDescriptor(...))`` for a ``KeyedBroadcastProcessFunction``.

        ``key_by`` names the second input's key columns, or maps names to functions for
        computed keys (as :meth:`key_by`'s keyword arguments): ``key_by={"day": day_of}``."""
        if self.connected is not None:
            raise JobDefinitionError(f"job {self.name!r} already has a second input ({self.connected.describe()})")
        probe = replace(self, source_spec=None, watermark=None).source(source, watermark=watermark)
        keyed = replace(self, key_columns=(), computed_keys=())
        if isinstance(key_by, Mapping):
            keyed = keyed.key_by(**key_by)  # the same checks as the first input's
        elif key_by is not None:
            keyed = keyed.key_by(*((key_by,) if isinstance(key_by, str) else tuple(key_by)))
        assert probe.source_spec is not None
        return replace(self, connected=ConnectedInput(
            probe.source_spec, probe.watermark, keyed.key_columns, computed_keys=keyed.computed_keys))

    def broadcast(self, *descriptors: MapStateDescriptor[Any, Any]) -> Self:
        """Make the connected input a broadcast stream with these broadcast states (Flink's
        ``broadcast(MapStateDescriptor...)``); the job's function is then a
        :class:`~sparkstate.api.connected.KeyedBroadcastProcessFunction`."""
        c = self.connected
        if c is None:
            raise JobDefinitionError("broadcast(...) needs a second input: job.connect(rules_source).broadcast(...)")
        if c.key_columns:
            raise JobDefinitionError(
                f"job {self.name!r}: a broadcast input has no key; connect it without key_by=... (got {c.key_columns})"
            )
        if not descriptors:
            raise JobDefinitionError("broadcast(...) needs at least one MapStateDescriptor")
        names: set[str] = set()
        for d in descriptors:
            if not isinstance(d, MapStateDescriptor):
                raise JobDefinitionError(
                    f"job {self.name!r}: broadcast state must be a MapStateDescriptor (as in Flink), got {d!r}"
                )
            if d.ttl_config is not None:
                raise JobDefinitionError(
                    f"job {self.name!r}: broadcast state {d.name!r} has a TTL; broadcast state does not expire "
                    "(as in Flink): remove enable_time_to_live, or remove entries in process_broadcast_element"
                )
            if d.name in names:
                raise JobDefinitionError(f"job {self.name!r}: two broadcast states are named {d.name!r}")
            names.add(d.name)
        return replace(self, connected=replace(c, broadcast=tuple(descriptors)))

    def interval_join(
        self, source: SourceSpec, *, key_by: str | tuple[str, ...] | list[str], watermark: WatermarkStrategy,
    ) -> Self:
        """Join each element with the other input's elements of the same key whose event time
        is within bounds (Flink's ``intervalJoin``); follow with ``.between(lower, upper)`` and
        ``.process(ProcessJoinFunction(), output_schema=...)``."""
        if self.watermark is None or watermark is None:
            raise JobDefinitionError(
                f"job {self.name!r}: an interval join runs on event time; give both inputs a WatermarkStrategy"
            )
        job = self.connect(source, key_by=key_by, watermark=watermark)
        assert job.connected is not None
        return replace(job, connected=replace(job.connected, pending_join=True))

    def between(self, lower: Duration, upper: Duration) -> Self:
        """The interval join's bounds: the other element's time in ``[ts + lower, ts + upper]``."""
        c = self.connected
        if c is None or not (c.pending_join or c.join_bounds is not None):
            raise JobDefinitionError("between(lower, upper) follows .interval_join(other, key_by=..., watermark=...)")
        lo, hi = to_millis(lower, "between: lower"), to_millis(upper, "between: upper")
        if lo > hi:
            raise JobDefinitionError(f"between: the lower bound ({lo} ms) is above the upper bound ({hi} ms)")
        return replace(self, connected=replace(c, join_bounds=(lo, hi), pending_join=False))._check_join_bounds()

    def lower_bound_exclusive(self) -> Self:
        """Make the interval join's lower bound exclusive: ``ts + lower < other.ts`` (Flink's
        ``lowerBoundExclusive``)."""
        c = self._join("lower_bound_exclusive()")
        return replace(self, connected=replace(c, join_inclusive=(False, c.join_inclusive[1])))._check_join_bounds()

    def upper_bound_exclusive(self) -> Self:
        """Make the interval join's upper bound exclusive: ``other.ts < ts + upper`` (Flink's
        ``upperBoundExclusive``)."""
        c = self._join("upper_bound_exclusive()")
        return replace(self, connected=replace(c, join_inclusive=(c.join_inclusive[0], False)))._check_join_bounds()

    def side_output_left_late_data(self, sink: Any) -> Self:
        """Send the first input's elements that arrive behind the watermark (too late to join)
        to ``sink`` (Flink's ``sideOutputLeftLateData``; by default they are kept under the
        checkpoint directory's ``side-outputs/left_late_data``)."""
        self._join("side_output_left_late_data(...)")
        return self._with_side_sink(LEFT_LATE_DATA_NAME, sink)

    def side_output_right_late_data(self, sink: Any) -> Self:
        """The same for the second input's late elements (``right_late_data``)."""
        self._join("side_output_right_late_data(...)")
        return self._with_side_sink(RIGHT_LATE_DATA_NAME, sink)

    def _join(self, what: str) -> ConnectedInput:
        c = self.connected
        if c is None or c.join_bounds is None:
            raise JobDefinitionError(
                f"job {self.name!r}: {what} applies to an interval join: "
                ".interval_join(other, key_by=..., watermark=...).between(lower, upper) first"
            )
        return c

    def _check_join_bounds(self) -> Self:
        c = self._join("between(lower, upper)")
        assert c.join_bounds is not None
        (lo, hi), (lo_in, hi_in) = c.join_bounds, c.join_inclusive
        if lo + (0 if lo_in else 1) > hi - (0 if hi_in else 1):
            raise JobDefinitionError(
                f"job {self.name!r}: the interval join's bounds {'[' if lo_in else '('}{lo} ms, {hi} ms{']' if hi_in else ')'} "
                "hold no time "
                "(an exclusive bound equal to the other); widen between(lower, upper) or keep the bounds inclusive"
            )
        return self

    # ------------------------------------------------------------------ windows

    def window(self, assigner: WindowAssigner) -> Self:
        """Group each key's elements into windows (tumbling, sliding, session...)."""
        if not self.key_columns:
            raise JobDefinitionError("window(...) needs a keyed stream: call .key_by(...) first")
        if not isinstance(assigner, WindowAssigner):
            raise JobDefinitionError(
                f"window needs a window assigner such as TumblingEventTimeWindows.of(...), got {assigner!r}"
            )
        if assigner.time == TimeDomain.EVENT_TIME and self.watermark is None:
            raise JobDefinitionError(
                f"{assigner.describe()} need event time: give .source(...) a WatermarkStrategy first"
            )
        if self.early_firing and assigner.merging:
            raise JobDefinitionError(
                f"early_fire() applies to tumbling and sliding windows, not {assigner.describe()}: "
                "declare the window before early_fire()"
            )
        return replace(self, window_assigner=assigner)

    def allowed_lateness(self, lateness: Duration) -> Self:
        """Keep windows this long after they fire; a late element re-fires its window."""
        ms = to_millis(lateness, "allowed_lateness")
        if ms < 0:
            raise JobDefinitionError(f"allowed_lateness must not be negative, got {ms} ms")
        if self.window_assigner is None:
            raise JobDefinitionError("allowed_lateness(...) applies to windows: call .window(...) first")
        if self.window_assigner.time != TimeDomain.EVENT_TIME:
            raise JobDefinitionError("allowed_lateness applies to event-time windows only")
        return replace(self, lateness_ms=ms)

    def early_fire(self) -> Self:
        """Emit each window's current result at the end of every micro-batch that changes it,
        besides its final row when the watermark passes its end: Flink SQL's early firing
        (``table.exec.emit.early-fire.enabled``) with the micro-batch as its delay.

        For windows long beside the micro-batch (a day), whose result would otherwise wait for
        the window's end. A key's rows for one window are then an upsert stream: each is the
        window's result so far, and the last is its final result. Within a batch the rows come
        in window order, then in the order their keys changed. Tumbling and sliding windows only.
        """
        if self.window_assigner is None:
            raise JobDefinitionError("early_fire() applies to windows: call .window(...) first")
        if self.window_assigner.merging:
            raise JobDefinitionError(
                f"early_fire() applies to tumbling and sliding windows, not {self.window_assigner.describe()} "
                "(a session's window changes as it merges)"
            )
        return replace(self, early_firing=True)

    def side_output_late_data(self, sink: Any) -> Self:
        """Send elements later than the allowed lateness to ``sink`` (by default they are
        kept under the checkpoint directory's ``side-outputs/late_data``)."""
        if self.window_assigner is None:
            raise JobDefinitionError("side_output_late_data(...) applies to windows: call .window(...) first")
        return self._with_side_sink(LATE_DATA_NAME, sink)

    def dead_letters(self, sink: Any) -> Self:
        """Send records that cannot be processed (no or unreadable event time, or one out of
        range or too far ahead: see ``max_event_time_ahead``; a null key; text lines that are
        not events of the source's schema) to ``sink`` with the reason (by default: the
        checkpoint directory's ``side-outputs/dead_letters``)."""
        return self._with_side_sink(DEAD_LETTERS.name, sink)

    def side_output(self, tag: OutputTag, sink: Any) -> Self:
        """Send the rows a function emits with ``ctx.output(tag, row)`` to ``sink``."""
        if not isinstance(tag, OutputTag):
            raise JobDefinitionError(f"side_output needs an OutputTag, got {tag!r}")
        if tag.schema is None:
            raise JobDefinitionError(f"OutputTag {tag.name!r} needs a schema to be written to a sink")
        if tag.name in (DEAD_LETTERS.name, LATE_DATA_NAME, LEFT_LATE_DATA_NAME, RIGHT_LATE_DATA_NAME):
            raise JobDefinitionError(f"the side output name {tag.name!r} is sparkstate's own; choose another")
        tags = tuple(t for t in self.side_tags if t.name != tag.name) + (tag,)
        return replace(self, side_tags=tags)._with_side_sink(tag.name, sink)

    def _with_side_sink(self, name: str, sink: Any) -> Self:
        if sink is None:
            raise JobDefinitionError(f"side output {name!r} needs a sink")
        sinks = tuple((n, s) for n, s in self.side_sinks if n != name) + ((name, sink),)
        return replace(self, side_sinks=sinks)

    def reduce(self, function: Any, *, output_schema: Any) -> Self:
        """Fold each window's elements with ``function(a, b) -> element``; the result row gets
        ``window_start`` and ``window_end``."""
        self._need_window("reduce")
        if not callable(function):
            raise JobDefinitionError(f"reduce needs a function (a, b) -> element, got {function!r}")
        return replace(self, window_kind=WindowKind.REDUCE, window_function=function, output=Schema.of(output_schema))

    def aggregate(self, *aggregates: Any, output_schema: Any = None, window_function: Any = None) -> Self:
        """Aggregate each window: built-ins (``agg.count()``, ``agg.sum("amount")``...) or one
        :class:`AggregateFunction` whose ``get_result`` returns a dict of output columns.

        Rows are the key columns, ``window_start``, ``window_end`` and the results. With
        built-ins only, the output schema is derived from the source's columns (a streaming
        DataFrame's when the job runs) and the planner may run the job natively on Spark SQL.

        With ``window_function`` (a :class:`ProcessWindowFunction`, as Flink's
        ``aggregate(AggregateFunction, ProcessWindowFunction)``) the window keeps only the
        accumulator, and when it fires the function gets ``[get_result(acc)]`` plus the window
        and emits the rows itself (``output_schema`` is then required).
        """
        self._need_window("aggregate")
        if window_function is not None:
            if not isinstance(window_function, ProcessWindowFunction):
                raise JobDefinitionError(f"window_function must be a ProcessWindowFunction instance, got {window_function!r}")
            if output_schema is None:
                raise JobDefinitionError("aggregate with a window_function needs output_schema=...")
        if len(aggregates) == 1 and isinstance(aggregates[0], AggregateFunction):
            function: Any = aggregates[0]
            if output_schema is None:
                raise JobDefinitionError("aggregate with an AggregateFunction needs output_schema=...")
        elif aggregates and all(isinstance(a, Agg) for a in aggregates):
            function = BuiltinAggregates(tuple(aggregates))
        else:
            raise JobDefinitionError(
                "aggregate takes built-in aggregates (agg.count(), agg.sum('x')...) or one AggregateFunction, "
                f"got {aggregates!r}"
            )
        job = replace(self, window_kind=WindowKind.AGGREGATE, window_function=function, window_process=window_function)
        if output_schema is not None:
            return replace(job, output=Schema.of(output_schema))
        # derived from the source's columns: now when they are declared, else when the job runs
        return job.with_output_from(None) if job._source_columns() is not None else job

    def _need_window(self, what: str) -> None:
        if self.window_assigner is None:
            raise JobDefinitionError(f"{what}(...) is a window function: call .window(...) first")

    def _source_columns(self) -> Schema | None:
        """The source's columns when its spec declares them."""
        ddl = self.source_spec.schema_ddl if self.source_spec is not None else None
        return Schema.of(ddl) if ddl else None

    def with_output_from(self, source_columns: Schema | None) -> Self:
        """This job with the output schema of its built-in window aggregates derived from the
        source's columns: ``source_columns`` (what Spark knows of a streaming DataFrame), or
        else the ones the source declares. A job whose output is known is returned as it is."""
        if self.output is not None or not isinstance(self.window_function, BuiltinAggregates):
            return self
        columns = source_columns or self._source_columns()
        if columns is None:
            raise JobDefinitionError(
                f"job {self.name!r}: the source's columns are not known here; pass output_schema=... to aggregate"
            )
        return replace(self, output=builtin_output_schema(
            self.name, self.key_columns, self.window_function, columns, self.computed_keys))

    @property
    def side_output_names(self) -> tuple[str, ...]:
        """Every side output this job can produce."""
        names = [t.name for t in self.side_tags]
        # events without a usable event time, text lines that are not events, and events with
        # a null key are dead letters (a source may say it has none: ``never_null_keys``)
        spec = self.source_spec
        never_null = getattr(spec, "never_null_keys", None)
        null_keys = bool(self.computed_keys) or (  # a computed key may be None
            spec is not None and not (never_null is not None and never_null(self.key_columns)))
        # a second input brings its own (and a broadcast element the function rejects is one)
        if self.watermark is not None or (spec is not None and spec.rejects_malformed) or null_keys or self.connected:
            names.append(DEAD_LETTERS.name)
        if self.window_assigner is not None and self.window_assigner.time == TimeDomain.EVENT_TIME:
            names.append(LATE_DATA_NAME)
        if self.connected is not None and self.connected.join_bounds is not None:
            names += [LEFT_LATE_DATA_NAME, RIGHT_LATE_DATA_NAME]
        return tuple(names)

    def side_output_schema(self, name: str) -> Schema | None:
        if name == DEAD_LETTERS.name:
            return Schema.of(DEAD_LETTERS.schema)
        if name in (LATE_DATA_NAME, LEFT_LATE_DATA_NAME):
            return self._source_columns()
        if name == RIGHT_LATE_DATA_NAME and self.connected is not None:
            ddl = self.connected.source.schema_ddl
            return Schema.of(ddl) if ddl else None
        for t in self.side_tags:
            if t.name == name:
                return Schema.of(t.schema)
        return None

    def sink(self, sink: SinkSpec) -> Self:
        """Write the function's output to ``sink``."""
        return replace(self, sink_spec=sink)

    def with_settings(self, **changes: Any) -> Self:
        """Change :class:`JobSettings` fields, e.g. ``job.with_settings(key_groups=256)``.

        ``state_backend`` and ``trigger_interval`` change the checkpoint configuration's
        ``state_backend`` and ``interval`` (see :meth:`with_checkpointing`).
        """
        aliases = {name: changes.pop(name) for name in tuple(changes) if name in _CHECKPOINT_ALIASES}
        unknown = set(changes) - {f.name for f in dataclasses.fields(JobSettings)}
        if unknown:
            raise JobDefinitionError(f"unknown job settings {sorted(unknown)}")
        job = replace(self, settings=replace(self.settings, **changes))
        if aliases:
            job = job.with_checkpointing(**{_CHECKPOINT_ALIASES[k]: v for k, v in aliases.items()})
        return job

    def max_event_time_ahead(self, bound: Duration | str | None) -> Self:
        """Send events more than ``bound`` ahead of processing time to the dead letters (None:
        no bound; default one hour: see :class:`JobSettings`)."""
        return replace(self, settings=replace(self.settings, max_event_time_ahead=bound))  # type: ignore[arg-type]

    def with_checkpointing(self, config: CheckpointConfig | None = None, **changes: Any) -> Self:
        """Set how the job checkpoints: a whole :class:`CheckpointConfig`, or some of its fields.

        Example::

            job.with_checkpointing(directory="hdfs://nn/ckpt/running-sum", interval="2 seconds",
                                   retained=20, incremental=True, state_backend="rocksdb")
        """
        if config is not None and not isinstance(config, CheckpointConfig):
            raise JobDefinitionError(f"with_checkpointing takes a CheckpointConfig, got {config!r}")
        unknown = set(changes) - {f.name for f in dataclasses.fields(CheckpointConfig)}
        if unknown:
            raise JobDefinitionError(
                f"unknown checkpoint settings {sorted(unknown)}; "
                f"CheckpointConfig has {[f.name for f in dataclasses.fields(CheckpointConfig)]}"
            )
        checkpoint = replace(config or self.settings.checkpoint, **changes)
        return replace(self, settings=replace(self.settings, checkpoint=checkpoint))

    # ------------------------------------------------------------------ checks

    def validate(self) -> None:
        """Raise a :class:`JobDefinitionError` naming the first missing piece."""
        missing = [
            what
            for what, ok in (
                ("a source (.source(...))", self.source_spec is not None),
                ("a key (.key_by(...))", bool(self.key_columns)),
                ("a function (.process(...))", self.function is not None or self.window_kind is not None),
                ("a sink (.sink(...))", self.sink_spec is not None),
            )
            if not ok
        ]
        if self.window_assigner is not None and self.window_kind is None:
            missing.insert(0, "a window function (.aggregate(...), .reduce(...) or .process(...))")
        if missing:
            raise JobDefinitionError(f"job {self.name!r} is missing " + ", ".join(missing))
        check_two_inputs(self)
        columns = self._source_columns()
        if columns is not None:
            check_source_columns(self.name, self.source_key_columns, self.timestamp_column, columns.names, columns.types)
            for key in self.computed_keys:
                if key.name in columns.names:
                    raise JobDefinitionError(
                        f"job {self.name!r}: the computed key {key.name!r} would replace the source's column of that "
                        "name; give the computed key another name"
                    )

    @property
    def timestamp_column(self) -> str | None:
        return self.watermark.timestamp_column if self.watermark else None


def builtin_output_schema(
    job_name: str, key_columns: tuple[str, ...], aggregates: BuiltinAggregates, source: Schema,
    computed: tuple[ComputedKey, ...] = (),
) -> Schema:
    """The rows built-in window aggregates emit over a source of columns ``source``: the key
    columns, ``window_start``, ``window_end``, then each aggregate's result."""
    types = {**dict(zip(source.names, source.types)), **{k.name: k.type for k in computed if k.type is not None}}
    cols = []
    for c in key_columns:
        if c in {k.name for k in computed} and c not in types:
            raise JobDefinitionError(
                f"job {job_name!r}: built-in window aggregates put the key {c!r} in their rows and need its type: "
                f"key_by({c}=(function, 'bigint'))"
            )
        if c not in types:
            raise KeyColumnError(f"job {job_name!r}: key column {c!r} is not in the source's columns {list(source.names)}")
        cols.append(f"{c} {types[c]}")
    cols += ["window_start timestamp", "window_end timestamp"]
    for a in aggregates.aggs:
        if a.column is not None and a.column not in types:
            raise JobDefinitionError(
                f"job {job_name!r}: agg.{a.function}({a.column!r}): no such column in the source {list(source.names)}"
            )
        cols.append(f"{a.name} {a.output_type(types.get(a.column) if a.column else None)}")
    return Schema.of(", ".join(cols))
