"""What users subclass and call: ``KeyedProcessFunction``, its contexts and the timer service.

Names follow PyFlink (``process_element``, ``on_timer``, ``timer_service()``,
``register_event_time_timer``...) so a Flink user recognises them; timestamps are epoch
milliseconds (ints), as in Flink.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

# registers the handles of state with a TTL, which handle_for gives such descriptors
from sparkstate.api import state_ttl  # noqa: F401
from sparkstate.api.broadcast import read_only_broadcast_state
from sparkstate.api.state import (
    HELD_FIELD,
    TIMERS_FIELD,
    AggregatingState,
    AggregatingStateDescriptor,
    KeyScope,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    Record,
    ReducingState,
    ReducingStateDescriptor,
    StateDescriptor,
    Timers,
    ValueState,
    ValueStateDescriptor,
    handle_for,
)
from sparkstate.api.time import MAX_WATERMARK, MIN_WATERMARK, TimeDomain
from sparkstate.errors import JobDefinitionError, ProcessFunctionError, StateAccessError, StateDescriptorError, TimerError

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
IN = TypeVar("IN")
OUT = TypeVar("OUT")

#: An element as a function sees it: column name to value (timestamps as epoch ms).
Event = dict[str, Any]

__all__ = [
    "DEAD_LETTERS",
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "Context",
    "KeyedProcessFunction",
    "OnTimerContext",
    "OutputTag",
    "RuntimeContext",
    "TimeDomain",
    "TimerService",
]


class TimerService:
    """Register and delete timers for the current key; read the two clocks.

    Timers are unique per key, domain and timestamp: registering the same one twice keeps one,
    and deleting a timer that does not exist does nothing (both as in Flink).
    """

    __slots__ = ("_scope", "_owner")

    def __init__(self, scope: KeyScope, owner: str) -> None:
        self._scope = scope
        self._owner = owner

    def current_processing_time(self) -> int:
        """Processing time in epoch ms (in Spark: the micro-batch's timestamp)."""
        return self._scope.processing_time

    def current_watermark(self) -> int:
        """The event-time watermark in epoch ms; ``MIN_WATERMARK`` before the first one."""
        return self._scope.watermark

    def register_event_time_timer(self, timestamp: int) -> None:
        """Call ``on_timer`` for this key once the watermark reaches ``timestamp``.

        For a time the watermark has already reached, as in Flink: registered in an
        event-time ``on_timer``, it fires in the same round, in timestamp order among the due
        timers; registered anywhere else, it fires when the watermark next advances.
        """
        self._register(TimeDomain.EVENT_TIME, timestamp)

    def register_processing_time_timer(self, timestamp: int) -> None:
        """Call ``on_timer`` for this key once processing time reaches ``timestamp``."""
        self._register(TimeDomain.PROCESSING_TIME, timestamp)

    def delete_event_time_timer(self, timestamp: int) -> None:
        """Delete an event-time timer of this key (no-op when it does not exist)."""
        self._delete(TimeDomain.EVENT_TIME, timestamp)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        """Delete a processing-time timer of this key (no-op when it does not exist)."""
        self._delete(TimeDomain.PROCESSING_TIME, timestamp)

    def _record(self) -> Record:
        rec = self._scope.rec
        if rec is None:
            raise StateAccessError(
                "timers can only be registered or deleted in process_element and on_timer "
                "(a key must be current)"
            )
        return rec

    def _register(self, domain: TimeDomain, timestamp: int) -> None:
        scope = self._scope
        if not scope.timers_enabled:
            raise TimerError(
                f"{self._owner} registered a timer but does not define on_timer(timestamp, ctx); "
                "add on_timer so the timer has something to call"
            )
        if domain == TimeDomain.EVENT_TIME and not scope.event_time:
            raise TimerError(
                f"{self._owner} registered an event-time timer, but this job has no event time: its source "
                "is unbounded and has no watermark strategy, so the timer could never fire "
                "(give .source(...) a WatermarkStrategy)"
            )
        if type(timestamp) is not int:
            if isinstance(timestamp, bool) or not isinstance(timestamp, int):
                raise TimerError(
                    f"timer timestamps are epoch milliseconds as int; got {type(timestamp).__name__} "
                    f"{timestamp!r} for key {scope.key!r}"
                )
            timestamp = int(timestamp)
        rec = self._record()
        timers: Timers | None = rec.get(TIMERS_FIELD)
        if timers is None:
            timers = rec[TIMERS_FIELD] = set()
        entry = (int(domain), timestamp)
        if entry in timers:
            return
        timers.add(entry)
        if domain == TimeDomain.EVENT_TIME:
            if timestamp <= scope.watermark:
                if scope.in_event_timer:
                    scope.due.append((scope.key, rec))  # fires in this round, in timestamp order
                else:
                    rec[HELD_FIELD] = scope.watermark  # fires when the watermark next advances
        elif timestamp <= scope.processing_time:
            scope.due.append((scope.key, rec))

    def _delete(self, domain: TimeDomain, timestamp: int) -> None:
        rec = self._record()
        timers: Timers | None = rec.get(TIMERS_FIELD)
        if timers:
            timers.discard((int(domain), timestamp))
            if not timers:
                del rec[TIMERS_FIELD]
                rec.pop(HELD_FIELD, None)


@dataclass(frozen=True)
class OutputTag:
    """Names a side output: rows a function emits beside its main output (Flink's ``OutputTag``).

    ``schema`` is the side rows' schema (DDL string, dataclass or ``Schema``); a job routes each
    tag to a sink of its own with ``Job.side_output(tag, sink)``.

    Example::

        SUSPICIOUS = OutputTag("suspicious", "merchant_id string, amount double")

        def process_element(self, event, ctx):
            if event["amount"] > 10_000:
                ctx.output(SUSPICIOUS, event)
    """

    name: str
    schema: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise JobDefinitionError(f"an OutputTag needs a name made of letters, digits and _, got {self.name!r}")


#: Events the job could not process (no or unreadable event time): the raw event and the reason.
DEAD_LETTERS = OutputTag("dead_letters", "raw string, reason string")
#: Window elements later than the allowed lateness (the source's own columns).
LATE_DATA_NAME = "late_data"


class Context:
    """The context of ``process_element``: current key, element timestamp, timer service."""

    __slots__ = ("_scope", "_timer_service")

    def __init__(self, scope: KeyScope, timer_service: TimerService) -> None:
        self._scope = scope
        self._timer_service = timer_service

    def get_current_key(self) -> Any:
        """The key of the element (a tuple when the stream is keyed by several columns)."""
        return self._scope.key

    def timestamp(self) -> int | None:
        """The element's event time in epoch ms, or None when the job assigns no timestamps."""
        return self._scope.timestamp

    def timer_service(self) -> TimerService:
        return self._timer_service

    def output(self, tag: OutputTag, value: Any) -> None:
        """Emit ``value`` to the side output ``tag`` instead of the main output."""
        if not isinstance(tag, OutputTag):
            raise ProcessFunctionError(f"ctx.output needs an OutputTag as its first argument, got {tag!r}")
        self._scope.side.append((tag.name, value))

    def get_broadcast_state(self, descriptor: MapStateDescriptor[K, V]) -> Any:
        """A broadcast state of a :class:`~sparkstate.api.connected.KeyedBroadcastProcessFunction`'s
        job, read-only here (writable in ``process_broadcast_element`` only, as in Flink)."""
        return read_only_broadcast_state(self._scope, descriptor)


class OnTimerContext(Context):
    """The context of ``on_timer``; ``timestamp()`` is the timer's timestamp."""

    __slots__ = ("domain",)

    def __init__(self, scope: KeyScope, timer_service: TimerService) -> None:
        super().__init__(scope, timer_service)
        self.domain = TimeDomain.EVENT_TIME

    def time_domain(self) -> TimeDomain:
        """Whether the firing timer is an event-time or a processing-time timer."""
        return self.domain


class RuntimeContext:
    """Passed to ``open``: where a function declares its keyed state.

    Asking twice for the same descriptor returns the same handle; reusing a name for a
    different kind or type of state is an error.
    """

    def __init__(self, scope: KeyScope, function_name: str = "function") -> None:
        self._scope = scope
        self._function_name = function_name
        self._states: dict[str, tuple[StateDescriptor, Any]] = {}

    @property
    def descriptors(self) -> list[StateDescriptor]:
        """Every descriptor registered so far, in registration order."""
        return [d for d, _ in self._states.values()]

    def _get(self, desc: StateDescriptor, expected: type[StateDescriptor]) -> Any:
        if not isinstance(desc, expected):
            kind = expected.kind
            method = "get_state" if kind == "value" else f"get_{kind}_state"
            raise StateDescriptorError(
                f"{self._function_name}: {method} expects a {expected.__name__}, got {desc!r}"
            )
        known = self._states.get(desc.name)
        if known is not None:
            old, handle = known
            if old == desc:
                return handle
            raise StateDescriptorError(
                f"{self._function_name}: state name {desc.name!r} is already registered as "
                f"{old.describe()}; it cannot be registered again as {desc.describe()} "
                "(each state needs its own name)"
            )
        handle = handle_for(self._scope, desc)
        self._states[desc.name] = (desc, handle)
        return handle

    # the handle's class follows from the descriptor's (state.handle_for); the casts say so
    def get_state(self, descriptor: ValueStateDescriptor[T]) -> ValueState[T]:
        return cast("ValueState[T]", self._get(descriptor, ValueStateDescriptor))

    def get_list_state(self, descriptor: ListStateDescriptor[T]) -> ListState[T]:
        return cast("ListState[T]", self._get(descriptor, ListStateDescriptor))

    def get_map_state(self, descriptor: MapStateDescriptor[K, V]) -> MapState[K, V]:
        return cast("MapState[K, V]", self._get(descriptor, MapStateDescriptor))

    def get_reducing_state(self, descriptor: ReducingStateDescriptor[T]) -> ReducingState[T]:
        return cast("ReducingState[T]", self._get(descriptor, ReducingStateDescriptor))

    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor[IN, Any, OUT]) -> AggregatingState[IN, OUT]:
        return cast("AggregatingState[IN, OUT]", self._get(descriptor, AggregatingStateDescriptor))


