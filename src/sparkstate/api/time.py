"""Event time: watermark strategies (Flink's ``WatermarkStrategy``) and duration helpers."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from enum import IntEnum
from typing import Any, Callable

from sparkstate.errors import JobDefinitionError

Duration = timedelta | int

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


def to_millis(d: Duration, what: str = "duration") -> int:
    """A ``timedelta`` or an int of milliseconds, as int milliseconds."""
    if isinstance(d, timedelta):
        return d // timedelta(milliseconds=1)
    if isinstance(d, int) and not isinstance(d, bool):
        return d
    raise JobDefinitionError(f"{what} must be a datetime.timedelta or int milliseconds, got {d!r}")


@dataclass(frozen=True)
class WatermarkStrategy:
    """How event time and watermarks are derived from the input.

    As in Flink's ``BoundedOutOfOrdernessWatermarks``, the watermark is the largest timestamp
    seen so far minus the allowed out-of-orderness minus 1 ms. In Spark it advances between
    micro-batches and is saved in the checkpoint with the source offsets.

    Event time comes from a column, or from a function of the event (Flink's
    ``TimestampAssigner``). An event whose time is missing or unreadable, or for which the
    function fails, goes to the dead-letter output with the reason.

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
    timestamp_assigner: Callable[[dict], Any] | None = None

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: Duration) -> "WatermarkStrategy":
        ms = to_millis(max_out_of_orderness, "max_out_of_orderness")
        if ms < 0:
            raise JobDefinitionError(f"max_out_of_orderness must not be negative, got {ms} ms")
        return WatermarkStrategy(ms)

    @staticmethod
    def for_monotonous_timestamps() -> "WatermarkStrategy":
        return WatermarkStrategy(0)

    def with_timestamp_column(self, column: str) -> "WatermarkStrategy":
        """Take each event's time from ``column`` (a timestamp, or epoch ms as a long)."""
        if not isinstance(column, str) or not column:
            raise JobDefinitionError(f"timestamp column must be a column name, got {column!r}")
        return replace(self, timestamp_column=column, timestamp_assigner=None)

    def with_timestamp_assigner(self, assigner: Callable[[dict], Any]) -> "WatermarkStrategy":
        """Take each event's time from ``assigner(event)``: epoch ms (int) or a datetime.

        It runs where the events are read (for the watermark) and again in the keyed
        operator, so it must be a pure function of the event.
        """
        if not callable(assigner):
            raise JobDefinitionError(f"a timestamp assigner must be a function of the event, got {assigner!r}")
        return replace(self, timestamp_assigner=assigner, timestamp_column=None)

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
