"""The contracts of sources and sinks: what a job's description, the planner and the runtime
may ask of any source or sink spec.

The specs themselves live in ``sparkstate.connectors`` (plain dataclasses, no Spark); their
Spark bindings in ``sparkstate.runtime.io.sources`` and ``spark_sinks``. A spec offers
every member below, so callers call them instead of probing for them: adding a source means
writing its spec and one Spark binding, nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from sparkstate.errors import JobDefinitionError, KeyColumnError


class Guarantee(StrEnum):
    """A source's delivery guarantee, end to end with a sink that commits per micro-batch."""

    #: replayable: a failed micro-batch reads the same events again, so each counts once
    EXACTLY_ONCE = "exactly-once"
    #: what a failed micro-batch had read, and what arrived while the job was down, is lost
    AT_MOST_ONCE = "at-most-once"
    #: a Spark streaming DataFrame: replayable Spark sources (files, Kafka) give exactly-once
    AS_ITS_SOURCE = "as its source gives"


@runtime_checkable
class SourceSpec(Protocol):
    """What a job reads.

    A *replayable* source reads a failed micro-batch again from the same offsets (each event
    counts exactly once); one that cannot replay loses what it had handed to a failed batch
    (at most once). ``guarantee`` and ``guarantee_why`` say which, for ``explain`` and the CLI.

    The facts below are read-only: a spec may hold them as fields, class constants or properties.
    """

    @property
    def time_column(self) -> str | None:
        """The default event-time column (a watermark strategy without one takes it)."""
        ...

    @property
    def schema_ddl(self) -> str | None:
        """The events' columns as DDL, or None when only Spark knows them (a streaming DataFrame)."""
        ...

    @property
    def bounded(self) -> bool:
        """Whether a run can read it to its end."""
        ...

    @property
    def has_end_marker(self) -> bool:
        """Whether a bounded run ends with the end-of-input marker that fires every event-time timer."""
        ...

    @property
    def rejects_malformed(self) -> bool:
        """Text sources: lines that are not events become dead letters (the job then has that side output)."""
        ...

    @property
    def guarantee(self) -> Guarantee:
        """One of "exactly-once", "at-most-once" or "as its source gives"."""
        ...

    @property
    def guarantee_why(self) -> str:
        """Why, in a few words ("" when the guarantee says it all)."""
        ...

    def end_offset(self, marker: bool = True) -> int | None:
        """The offset a finished run has read to (None: unbounded). ``marker``: the job uses
        the end-of-input marker (its function has timers)."""
        ...

    def events_between(self, start: int, end: int) -> int | None:
        """Events offsets ``[start, end)`` hold, or None when offsets do not count events
        (Spark's row count is used then)."""
        ...

    def always_has_event_time(self, column: str | None) -> bool:
        """Whether every event holds a timestamp in ``column`` (so none can be a dead letter)."""
        ...

    def never_behind_watermark(self, strategy: Any) -> bool:
        """Whether no event can arrive at or behind the watermark ``strategy`` gives."""
        ...

    # Optional: ``never_null_keys(key_columns) -> bool``, whether no event can have a null
    # key (such an event is a dead letter, so a job whose source may have one has the
    # ``dead_letters`` side output). A spec without it is taken to answer False.

    def identity(self) -> dict[str, Any]:
        """What a checkpoint's offsets mean: a restart must find the same identity, because
        the same offsets must give the same events again."""
        ...

    def describe(self) -> str:
        """One line for ``explain`` and progress output."""
        ...


@runtime_checkable
class SinkSpec(Protocol):
    """Where a job's output goes."""

    def describe(self) -> str:
        """One line for ``explain`` and progress output."""
        ...


def check_source_columns(
    job_name: str, key_columns: Sequence[str], timestamp_column: str | None, names: Sequence[str], types: Sequence[str]
) -> None:
    """Raise when the source's columns (``names`` with their DDL ``types``) lack a key column or
    the event-time column, or when the event-time column holds neither timestamps nor epoch
    milliseconds. The description checks a declared schema, the runtime a DataFrame's."""
    names = list(names)
    for col in key_columns:
        if col not in names:
            raise KeyColumnError(f"job {job_name!r}: key column {col!r} is not in the source's columns {names}")
    if timestamp_column is None:
        return
    if timestamp_column not in names:
        raise KeyColumnError(f"job {job_name!r}: timestamp column {timestamp_column!r} is not in the source's columns {names}")
    kind = types[names.index(timestamp_column)].lower()
    if not (kind.startswith("timestamp") or kind in ("bigint", "long", "int")):
        raise JobDefinitionError(
            f"job {job_name!r}: timestamp column {timestamp_column!r} has type {kind}; use a timestamp or epoch-ms bigint"
        )
