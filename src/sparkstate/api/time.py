"""Event time: watermark strategies (Flink's ``WatermarkStrategy``) and the time helpers.

Every conversion of a Python ``datetime`` to epoch milliseconds (or Spark's microseconds)
goes through :func:`epoch_millis` / :func:`epoch_micros`, and every duration a user gives
through :func:`to_millis`, so one rule holds everywhere: naive datetimes are UTC, and times
round down (floor), exactly, also before 1970.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import Any

from sparkstate.errors import JobDefinitionError

Duration = timedelta | int
#: A function of an event (column name to value) that returns its time: epoch ms or a datetime.
TimestampAssigner = Callable[[dict[str, Any]], int | datetime]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_US = timedelta(microseconds=1)

#: the units of Spark's interval strings (``"500 milliseconds"``, ``"2 s"``), in milliseconds
_UNIT_MS = {
    "ms": 1, "milli": 1, "millis": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
    "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
    "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
}
_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$")

#: Flink's ``Long.MIN_VALUE`` watermark: no event time has been seen yet.
MIN_WATERMARK = -(2**63)
#: The watermark a bounded input ends with (Flink's final ``Long.MAX_VALUE`` watermark).
MAX_WATERMARK = 2**63 - 1


class TimeDomain(IntEnum):
    """Which clock a timer (or a window) follows; the int value indexes per-domain pairs."""

    EVENT_TIME = 0
    PROCESSING_TIME = 1

    @property
    def label(self) -> str:
        """``"event"`` or ``"processing"``, as in "event-time windows"."""
        return "event" if self is TimeDomain.EVENT_TIME else "processing"


#: The event times an event may have (epoch ms): 1677-09-22 to 2262-04-09, whole days inside
#: what pandas' datetime64[ns] holds (1677-09-21T00:12:43.145Z .. 2262-04-11T23:47:16.854Z;
#: Spark hands event times to pandas), ending before the end-of-input marker of a bounded
#: source (2262-04-10). An event time outside is a dead letter (on Spark it would fail its
#: batch, ``ArrowInvalid ... out of bounds``).
MIN_EVENT_TIME_MS = -9223286400000  # 1677-09-22T00:00:00Z
MAX_EVENT_TIME_MS = 9223199999999  # 2262-04-09T23:59:59.999Z


def epoch_millis(value: datetime) -> int:
    """A datetime as epoch milliseconds (a naive one is UTC), rounded down exactly: no float,
    so ``1969-12-31 23:59:59.999500`` is -1 and ``00:00:00.000999`` is 0."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // _MS


