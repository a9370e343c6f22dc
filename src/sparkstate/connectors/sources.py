"""Source specs: what a job reads. The Spark binding lives in ``sparkstate.runtime.io.sources``.

* :class:`~sparkstate.connectors.generator.UpiPayments` (and the other generators) - built-in,
  replayable.
* :class:`ListSource` - fixed micro-batches of dicts, one per trigger (tests, examples).
* :class:`FileSource` - JSON or CSV lines in the files of a directory, read as files appear.
* :class:`SocketSource` - JSON or CSV lines from a TCP server (``nc -lk 9000``).
* :class:`DataFrameSource` - any Spark streaming DataFrame (rate, Kafka...).

Every spec states its delivery ``guarantee``, the end-to-end effect with a sink that commits
per micro-batch (Parquet, memory, PostgreSQL, SQLite): a *replayable* source reads a batch
that failed again from the same offsets, so each event changes state and output exactly once;
a source that cannot replay loses what it had handed to a failed batch or what arrived while
the job was down, so each event counts at most once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

from sparkstate.api.io import Guarantee, SourceSpec
from sparkstate.api.schema import Schema
from sparkstate.api.time import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS, epoch_millis
from sparkstate.connectors.credentials import mask
from sparkstate.errors import JobDefinitionError

EXACTLY_ONCE = Guarantee.EXACTLY_ONCE
AT_MOST_ONCE = Guarantee.AT_MOST_ONCE
AS_ITS_SOURCE = Guarantee.AS_ITS_SOURCE


def describe_guarantee(source: SourceSpec) -> str:
    """A source's guarantee and why, e.g. ``exactly-once: replayable``."""
    return f"{source.guarantee}: {source.guarantee_why}" if source.guarantee_why else str(source.guarantee)


class SourceBase:
    """The :class:`~sparkstate.api.io.SourceSpec` contract's defaults: an unbounded source
    without an end marker, of columns only Spark knows, that promises nothing about event
    time, counts no events by offset and is identified by its type alone. A spec overrides
    what it knows better, and writes its own ``describe``.

    The facts are read-only properties here, so a spec can override each one with a field, a
    class constant or a property of its own."""

    @property
    def time_column(self) -> str | None:
        return None

    @property
    def schema_ddl(self) -> str | None:
        return None

    @property
    def bounded(self) -> bool:
        return False

    @property
    def has_end_marker(self) -> bool:
        return False

    @property
    def rejects_malformed(self) -> bool:
        return False

    @property
    def guarantee(self) -> Guarantee:
        return AS_ITS_SOURCE

    @property
    def guarantee_why(self) -> str:
        return ""

    def end_offset(self, marker: bool = True) -> int | None:
        """Unbounded: a run of this source ends by ``timeout``, ``until`` or Ctrl-C."""
        return None

    def events_between(self, start: int, end: int) -> int | None:
        return None

    def always_has_event_time(self, column: str | None) -> bool:
        return False

    def never_behind_watermark(self, strategy: Any) -> bool:
        return False

    def never_null_keys(self, key_columns: Sequence[str]) -> bool:
        """Whether no event can have a null key (such an event is a dead letter)."""
        return False

    def identity(self) -> dict:
        # a ListSource may grow by whole batches between runs; a Spark source keeps its own offsets
        return {"type": type(self).__name__}


