"""The interval join: a built-in ``KeyedCoProcessFunction`` that joins two keyed inputs on event time.

``a.interval_join(b, key_by=..., watermark=...).between(lower, upper)`` joins each element
``l`` of the first input (left) with every element ``r`` of the second (right) of the same
key whose event time is within the bounds: ``l.ts + lower <= r.ts <= l.ts + upper`` (Flink's
``IntervalJoinOperator``; ``lower_bound_exclusive()`` / ``upper_bound_exclusive()`` make a
bound strict, which is the same as moving it 1 ms inwards). The rules, which docs/guides/joins.md
states for users:

* An element is **late** when its time is before the watermark of its micro-batch
  (``ts < W``, Flink's ``isLate``). A late element joins nothing and is not kept; it goes to
  the side output ``left_late_data`` or ``right_late_data``.
* Every other element is added to its side's buffer, a MapState from event time to the
  elements of that time, and joined with the other side's buffer: each pair within the
  bounds is passed once to the ``ProcessJoinFunction``, when the second of the two arrives.
  The pair's timestamp (``ctx.timestamp()``) is the larger of the two times.
* **Cleanup**: an element can join nothing more once the watermark is past the last time a
  partner may have. That is ``ts + upper`` for a left element and ``ts - lower`` for a right
  one; like Flink, never earlier than ``ts`` itself (with ``upper <= 0``, or ``lower >= 0``,
  the cleanup time is ``ts``). The element leaves the buffer when the watermark passes its
  cleanup time ``C`` (``W > C``; an event-time timer at ``C + 1``). Flink removes it when the
  watermark *reaches* ``C``, but an element with time exactly ``W`` is not late yet and could
  still be its partner; keeping it 1 ms longer makes the join complete: **every pair of
  elements, neither late, whose times are within the bounds, is joined exactly once**
  (the rule the tests check against a brute-force model, ``tests/interval_join_model.py``).
  So once the watermark has passed every element's cleanup time the key holds no state.

Invariant: a bucket exists only while its cleanup timer is pending, and one timer at
``t`` removes exactly the left bucket and the right bucket whose cleanup time is ``t - 1``
(the cleanup time is one-to-one in the element's time on each side), so no timer needs to
say which side it cleans.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sparkstate.api.connected import KeyedCoProcessFunction, ProcessJoinFunction
from sparkstate.api.functions import MIN_WATERMARK, Context, Event, OnTimerContext, OutputTag, RuntimeContext
from sparkstate.api.state import MapState, MapStateDescriptor
from sparkstate.errors import JobDefinitionError, ProcessFunctionError

#: the buffers' state names (``harness.state(key)`` shows them)
LEFT_BUFFER = "left_buffer"
RIGHT_BUFFER = "right_buffer"

#: what a function returned instead of yielding rows (a single row is not a list of rows)
_SINGLE_ROW = (dict, str, bytes, tuple)


class JoinContext:
    """The context of ``ProcessJoinFunction.process_element``: the two elements' times, the
    pair's, the key and side outputs (Flink's ``ProcessJoinFunction.Context``)."""

    __slots__ = ("_ctx", "_left", "_right")

    def __init__(self) -> None:
        self._ctx: Context | None = None
        self._left = MIN_WATERMARK
        self._right = MIN_WATERMARK

    def left_timestamp(self) -> int:
        """The left (first input's) element's event time, epoch ms."""
        return self._left

    def right_timestamp(self) -> int:
        """The right (second input's) element's event time, epoch ms."""
        return self._right

    def timestamp(self) -> int:
        """The joined pair's time: the larger of the two elements' times."""
        return max(self._left, self._right)

    def get_current_key(self) -> Any:
        assert self._ctx is not None
        return self._ctx.get_current_key()

    def current_watermark(self) -> int:
        assert self._ctx is not None
        return self._ctx.timer_service().current_watermark()

    def output(self, tag: OutputTag, value: Any) -> None:
        """Emit ``value`` to the side output ``tag``."""
        assert self._ctx is not None
        self._ctx.output(tag, value)


class IntervalJoinOperator(KeyedCoProcessFunction):
    """Runs a :class:`ProcessJoinFunction` as an interval join (see the module docs).

    ``lower`` and ``upper`` are the bounds in ms as given; ``inclusive`` says whether each
    holds its own value. ``left_late`` / ``right_late`` are the side outputs of late elements.
    """

    def __init__(
        self,
        function: ProcessJoinFunction,
        lower: int,
        upper: int,
        inclusive: tuple[bool, bool] = (True, True),
        left_late: OutputTag | None = None,
        right_late: OutputTag | None = None,
    ) -> None:
        if not isinstance(function, ProcessJoinFunction):
            raise JobDefinitionError(f"an interval join's function must be a ProcessJoinFunction, got {function!r}")
        self.function = function
        #: inclusive bounds: an exclusive bound is the inclusive one 1 ms inwards
        self.lower = lower if inclusive[0] else lower + 1
        self.upper = upper if inclusive[1] else upper - 1
        if self.lower > self.upper:
            raise JobDefinitionError(
                f"interval join bounds ({lower} ms, {upper} ms, inclusive={inclusive}) hold no time: widen them"
            )
        self.left_late = left_late
        self.right_late = right_late
        self._jctx = JoinContext()
        self._name = type(function).__name__

    def open(self, ctx: RuntimeContext) -> None:
        self._left: MapState[int, list[Event]] = ctx.get_map_state(MapStateDescriptor(LEFT_BUFFER, int, list))
        self._right: MapState[int, list[Event]] = ctx.get_map_state(MapStateDescriptor(RIGHT_BUFFER, int, list))
        self.function.open(ctx)

    def close(self) -> None:
        self.function.close()

    def left_cleanup(self, ts: int) -> int:
        """The last watermark at which a left element of time ``ts`` may still find a partner."""
        return ts + self.upper if self.upper > 0 else ts

    def right_cleanup(self, ts: int) -> int:
        return ts - self.lower if self.lower < 0 else ts

    def process_element1(self, value: Event, ctx: Context) -> Iterable[Any] | None:
        return self._element(value, ctx, True)

    def process_element2(self, value: Event, ctx: Context) -> Iterable[Any] | None:
        return self._element(value, ctx, False)

    def _element(self, value: Event, ctx: Context, left: bool) -> list[Any] | None:
        ts = ctx.timestamp()
        if ts is None:  # interval_join(...) gives both inputs a watermark strategy, so not on a job
            raise JobDefinitionError(f"{self._name}: an interval join needs each element's event time")
        watermark = ctx.timer_service().current_watermark()
        if watermark != MIN_WATERMARK and ts < watermark:
            tag = self.left_late if left else self.right_late
            if tag is not None:
                ctx.output(tag, value)
            return None
        ours, theirs = (self._left, self._right) if left else (self._right, self._left)
        bucket = ours.get(ts)
        ours.put(ts, [value] if bucket is None else [*bucket, value])
        # the other side's times that pair with ``ts``
        lo, hi = (ts + self.lower, ts + self.upper) if left else (ts - self.upper, ts - self.lower)
        rows: list[Any] = []
        jctx = self._jctx
        jctx._ctx = ctx
        for other_ts, elements in sorted(item for item in theirs.items() if lo <= item[0] <= hi):
            for other in elements:
                if left:
                    jctx._left, jctx._right = ts, other_ts
                    rows.extend(self._call(value, other))
                else:
                    jctx._left, jctx._right = other_ts, ts
                    rows.extend(self._call(other, value))
        cleanup = self.left_cleanup(ts) if left else self.right_cleanup(ts)
        ctx.timer_service().register_event_time_timer(cleanup + 1)
        return rows

    def _call(self, left: Event, right: Event) -> Iterable[Any]:
        result = self.function.process_element(left, right, self._jctx)
        if result is None:
            return ()
        if isinstance(result, _SINGLE_ROW):
            raise ProcessFunctionError(
                f"{self._name}.process_element returned a single row ({type(result).__name__}); "
                "yield rows (or return a list of them)"
            )
        return result

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterable[Any] | None:
        """A cleanup timer: drop the buckets whose cleanup time the watermark has now passed."""
        passed = timestamp - 1
        self._left.remove(passed - self.upper if self.upper > 0 else passed)
        self._right.remove(passed + self.lower if self.lower < 0 else passed)
        return None
