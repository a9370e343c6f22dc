"""Source specs: what a job reads. The Spark binding lives in ``sparkstate.runtime.spark_sources``.

* :class:`~sparkstate.connectors.generator.UpiPayments` - the built-in replayable generator.
* :class:`ListSource` - fixed micro-batches of dicts, one per trigger (tests, examples).
* :class:`DataFrameSource` - any Spark streaming DataFrame (files, rate, Kafka...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkstate.api.schema import Schema
from sparkstate.errors import JobDefinitionError


def _millis(value: Any) -> int | None:
    import datetime as dt

    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return int(value.timestamp() * 1000)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class ListSource:
    """Each inner list becomes exactly one micro-batch, in order; replayable by batch index.

    Timestamp columns take epoch milliseconds (ints) or datetimes; ``time_column`` names the
    default event-time column. After the last batch, an end-of-input marker lifts the watermark
    so every event-time timer fires; ``end_of_input=False`` leaves the stream open instead, to be
    continued by a longer list in a later run.

    Example::

        ListSource([[{"k": "a", "v": 1}], [{"k": "a", "v": 2}]], schema="k string, v bigint")
    """

    batches: tuple[tuple[dict, ...], ...]
    schema: str
    time_column: str | None = None
    end_of_input: bool = True
    name: str = "list"

    def __init__(
        self,
        batches: Any,
        schema: str,
        time_column: str | None = None,
        end_of_input: bool = True,
        name: str = "list",
    ) -> None:
        object.__setattr__(self, "batches", tuple(tuple(dict(e) for e in b) for b in batches))
        object.__setattr__(self, "schema", schema)
        object.__setattr__(self, "time_column", time_column)
        object.__setattr__(self, "end_of_input", end_of_input)
        object.__setattr__(self, "name", name)
        parsed = Schema.of(schema)
        if time_column is not None and time_column not in parsed.names:
            raise JobDefinitionError(f"ListSource: time_column {time_column!r} is not in the schema ({schema})")

    schema_ddl = property(lambda self: self.schema)
    bounded = True

    @property
    def has_end_marker(self) -> bool:
        return self.end_of_input

    def always_has_event_time(self, column: str | None) -> bool:
        """Whether every event holds a timestamp in ``column`` (none would be a dead letter)."""
        import datetime as dt

        return column is not None and all(
            isinstance(e.get(column), (int, dt.datetime)) and not isinstance(e.get(column), bool)
            for b in self.batches for e in b
        )

    def never_behind_watermark(self, strategy: Any) -> bool:
        """No event arrives at or behind the watermark of its micro-batch (each batch's watermark
        follows from the largest event time of the batches before it)."""
        if strategy.timestamp_assigner is not None:
            return False  # a function's times are not known before it runs
        col = strategy.timestamp_column or self.time_column
        top: int | None = None
        for batch in self.batches:
            stamps = [_millis(e.get(col)) for e in batch]
            if top is not None and any(t is not None and t <= strategy.watermark_for(top) for t in stamps):
                return False
            present = [t for t in stamps if t is not None]
            if present:
                top = max(present) if top is None else max(top, *present)
        return True

    def end_offset(self, marker: bool = True) -> int:
        """The offset a finished run has read to (marker and final batch count, see UpiPayments)."""
        return len(self.batches) + (2 if marker and self.end_of_input else 0)

    def events_between(self, start: int, end: int) -> int:
        """How many events the micro-batches ``[start, end)`` hold."""
        return sum(len(b) for b in self.batches[start:end])

    def describe(self) -> str:
        return f"list source ({len(self.batches)} batches, {sum(len(b) for b in self.batches)} events)"


@dataclass(frozen=True)
class DataFrameSource:
    """Any Spark streaming DataFrame, or a function ``spark -> DataFrame`` that builds one.

    Example::

        DataFrameSource(lambda spark: spark.readStream.format("rate").load())
    """

    dataframe: Any
    time_column: str | None = None
    name: str = "dataframe"
    bounded: bool = field(default=False, init=False)
    has_end_marker: bool = field(default=False, init=False)
    schema_ddl: Any = field(default=None, init=False)

    def end_offset(self, marker: bool = True) -> None:
        """Unbounded: a run of this source ends by ``timeout``, ``until`` or Ctrl-C."""
        return None

    def build(self, spark: Any) -> Any:
        df = self.dataframe(spark) if callable(self.dataframe) else self.dataframe
        if not getattr(df, "isStreaming", False):
            raise JobDefinitionError(
                f"DataFrameSource needs a streaming DataFrame (spark.readStream...), got {type(df).__name__}"
            )
        return df

    def describe(self) -> str:
        return "Spark streaming DataFrame"

