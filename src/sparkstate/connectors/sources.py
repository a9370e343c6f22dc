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

