"""Windows on keyed streams: assigners, the window type and window functions (Flink's names).

A window is ``[start, end)`` in epoch milliseconds; it fires once the watermark (or, for
processing-time windows, the processing time) reaches ``end - 1``, its ``max_timestamp``.

Example::

    >>> from datetime import timedelta
    >>> from sparkstate import ConsoleSink, Job, TumblingEventTimeWindows, UpiPayments, WatermarkStrategy, agg
    >>> job = (
    ...     Job("upi-per-minute")
    ...     .source(UpiPayments(), watermark=WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5)))
    ...     .key_by("merchant_id")
    ...     .window(TumblingEventTimeWindows.of(timedelta(minutes=1)))
    ...     .aggregate(agg.count("payments"), agg.sum("amount", "total"))
    ...     .sink(ConsoleSink())
    ... )
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sparkstate.api.state import KeyScope
from sparkstate.api.time import Duration, TimeDomain, to_millis
from sparkstate.errors import JobDefinitionError


class WindowKind(StrEnum):
    """How a window's elements become its result: ``Job.reduce``, ``.aggregate`` or ``.process``."""

    REDUCE = "reduce"
    AGGREGATE = "aggregate"
    PROCESS = "process"


@dataclass(frozen=True, order=True)
class TimeWindow:
    """The window ``[start, end)``; ``max_timestamp()`` is the last millisecond inside it."""

    start: int
    end: int

    def max_timestamp(self) -> int:
        return self.end - 1

    def intersects(self, other: TimeWindow) -> bool:
        """Overlapping or adjacent (Flink merges session windows that touch)."""
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: TimeWindow) -> TimeWindow:
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))


def _positive(value: Duration, what: str) -> int:
    ms = to_millis(value, what)
    if ms <= 0:
        raise JobDefinitionError(f"{what} must be positive, got {ms} ms")
    return ms


def window_start(timestamp: int, offset: int, size: int) -> int:
    """The start of the ``size``-aligned window holding ``timestamp`` (Flink's
    ``TimeWindow.getWindowStartWithOffset``; Python's ``%`` is already non-negative)."""
    return timestamp - (timestamp - offset) % size


class WindowAssigner:
    """Which windows an element belongs to."""

    #: the clock that assigns and fires the windows
    time: TimeDomain = TimeDomain.EVENT_TIME
    #: sessions merge overlapping windows
    merging: bool = False
    kind: str = ""

    def bounds(self, timestamp: int) -> tuple[tuple[int, int], ...]:
        """``(start, end)`` of each window ``timestamp`` belongs to (the hot path's form)."""
        raise NotImplementedError

    def assign(self, timestamp: int) -> list[TimeWindow]:
        """The windows an element with this timestamp belongs to."""
        return [TimeWindow(s, e) for s, e in self.bounds(timestamp)]

    def describe(self) -> str:
        raise NotImplementedError


def solo_range(assigner: WindowAssigner) -> tuple[int, int]:
    """Where, relative to a window's start, times belong to that window alone: the whole
    window for tumbling windows (and sliding ones with gaps, size <= slide), ``[size - slide,
    slide)`` for sliding ones with slide < size < 2 x slide, nothing when size >= 2 x slide
    (every time is in two windows or more) or for merging windows. An engine that has just
    placed an element in a window alone places the next ones in that range there without
    computing their windows."""
    size, slide = getattr(assigner, "size", 0), getattr(assigner, "slide", 0)
    return (0, 0) if assigner.merging or not size else (max(0, size - slide), min(size, slide))


@dataclass(frozen=True)
class _Tumbling(WindowAssigner):
    """Fixed, non-overlapping windows of ``size`` (aligned to the epoch + ``offset``) on
    either clock; the two public classes below only choose the clock."""

    size: int
    offset: int = 0
    kind = "tumbling"

    @classmethod
    def of(cls, size: Duration, offset: Duration = 0) -> Any:
        s = _positive(size, "window size")
        return cls(s, to_millis(offset, "window offset") % s)

    def bounds(self, timestamp: int) -> tuple[tuple[int, int], ...]:
        start = timestamp - (timestamp - self.offset) % self.size  # window_start, inlined: per event
        return ((start, start + self.size),)

    @property
    def slide(self) -> int:
        return self.size

    def describe(self) -> str:
        return f"tumbling {self.time.label}-time windows of {self.size} ms"


@dataclass(frozen=True)
class TumblingEventTimeWindows(_Tumbling):
    """Fixed, non-overlapping windows of ``size`` in event time (aligned to the epoch + ``offset``)."""


@dataclass(frozen=True)
class SlidingEventTimeWindows(WindowAssigner):
    """Windows of ``size`` starting every ``slide`` in event time (an element is in ``size/slide`` of them)."""

    size: int
    slide: int
    offset: int = 0
    kind = "sliding"

    @staticmethod
    def of(size: Duration, slide: Duration, offset: Duration = 0) -> SlidingEventTimeWindows:
        s = _positive(size, "window size")
        sl = _positive(slide, "window slide")
        return SlidingEventTimeWindows(s, sl, to_millis(offset, "window offset") % sl)

    def bounds(self, timestamp: int) -> tuple[tuple[int, int], ...]:
        size, slide = self.size, self.slide
        start = window_start(timestamp, self.offset, slide)
        out = []
        while start > timestamp - size:
            out.append((start, start + size))
            start -= slide
        return tuple(out)

    def describe(self) -> str:
        return f"sliding event-time windows of {self.size} ms every {self.slide} ms"


@dataclass(frozen=True)
class EventTimeSessionWindows(WindowAssigner):
    """Per-key sessions that close after ``gap`` without elements; overlapping sessions merge."""

    gap: int
    merging = True
    kind = "session"

    @staticmethod
    def with_gap(gap: Duration) -> EventTimeSessionWindows:
        return EventTimeSessionWindows(_positive(gap, "session gap"))

    def bounds(self, timestamp: int) -> tuple[tuple[int, int], ...]:
        return ((timestamp, timestamp + self.gap),)

    def describe(self) -> str:
        return f"event-time session windows with a gap of {self.gap} ms"


@dataclass(frozen=True)
class TumblingProcessingTimeWindows(_Tumbling):
    """Fixed windows of ``size`` in processing time (the micro-batch clock on Spark)."""

    time = TimeDomain.PROCESSING_TIME


class WindowContext:
    """What a :class:`ProcessWindowFunction` sees besides the elements."""

    __slots__ = ("window", "_scope")

    def __init__(self, window: TimeWindow, scope: KeyScope) -> None:
        self.window = window
        self._scope = scope

    def current_watermark(self) -> int:
        return self._scope.watermark

    def current_processing_time(self) -> int:
        return self._scope.processing_time


class ProcessWindowFunction:
    """Sees every element of a window when it fires (Flink's ``ProcessWindowFunction``).

    Example::

        class TopItems(ProcessWindowFunction):
            def process(self, key, context, elements):
                counts = collections.Counter(e["item_id"] for e in elements)
                for item, n in counts.most_common(3):
                    yield {"item_id": item, "views": n, "window_end": context.window.end}
    """

    def process(self, key: Any, context: WindowContext, elements: list[dict[str, Any]]) -> Iterable[Any] | None:
        raise NotImplementedError(f"{type(self).__name__} must define process(key, context, elements)")