def _millis(value: Any) -> int | None:
    import datetime as dt

    if isinstance(value, dt.datetime):
        return epoch_millis(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class ListSource(SourceBase):
    """Each inner list becomes exactly one micro-batch, in order; replayable by batch index.

    Timestamp columns take epoch milliseconds (ints) or datetimes; ``time_column`` names the
    default event-time column. After the last batch, an end-of-input marker lifts the watermark
    so every event-time timer fires; ``end_of_input=False`` leaves the stream open instead, to be
    continued by a longer list in a later run.

    Example::

        >>> ListSource([[{"k": "a", "v": 1}], [{"k": "a", "v": 2}]], schema="k string, v bigint").describe()
        'list source (2 batches, 2 events)'
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
    bounded: ClassVar[bool] = True
    guarantee: ClassVar[Guarantee] = EXACTLY_ONCE
    guarantee_why: ClassVar[str] = "replayable"

    @property
    def has_end_marker(self) -> bool:
        return self.end_of_input

    def always_has_event_time(self, column: str | None) -> bool:
        """Whether every event holds a timestamp in ``column`` (none would be a dead letter)."""
        import datetime as dt

        def held(t: Any) -> bool:  # a timestamp, within the event times sparkstate holds
            ms = epoch_millis(t) if isinstance(t, dt.datetime) else t
            return type(ms) is int and MIN_EVENT_TIME_MS <= ms <= MAX_EVENT_TIME_MS

        return column is not None and all(held(e.get(column)) for b in self.batches for e in b)

    def latest_event_time(self, column: str | None) -> int | None:
        """The latest event time (epoch ms) in ``column``, None when there is none."""
        stamps = [t for b in self.batches for e in b if (t := _millis(e.get(column))) is not None] if column else []
        return max(stamps, default=None)

    def never_null_keys(self, key_columns: Sequence[str]) -> bool:
        """Whether every event has a value in each key column (else those are dead letters)."""
        return all(e.get(c) is not None for b in self.batches for e in b for c in key_columns)

    def never_behind_watermark(self, strategy: Any) -> bool:
        """No event arrives at or behind the watermark of its micro-batch (each batch's watermark
        follows from the largest event time of the batches before it), and none before the
        epoch: Spark's watermark starts at 0, so Spark SQL drops the windows that end there."""
        if strategy.timestamp_assigner is not None:
            return False  # a function's times are not known before it runs
        col = strategy.timestamp_column or self.time_column
        top: int | None = None
        for batch in self.batches:
            stamps = [_millis(e.get(col)) for e in batch]
            if any(t is not None and t < 0 for t in stamps):
                return False
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
class DataFrameSource(SourceBase):
    """Any Spark streaming DataFrame, or a function ``spark -> DataFrame`` that builds one.

    Example::

        DataFrameSource(lambda spark: spark.readStream.format("rate").load())
    """

    dataframe: Any
    time_column: str | None = None
    name: str = "dataframe"
    guarantee: ClassVar[Guarantee] = AS_ITS_SOURCE
    guarantee_why: ClassVar[str] = "replayable Spark sources (files, Kafka) give exactly-once"

    def build(self, spark: Any) -> Any:
        df = self.dataframe(spark) if callable(self.dataframe) else self.dataframe
        if not getattr(df, "isStreaming", False):
            raise JobDefinitionError(
                f"DataFrameSource needs a streaming DataFrame (spark.readStream...), got {type(df).__name__}"
            )
        return df

    def describe(self) -> str:
        return "Spark streaming DataFrame"


class TextLines(SourceBase):
    """What the text sources share: lines parsed into events of ``schema`` by ``format``
    (``sparkstate.connectors.text``), the ones that are not events going to the job's
    ``dead_letters`` side output with the reason. Unbounded: a run ends by ``timeout``,
    ``until`` or Ctrl-C."""

    schema: str
    format: str
    time_column: str | None
    #: what a CLI run names the checkpoint of a seed job on this source after
    name: str

    #: lines that are not events of the schema become dead letters (so every job reading
    #: such a source has the ``dead_letters`` side output)
    rejects_malformed: ClassVar[bool] = True
    schema_ddl = property(lambda self: self.schema)

    def _check(self) -> None:
        from sparkstate.connectors.text import FORMATS

        if self.format not in FORMATS:
            raise JobDefinitionError(f"{type(self).__name__}: format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        parsed = Schema.of(self.schema)
        if self.time_column is not None and self.time_column not in parsed.names:
            raise JobDefinitionError(
                f"{type(self).__name__}: time_column {self.time_column!r} is not in the schema ({self.schema})"
            )

    def parser(self, key_columns: tuple[str, ...], time_column: str | None) -> Any:
        """The :class:`~sparkstate.connectors.text.LineParser` of a job keyed by ``key_columns``
        (and with event time in ``time_column``, which then must be there too)."""
        from sparkstate.connectors.text import LineParser

        return LineParser(self.schema, self.format, key_columns, time_column, getattr(self, "max_line_length", None))


#: a SocketSource's longest line, in characters: a longer one is a dead letter
DEFAULT_MAX_LINE_LENGTH = 1_000_000
#: the characters a SocketSource holds in memory before its micro-batches commit them
DEFAULT_MAX_BUFFER = 64_000_000


@dataclass(frozen=True)
class SocketSource(TextLines):
    """Lines from a TCP server, each one event as JSON (or CSV) with the columns of ``schema``.

    For demos and tests (``nc -lk 9000``): the lines live only in the driver's memory until the
    micro-batch that read them commits, and nothing can send them again, so the guarantee is
    **at-most-once**: lines sent while the job is down, and those of a micro-batch that failed,
    are lost. A restarted job resumes its checkpoint (state, watermark) on a new connection.
    Use a replayable source (files, a generator) where every event must count.

    Its memory is bounded: a line longer than ``max_line_length`` characters becomes a dead
    letter (its first characters, with the reason), and while ``max_buffer`` characters wait
    for their micro-batch to commit the source reads no more, so the sender waits.

    Example::

        >>> print(SocketSource("localhost", 9000, "event_time timestamp, merchant_id string, amount double").guarantee)
        at-most-once
    """

    host: str
    port: int
    schema: str
    format: str = "json"
    time_column: str | None = None
    name: str = "socket"
    max_line_length: int = DEFAULT_MAX_LINE_LENGTH
    max_buffer: int = DEFAULT_MAX_BUFFER

    guarantee: ClassVar[Guarantee] = AT_MOST_ONCE
    guarantee_why: ClassVar[str] = "lines sent while the job is down are lost"

    def __post_init__(self) -> None:
        if not self.host:
            raise JobDefinitionError("SocketSource needs a host")
        if not isinstance(self.port, int) or not 0 < self.port < 65536:
            raise JobDefinitionError(f"SocketSource: port must be 1-65535, got {self.port!r}")
        if not isinstance(self.max_line_length, int) or self.max_line_length < 1:
            raise JobDefinitionError(f"SocketSource: max_line_length must be a positive int, got {self.max_line_length!r}")
        if not isinstance(self.max_buffer, int) or self.max_buffer < self.max_line_length + 1:
            raise JobDefinitionError(
                f"SocketSource: max_buffer must be an int above max_line_length ({self.max_line_length}), "
                f"got {self.max_buffer!r}"
            )
        self._check()

    def describe(self) -> str:
        return f"socket {self.host}:{self.port}" + (f" ({self.format} lines)" if self.format != "json" else "")


@dataclass(frozen=True)
class FileSource(TextLines):
    """The lines of the files in directory ``path``, each one event as JSON (or CSV), files read
    as they appear in the order (modification time, path), at most ``max_files_per_trigger``
    per micro-batch.

    Each micro-batch takes the files that follow the last one read in that order, and Spark's
    offset log records the last file's position, so a batch that failed reads the same files
    again and a restore resumes after its savepoint's batch: **exactly-once**, provided a file
    is complete when it appears (write it elsewhere and move it in) and is never changed
    afterwards. A file that appears with a position before the last file read (an older
    modification time, e.g. moved in with ``mv`` after a newer one) is not read: a warning
    says so, and ``touch`` gives it a new modification time. (A directory on another file system,
    ``hdfs://`` or ``s3a://``, is listed by Spark's file source: files in its order, which splits
    equal modification times its own way, and a savepoint names the files read.) Each
    file is read whole by one task of its micro-batch, in Python; a line ends at ``\n``,
    ``\r\n`` or ``\r`` as in Spark's text source, and a batch's records are its files'
    lines but the blank ones.

    Example::

        >>> print(FileSource("in/payments", "event_time timestamp, merchant_id string, amount double").guarantee)
        exactly-once
    """

    path: str
    schema: str
    format: str = "json"
    time_column: str | None = None
    max_files_per_trigger: int | None = None
    name: str = "files"

    guarantee: ClassVar[Guarantee] = EXACTLY_ONCE
    guarantee_why: ClassVar[str] = "replayable"

    def __post_init__(self) -> None:
        if not self.path:
            raise JobDefinitionError("FileSource needs a directory path")
        if self.max_files_per_trigger is not None and self.max_files_per_trigger < 1:
            raise JobDefinitionError(f"FileSource: max_files_per_trigger must be >= 1, got {self.max_files_per_trigger}")
        self._check()

    def describe(self) -> str:
        return f"files {self.path} ({self.format} lines)"


def refuse_unknown_kafka_options(spec: str, options: dict[str, str], known: tuple[str, ...], what: str) -> None:
    """Raise a :class:`JobDefinitionError` for a ``kafka://`` URL's query parameter that is
    neither one of ``known`` nor a librdkafka setting (those have a dot: ``security.protocol``);
    the URL is shown with its credentials masked."""
    unknown = sorted(n for n in options if n not in known and "." not in n)
    if unknown:
        takes = f"{', '.join(known)}, and" if known else "only"
        raise JobDefinitionError(
            f"{what} {mask(spec)!r}: unknown option(s) {', '.join(unknown)}; a Kafka {what} takes {takes} "
            "librdkafka's settings by their dotted names (e.g. security.protocol)"
        )


def parse_source(spec: str, schema: str, time_column: str | None = None) -> TextLines:
    """A text source from a CLI string, reading events of ``schema``: ``socket://HOST:PORT``
    or ``file:DIRECTORY``, each with ``?format=csv`` for CSV lines (default JSON). (A seed job's
    ``kafka://`` source is built by ``sparkstate.jobs.registry.kafka_source``: the Kafka source's
    module builds on this one.)"""
    base, _, query = spec.partition("?")
    options = {k: v[-1] for k, v in parse_qs(query).items()}
    fmt = options.pop("format", "json")
    if options:
        raise JobDefinitionError(f"source {mask(spec)!r}: unknown option(s) {', '.join(sorted(options))}; only format=json|csv")
    if base.startswith("socket://"):
        try:
            url = urlsplit(base)
            host, port = url.hostname, url.port
        except ValueError:  # a port that is not a number, or "[" without "]"
            host = port = None
        if not host or port is None or url.path not in ("", "/"):
            raise JobDefinitionError(f"source {mask(spec)!r}: expected socket://HOST:PORT, e.g. socket://localhost:9000")
        return SocketSource(host, port, schema, format=fmt, time_column=time_column)
    for prefix in ("file://", "file:"):
        if base.startswith(prefix) and len(base) > len(prefix):
            return FileSource(base[len(prefix):], schema, format=fmt, time_column=time_column)
    raise JobDefinitionError(
        f"unknown source {mask(spec)!r}; use socket://HOST:PORT or file:DIRECTORY (each with ?format=csv for CSV); "
        "`sparkstate run --source` also takes kafka://HOST:PORT/TOPIC (&starting=earliest|latest|TIME, &max_records=N)"
    )
