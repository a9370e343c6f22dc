"""Functions over two inputs: broadcast state and keyed co-processing (Flink's names).

* :class:`KeyedBroadcastProcessFunction` - a keyed stream connected to a *broadcast* stream
  (rules, thresholds, configuration). ``process_broadcast_element`` writes broadcast state,
  which every key group holds alike; ``process_element`` reads it (read-only, as in Flink)
  beside its keyed state and timers. ``ctx.apply_to_keyed_state`` runs a function over the
  state of every key.
* :class:`KeyedCoProcessFunction` - two keyed streams sharing one key's state and timers
  (``process_element1`` / ``process_element2``), the base of stream joins.
* :class:`ProcessJoinFunction` - what an interval join calls for each matching pair.

Order inside a micro-batch (Flink leaves the order between two inputs open; sparkstate fixes
one so a replayed batch gives the same output): for each key group, the timers already due,
then the *connected* input's elements (broadcast elements, or the second keyed input's), then
the first input's elements, each input in arrival order. So a rule that arrives in a batch
applies to the payments of that same batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from sparkstate.api.broadcast import BroadcastState, ReadOnlyBroadcastState, declared_broadcast
from sparkstate.api.functions import Context, Event, KeyedProcessFunction, OnTimerContext, TimerService
from sparkstate.api.state import KeyScope, MapStateDescriptor, StateDescriptor
from sparkstate.errors import StateAccessError

K = TypeVar("K")
V = TypeVar("V")

__all__ = [
    "LEFT_LATE_DATA_NAME",
    "RIGHT_LATE_DATA_NAME",
    "BroadcastContext",
    "BroadcastState",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
    "ProcessJoinFunction",
    "ReadOnlyBroadcastState",
]


class _KeyedStateApplier:
    """What ``apply_to_keyed_state`` needs from the engine: every key of the key group with a
    value for a state, made current in turn (set by the operator)."""

    def __call__(self, desc: StateDescriptor, function: Callable[[Any, Any], None]) -> None:
        raise StateAccessError("apply_to_keyed_state is available in process_broadcast_element only")


class BroadcastContext(Context):
    """The context of ``process_broadcast_element``: broadcast state to write, every key's state
    to visit, the clocks, side outputs. There is no current key (``get_current_key`` is None)."""

    __slots__ = ("applier",)

    def __init__(self, scope: KeyScope, timer_service: TimerService) -> None:
        super().__init__(scope, timer_service)
        self.applier: _KeyedStateApplier = _KeyedStateApplier()

    def get_broadcast_state(self, descriptor: MapStateDescriptor[K, V]) -> BroadcastState[K, V]:
        return BroadcastState(self._scope, declared_broadcast(self._scope, descriptor))

    def apply_to_keyed_state(self, state_descriptor: StateDescriptor, function: Callable[[Any, Any], None]) -> None:
        """Call ``function(key, state)`` for every key that has a value for ``state_descriptor``
        (Flink's ``applyToKeyedState``); ``state`` is the key's handle, so the function may
        read, update or clear it."""
        self.applier(state_descriptor, function)

    def current_processing_time(self) -> int:
        return self._scope.processing_time

    def current_watermark(self) -> int:
        return self._scope.watermark


class KeyedBroadcastProcessFunction(KeyedProcessFunction):
    """A keyed stream with a broadcast stream (Flink's ``KeyedBroadcastProcessFunction``).

    Example::

        RULES = MapStateDescriptor("rules", str, dict)

        class Fraud(KeyedBroadcastProcessFunction):
            def process_broadcast_element(self, rule, ctx):
                ctx.get_broadcast_state(RULES).put(rule["name"], rule)

            def process_element(self, payment, ctx):
                for name, rule in ctx.get_broadcast_state(RULES).items():
                    if payment["amount"] > rule["limit"]:
                        yield {"payer": ctx.get_current_key(), "rule": name}

    Rows yielded by ``process_broadcast_element`` are emitted once per micro-batch (not once
    per key group or task, as Flink would). An exception there sends the element to the dead
    letters with the reason and undoes its writes, broadcast and keyed (``apply_to_keyed_state``);
    the job goes on.
    """

    def process_element(self, value: Event, ctx: Context) -> Iterable[Any] | None:
        """Handle one element of the keyed input; ``ctx.get_broadcast_state(d)`` is read-only."""
        raise NotImplementedError(f"{type(self).__name__} must define process_element(value, ctx)")

    def process_broadcast_element(self, value: Event, ctx: BroadcastContext) -> Iterable[Any] | None:
        """Handle one element of the broadcast input."""
        raise NotImplementedError(f"{type(self).__name__} must define process_broadcast_element(value, ctx)")

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterable[Any] | None:
        """Handle a timer of the current key (broadcast state is read-only here too)."""

    @classmethod
    def defines_on_timer(cls) -> bool:
        # this class's on_timer only documents the hook: a job pays for timers (processing-time
        # mode, the end-of-input batches) only when a subclass defines its own
        return cls.on_timer is not KeyedBroadcastProcessFunction.on_timer and super().defines_on_timer()


class KeyedCoProcessFunction(KeyedProcessFunction):
    """Two keyed inputs sharing each key's state and timers (Flink's ``KeyedCoProcessFunction``).

    ``process_element1`` gets the job's first input (``.source``), ``process_element2`` the one
    passed to ``.connect(source, key_by=...)``. Both inputs are keyed by their own columns into
    one key space: a value of the first input's key column meets the same value of the second's.
    """

    def process_element(self, value: Event, ctx: Context) -> Iterable[Any] | None:
        return self.process_element1(value, ctx)

    def process_element1(self, value: Event, ctx: Context) -> Iterable[Any] | None:
        raise NotImplementedError(f"{type(self).__name__} must define process_element1(value, ctx)")

    def process_element2(self, value: Event, ctx: Context) -> Iterable[Any] | None:
        raise NotImplementedError(f"{type(self).__name__} must define process_element2(value, ctx)")


#: an interval join's elements that arrive behind the watermark, of each input (its own columns)
LEFT_LATE_DATA_NAME = "left_late_data"
RIGHT_LATE_DATA_NAME = "right_late_data"


class ProcessJoinFunction:
    """What an interval join calls for each pair of elements whose times are within the bounds
    (Flink's ``ProcessJoinFunction``): ``right.ts`` in ``[left.ts + lower, left.ts + upper]``.

    ``process_element(left, right, ctx)`` yields rows; ``ctx.left_timestamp()``,
    ``ctx.right_timestamp()``, ``ctx.timestamp()`` (the pair's: the larger of the two),
    ``ctx.get_current_key()`` and ``ctx.output(tag, value)`` (a side output). The rules (bounds,
    late elements, when state is cleaned) are in ``sparkstate.engine.joins`` and docs/guides/joins.md.
    """

    def open(self, ctx: Any) -> None:
        """Called once per task before any element."""

    def process_element(self, left: Event, right: Event, ctx: Any) -> Iterable[Any] | None:
        raise NotImplementedError(f"{type(self).__name__} must define process_element(left, right, ctx)")

    def close(self) -> None:
        """Called once per task after the last element."""



def check_two_inputs(job: Any) -> None:
    """Refuse a job whose function does not fit its inputs (the check of ``validate``)."""
    from sparkstate.errors import JobDefinitionError

    fn, c, name = job.function, job.connected, job.name
    if c is None:
        if isinstance(fn, KeyedBroadcastProcessFunction):
            raise JobDefinitionError(
                f"job {name!r}: {type(fn).__name__} is a KeyedBroadcastProcessFunction and needs a broadcast input: "
                ".connect(rules_source).broadcast(MapStateDescriptor('rules', str, Rule)) before .process(...)"
            )
        if isinstance(fn, KeyedCoProcessFunction):
            raise JobDefinitionError(
                f"job {name!r}: {type(fn).__name__} is a KeyedCoProcessFunction and needs a second keyed input: "
                ".connect(other_source, key_by='...') before .process(...)"
            )
        return
    if job.window_assigner is not None:
        raise JobDefinitionError(f"job {name!r}: windows over two inputs are not supported; use a process function")
    if c.pending_join:
        raise JobDefinitionError(f"job {name!r}: interval_join(...) needs .between(lower, upper)")
    if c.is_broadcast:
        if not isinstance(fn, KeyedBroadcastProcessFunction):
            raise JobDefinitionError(
                f"job {name!r} has a broadcast input; its function must be a KeyedBroadcastProcessFunction, got {fn!r}"
            )
        return
    if not c.key_columns:
        raise JobDefinitionError(
            f"job {name!r}: the connected input needs key_by=... (a keyed stream) or .broadcast(...) (a broadcast stream)"
        )
    if c.watermark is not None and job.watermark is None:
        raise JobDefinitionError(
            f"job {name!r}: the connected input has a watermark strategy but the first input has none, so the job's "
            "watermark (the smaller of the two inputs') would never advance; give the first input one too "
            ".source(..., watermark=WatermarkStrategy...), or drop the second's"
        )
    if len(c.key_columns) != len(job.key_columns):
        raise JobDefinitionError(
            f"job {name!r}: the inputs are keyed by {len(job.key_columns)} and {len(c.key_columns)} columns "
            f"({job.key_columns} and {c.key_columns}); both keys must have the same shape to meet"
        )
    if c.join_bounds is not None:
        if not isinstance(fn, ProcessJoinFunction):
            raise JobDefinitionError(f"job {name!r}: an interval join's function must be a ProcessJoinFunction, got {fn!r}")
        return
    if not isinstance(fn, KeyedCoProcessFunction):
        raise JobDefinitionError(
            f"job {name!r} has a second keyed input; its function must be a KeyedCoProcessFunction, got {fn!r}"
        )