class KeyedProcessFunction:
    """A function over a keyed stream with keyed state and timers (Flink's ``KeyedProcessFunction``).

    Declare state in ``open``; handle each element in ``process_element`` and each firing timer
    in ``on_timer``. Both may ``yield`` (or return a list of) output rows: dicts or tuples
    matching the job's output schema.

    Example::

        class RunningSum(KeyedProcessFunction):
            def open(self, ctx):
                self.total = ctx.get_state(ValueStateDescriptor("total", float, default=0.0))

            def process_element(self, event, ctx):
                self.total.update(self.total.value() + event["amount"])
                yield {"merchant_id": ctx.get_current_key(), "total": self.total.value()}
    """

    def open(self, ctx: RuntimeContext) -> None:
        """Declare state here (called once per task before any element)."""

    def process_element(self, value: Event, ctx: Context) -> Iterable[Any] | None:
        """Handle one element of the current key."""
        raise NotImplementedError(f"{type(self).__name__} must define process_element(value, ctx)")

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterable[Any] | None:
        """Handle a timer of the current key that reached its time."""

    def close(self) -> None:
        """Release resources (called once per task after the last element)."""

    @classmethod
    def defines_on_timer(cls) -> bool:
        """True when a subclass overrides ``on_timer`` (only then may it register timers)."""
        return cls.on_timer is not KeyedProcessFunction.on_timer