def epoch_micros(value: datetime) -> int:
    """A datetime as epoch microseconds (Spark's timestamps), by :func:`epoch_millis`'s rule."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // _US


def to_millis(d: Duration | str, what: str = "duration", *, text: bool = False, exact: bool = False) -> int:
    """A duration as int milliseconds: a ``timedelta`` or int milliseconds and, with ``text``,
    an interval string such as ``"500 milliseconds"``, ``"2 s"`` or ``"1.5 minutes"``.

    A timedelta rounds down to the millisecond. With ``exact``, a fraction of a millisecond or
    a negative duration is an error instead (a trigger interval must be whole milliseconds).
    """
    if isinstance(d, timedelta):
        ms, fraction = divmod(d, _MS)
        if exact and (fraction or ms < 0):
            raise _not_whole(d, what)
        return ms
    if isinstance(d, int) and not isinstance(d, bool):
        if exact and d < 0:
            raise _not_whole(d, what)
        return d
    if text and isinstance(d, str) and (m := _INTERVAL.match(d.lower())) and m.group(2) in _UNIT_MS:
        # float as Spark reads it: "1.5 s" is 1500 ms, "0.0005 s" is not whole
        scaled = float(m.group(1)) * _UNIT_MS[m.group(2)]
        if exact and scaled != int(scaled):
            raise _not_whole(d, what)
        return int(scaled)
    examples = "a duration such as '500 milliseconds', '2 seconds' or '1 minute', " if text else ""
    raise JobDefinitionError(f"{what} must be {examples}a datetime.timedelta or int milliseconds, got {d!r}")


def _not_whole(d: object, what: str) -> JobDefinitionError:
    return JobDefinitionError(f"{what} must be a whole, non-negative number of milliseconds, got {d!r}")


@dataclass(frozen=True)
class WatermarkStrategy:
    """How event time and watermarks are derived from the input.

    As in Flink's ``BoundedOutOfOrdernessWatermarks``, the watermark is the largest timestamp
    seen so far minus the allowed out-of-orderness minus 1 ms. In Spark it advances between
    micro-batches and is saved in the checkpoint with the source offsets.

    Event time comes from a column, or from a function of the event (Flink's
    ``TimestampAssigner``). An event whose time is missing or unreadable, or for which the
    function fails, goes to the dead-letter output with the reason.

    With two inputs the job's watermark is the smaller of theirs, and an input that has seen
    no event holds it at ``MIN_WATERMARK`` (as in Flink). :meth:`with_idleness` lets an input
    that has had no event for a while stop holding it back (see docs/guides/joins.md).

    Example::

        >>> from datetime import timedelta
        >>> WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5)) \\
        ...     .with_timestamp_column("event_time").max_out_of_orderness_ms
        5000
        >>> strategy = WatermarkStrategy.for_monotonous_timestamps() \\
        ...     .with_timestamp_assigner(lambda event: event["created_ms"] // 1000 * 1000)
    """

    max_out_of_orderness_ms: int = 0
    timestamp_column: str | None = None
    #: ``fn(event dict) -> epoch ms or datetime``; it sees timestamps as epoch ms
    timestamp_assigner: TimestampAssigner | None = None
    #: processing time (ms) without an event after which the input is idle (None: never)
    idle_timeout_ms: int | None = None

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: Duration) -> WatermarkStrategy:
        ms = to_millis(max_out_of_orderness, "max_out_of_orderness")
        if ms < 0:
            raise JobDefinitionError(f"max_out_of_orderness must not be negative, got {ms} ms")
        return WatermarkStrategy(ms)

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        return WatermarkStrategy(0)

    def with_timestamp_column(self, column: str) -> WatermarkStrategy:
        """Take each event's time from ``column`` (a timestamp, or epoch ms as a long)."""
        if not isinstance(column, str) or not column:
            raise JobDefinitionError(f"timestamp column must be a column name, got {column!r}")
        return replace(self, timestamp_column=column, timestamp_assigner=None)

    def with_timestamp_assigner(self, assigner: TimestampAssigner) -> WatermarkStrategy:
        """Take each event's time from ``assigner(event)``: epoch ms (int) or a datetime.

        It runs where the events are read (for the watermark) and again in the keyed
        operator, so it must be a pure function of the event.
        """
        if not callable(assigner):
            raise JobDefinitionError(f"a timestamp assigner must be a function of the event, got {assigner!r}")
        return replace(self, timestamp_assigner=assigner, timestamp_column=None)

    def with_idleness(self, timeout: Duration) -> WatermarkStrategy:
        """Mark the input *idle* once it has had no event for ``timeout`` of processing time
        (Flink's ``withIdleness``): an idle input does not hold back the watermark of a job with
        two inputs, which then follows the other input alone; the input becomes active again
        with its next event. Without it, an input that has seen no event holds the job's
        watermark at ``MIN_WATERMARK``, and one that went quiet holds it where it left it.

        The harness honours it; a Spark run of two inputs with a watermark each refuses it
        (Spark computes the job's watermark itself, over every input); with one input it
        changes nothing (docs/guides/joins.md, "Idle inputs").
        """
        ms = to_millis(timeout, "idleness timeout")
        if ms <= 0:
            raise JobDefinitionError(f"an idleness timeout must be positive, got {ms} ms (with_idleness(timedelta(minutes=1)))")
        return replace(self, idle_timeout_ms=ms)

    def idle(self, last_event_at: int, now: int) -> bool:
        """Whether the input is idle at processing time ``now``, its last event (or the
        start, if it had none) having come at ``last_event_at``."""
        return self.idle_timeout_ms is not None and now - last_event_at >= self.idle_timeout_ms

    @property
    def has_timestamps(self) -> bool:
        """A column or a function gives each event its time."""
        return self.timestamp_column is not None or self.timestamp_assigner is not None

    def describe_timestamps(self) -> str:
        if self.timestamp_assigner is not None:
            return f"function {getattr(self.timestamp_assigner, '__qualname__', repr(self.timestamp_assigner))}"
        return f"column {self.timestamp_column!r}"

    def watermark_for(self, max_timestamp: int) -> int:
        """The watermark after seeing ``max_timestamp``."""
        return max_timestamp - self.max_out_of_orderness_ms - 1
