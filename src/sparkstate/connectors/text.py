"""Events from text lines: JSON objects or CSV records typed by the source's schema, and a
reason for every line that is not one.

A source that receives text (a socket, files) cannot trust it. A line that cannot be read as
an event of the job's schema - not JSON, a value of the wrong type, no key - is not an event:
it becomes a dead letter ``{"raw": <the line>, "reason": <what and where>}`` for the job's
``dead_letters`` side output, and the job goes on. (Flink's JSON and CSV formats fail the job
on such a record, or with ``ignore-parse-errors`` drop it without a trace; sparkstate keeps it.)

The rules, the same for every text source:

* JSON: one object per line. Fields the schema does not name are ignored; a missing field is
  null, except a key column or the event-time column, without which the line is rejected.
* CSV: the schema's columns in order, comma-separated, no header line; an empty field is null.
* Types are strict: a string column takes a string, integer columns an integer in range,
  ``double``/``float`` any number, ``boolean`` true or false (CSV: ``true``/``false``),
  ``timestamp`` epoch milliseconds or ISO 8601 text (no offset means UTC), ``date`` ISO text;
  decimals and nested types take what Arrow accepts for them.
* Blank lines carry no record and are skipped; a trailing ``\\r`` is removed.
* Nothing in a line can stop the job: whatever fails while reading it (JSON nested too
  deeply, a number of thousands of digits even in an ignored field, a lone surrogate such as
  ``"\\ud800"``, a timestamp out of range, any other error) makes that line a dead letter.

Lines are read a block at a time by Arrow's JSON or CSV reader when the schema's columns are
all strings, integers, doubles, booleans or timestamps (:meth:`LineParser.parse_indexed`): a
block Arrow reads without complaint, with a value in every key and event-time column and
nothing the line-by-line rules treat differently, gives exactly the events the line-by-line
reading gives; any other block is read line by line. CSV fields are read as text and each
column is checked and converted as a whole: integers and numbers only in the plain forms that
Python's ``int``/``float`` read alike (no spaces, underscores, ``nan`` or ``inf``), timestamps as
epoch milliseconds or ``YYYY-MM-DD[T ]HH:MM[:SS[.ffffff]]`` with ``Z`` or ``+HH:MM`` or no offset.
The fast path is an optimisation only: its result (events, dead letters, raw lines) is always
identical to the line-by-line one.

This module does not import pyspark: the packing step runs it in Spark's Python workers, and
the unit tests run it without Spark.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
import reprlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, overload

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json

from sparkstate.api.schema import Schema
from sparkstate.api.time import epoch_micros
from sparkstate.errors import JobDefinitionError

FORMATS = ("json", "csv")

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60

_INT_BITS = {"tinyint": 8, "byte": 8, "smallint": 16, "short": 16, "int": 32, "integer": 32, "bigint": 64, "long": 64}
_FLOATS = ("double", "float", "real")
#: CSV epoch milliseconds: ASCII digits only (``str.isdigit`` also takes "²" and "٥")
_EPOCH_MS_TEXT = re.compile(r"-?[0-9]+")
#: the epoch milliseconds a Spark timestamp holds (0001-01-01 .. 9999-12-31, as ISO text does)
_MIN_TIMESTAMP_MS = -62_135_596_800_000
_MAX_TIMESTAMP_MS = 253_402_300_799_999
#: the characters of a too long line its dead letter keeps
_KEPT_OF_LONG_LINE = 1000
#: JSON text nested deeper than this is refused before decoding (Python's decoder would
#: hit its recursion limit, and the depth is of no use to any schema)
MAX_JSON_DEPTH = 200
#: blocks of fewer lines are read line by line (Arrow's reader costs more to set up)
FAST_MIN_LINES = 32
#: a block with a longer line is read line by line (Python refuses integers of more than
#: 4300 digits even in ignored fields; Arrow reads them)
_FAST_MAX_LINE = 4000
#: CSV text Python's ``int()`` and Arrow's cast read alike (Python also takes spaces, "_", "٥")
_PLAIN_INTEGER = r"^[+-]?[0-9]{1,19}$"
#: CSV text Python's ``float()`` and Arrow's cast read alike (both round correctly)
_PLAIN_NUMBER = r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?$"
#: CSV epoch milliseconds as the line-by-line reading takes them (at most 20 characters)
_PLAIN_EPOCH_MS = r"^-?[0-9]{1,19}$"
#: ISO 8601 text ``datetime.fromisoformat`` and Arrow's cast read alike; with an offset ...
_ISO_ZONED = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,6})?)?(?:Z|[+-][0-9]{2}:[0-9]{2})$"
#: ... and without one (UTC)
_ISO_NAIVE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,6})?)?$"


def _json_depth(line: str) -> int:
    """How deep JSON text nests arrays and objects (brackets inside strings not counted)."""
    depth = top = 0
    in_string = escaped = False
    for ch in line:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            top = max(top, depth)
        elif ch in "]}":
            depth -= 1
    return top


def _negative_zero(col: pa.Array) -> bool:
    """Whether a float column holds a -0.0."""
    zeros = pc.equal(col, 0.0)
    if not pc.any(zeros).as_py():
        return False
    import numpy as np

    return bool(np.signbit(col.filter(zeros).to_numpy(zero_copy_only=False)).any())


def _all_match(col: pa.Array, pattern: str) -> bool:
    """Whether every non-null text of ``col`` matches ``pattern`` (RE2, anchored by the caller)."""
    return bool(pc.all(pc.match_substring_regex(col, pattern)).as_py() is not False)


def _fits(value: str | None, pattern: str) -> bool:
    """Whether one value matches ``pattern`` (a column's first value: the form to try on all)."""
    return value is None or re.match(pattern, value) is not None


def _epoch_ms_times(col: pa.Array, own: pa.DataType) -> pa.Array | None:
    """Integer epoch milliseconds as timestamps of type ``own``; None when one is out of range."""
    bounds = pc.min_max(col)
    if bounds["min"].is_valid and not (
        _MIN_TIMESTAMP_MS <= bounds["min"].as_py() and bounds["max"].as_py() <= _MAX_TIMESTAMP_MS
    ):
        return None
    return pc.multiply(col, 1000).cast(pa.timestamp("us")).cast(own)


def _text_times(col: pa.Array, own: pa.DataType, epoch_text: bool) -> pa.Array | None:
    """Timestamp text (``epoch_text``: CSV, where digits are epoch milliseconds) as timestamps
    of type ``own``, as :func:`_timestamp` reads each value; None when one is not an event time."""
    first = next((v for v in col.drop_null()[:1].to_pylist()), None)
    try:
        if epoch_text and _fits(first, _PLAIN_EPOCH_MS) and _all_match(col, _PLAIN_EPOCH_MS):
            return _epoch_ms_times(col.cast(pa.int64()), own)
        for pattern, arrow_type in ((_ISO_ZONED, pa.timestamp("us", tz="UTC")), (_ISO_NAIVE, pa.timestamp("us"))):
            if _fits(first, pattern) and _all_match(col, pattern):
                times = col.cast(arrow_type)
                # years 1-9999 in UTC as well (an offset can move a time across either end)
                bounds = pc.min_max(times.cast(pa.int64()))
                if bounds["min"].is_valid and not (
                    _MIN_TIMESTAMP_MS * 1000 <= bounds["min"].as_py() and bounds["max"].as_py() < (_MAX_TIMESTAMP_MS + 1) * 1000
                ):
                    break
                return times.cast(own)
    except pa.ArrowException:  # a day or hour that does not exist: read value by value
        pass
    try:  # mixed forms: each value as the line-by-line reading takes it
        return pa.array([None if v is None else _timestamp(v, epoch_text) for v in col.to_pylist()], own)
    except Exception:  # noqa: BLE001 - the line-by-line reading says what is wrong
        return None


def _csv_column(col: pa.Array, own: pa.DataType) -> pa.Array | None:
    """A CSV column's text as values of type ``own``, as the line-by-line reading converts each
    value (:func:`_converter` with ``text``); None when some value must be read line by line."""
    try:
        if pa.types.is_string(own):
            return col
        if pa.types.is_boolean(own):
            lower = pc.ascii_lower(col)
            if not (pc.all(pc.string_is_ascii(col)).as_py() is not False and _all_match(lower, "^(?:true|false)$")):
                return None
            return pc.equal(lower, "true")
        if pa.types.is_integer(own):
            if not _all_match(col, _PLAIN_INTEGER):
                return None
            values = pc.replace_substring_regex(col, r"^\+", "").cast(pa.int64())  # Arrow refuses "+5"
            bounds = pc.min_max(values)
            top = 1 << (own.bit_width - 1)
            if bounds["min"].is_valid and not (-top <= bounds["min"].as_py() and bounds["max"].as_py() < top):
                return None
            return values.cast(own)
        if pa.types.is_float64(own):
            if not _all_match(col, _PLAIN_NUMBER):
                return None
            values = col.cast(pa.float64())
            return values if pc.all(pc.is_finite(values)).as_py() is not False else None
        if pa.types.is_timestamp(own):
            return _text_times(col, own, epoch_text=True)
    except pa.ArrowException:
        return None
    return None


class Rejected(Exception):
    """A value or line that is not what the schema asks for; the message is the reason."""


def _json_type(value: Any) -> str:
    """How JSON spells the type of a decoded value (for reasons the sender can act on)."""
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )


def _json_text(value: Any, limit: int = 60) -> str:
    """A decoded JSON value as the sender wrote it (shortened)."""
    text = json.dumps(value, ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: as the sender wrote it, escaped
            text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _timestamp(value: Any, text: bool) -> int:
    """Epoch microseconds (Spark's timestamps) from epoch ms or ISO 8601 text."""
    if text and _EPOCH_MS_TEXT.fullmatch(value):
        if len(value) > 20:
            raise Rejected("epoch milliseconds out of range (years 1-9999)")
        value = int(value)
    if type(value) is int:
        if not _MIN_TIMESTAMP_MS <= value <= _MAX_TIMESTAMP_MS:
            raise Rejected("epoch milliseconds out of range (years 1-9999); micro- or nanoseconds instead of ms?")
        return value * 1000
    if isinstance(value, str):
        try:
            micros = epoch_micros(dt.datetime.fromisoformat(value))
        except ValueError:
            raise Rejected("expected epoch milliseconds or ISO 8601 text") from None
        if not _MIN_TIMESTAMP_MS * 1000 <= micros < (_MAX_TIMESTAMP_MS + 1) * 1000:  # an offset moved it out
            raise Rejected("out of range in UTC (years 1-9999)")
        return micros
    raise Rejected("expected epoch milliseconds or ISO 8601 text")


def _converter(ddl_type: str, arrow: pa.DataType, text: bool) -> Callable[[Any], Any]:
    """A function that checks one value of a column (decoded JSON, or CSV text when ``text``)
    and returns it as Arrow takes it, raising :class:`Rejected` with what is wrong."""
    kind = ddl_type.strip().lower()
    if kind in ("string", "varchar", "char") or kind.startswith(("varchar(", "char(")):
        def string(v: Any) -> str:
            if type(v) is not str:
                raise Rejected("expected a string")
            if not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise Rejected(f"not valid Unicode: a lone surrogate at character {exc.start + 1}") from None
            return v
        return string
    if kind in _INT_BITS:
        top = 1 << (_INT_BITS[kind] - 1)

        def integer(v: Any) -> int:
            if text:
                if len(v) > 40:  # int() of thousands of digits is slow, then refused
                    raise Rejected("expected an integer")
                try:
                    v = int(v)
                except ValueError:
                    raise Rejected("expected an integer") from None
            elif type(v) is not int:
                raise Rejected("expected an integer")
            if not -top <= v < top:
                raise Rejected(f"out of range for {kind}")
            return v
        return integer
    if kind in _FLOATS:
        def number(v: Any) -> float:
            if text:
                try:
                    return float(v)
                except ValueError:
                    raise Rejected("expected a number") from None
            if type(v) not in (int, float):
                raise Rejected("expected a number")
            return float(v)
        return number
    if kind == "boolean":
        def boolean(v: Any) -> bool:
            if text and v.lower() in ("true", "false"):
                return v.lower() == "true"
            if type(v) is not bool:
                raise Rejected("expected true or false")
            return v
        return boolean
    if kind.startswith("timestamp"):
        return lambda v: _timestamp(v, text)
    if kind == "date":
        def date(v: Any) -> dt.date:
            try:
                return dt.date.fromisoformat(v)
            except (TypeError, ValueError):
                raise Rejected("expected an ISO 8601 date (YYYY-MM-DD)") from None
        return date

    def other(v: Any) -> Any:  # decimals, binary, arrays, maps, structs: as Arrow reads them
        if text and pa.types.is_nested(arrow):
            try:
                v = json.loads(v)
            except ValueError:
                raise Rejected("expected JSON text for a nested value") from None
        if pa.types.is_nested(arrow) and type(v) is not (list if pa.types.is_list(arrow) else dict):
            raise Rejected(f"expected a JSON {'array' if pa.types.is_list(arrow) else 'object'}")
        if kind.startswith("decimal") and type(v) in (int, float, str):
            import decimal

            try:
                v = decimal.Decimal(str(v))
            except decimal.InvalidOperation:
                raise Rejected("expected a decimal number") from None
        try:
            pa.array([v], type=arrow)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            raise Rejected(f"expected a {ddl_type}") from None
        return v
    return other


class LineParser:
    """Parses lines into events of ``schema`` (a DDL string) and dead letters (see module docs).

    ``key_columns`` and ``time_column`` must have a value: an event without its key cannot
    reach any key's state, and one without its event time cannot be placed against the
    watermark.

    Example::

        >>> parser = LineParser("k string, v double", key_columns=["k"])
        >>> events, dead = parser.parse(['{"k": "a", "v": 1}', '{"k": "a", "v": "x"}'])
        >>> events.to_pylist()
        [{'k': 'a', 'v': 1.0}]
        >>> dead[0]["raw"]
        '{"k": "a", "v": "x"}'
        >>> print(dead[0]["reason"])
        column 'v' (double): expected a number, got string "x"
    """

    def __init__(
        self, schema: str, format: str = "json", key_columns: Sequence[str] = (), time_column: str | None = None,
        max_line_length: int | None = None,
    ) -> None:
        #: a longer line is a dead letter (its start kept as the raw text)
        self.max_line_length = max_line_length
        if format not in FORMATS:
            raise JobDefinitionError(f"unknown text format {format!r}; use one of {', '.join(FORMATS)}")
        parsed = Schema.of(schema)
        self.schema = parsed.arrow
        self.format = format
        self.names = parsed.names
        for col in (*key_columns, *([time_column] if time_column else [])):
            if col not in parsed.names:
                raise JobDefinitionError(f"column {col!r} is not in the source's schema ({schema})")
        text = format == "csv"
        self._convert = [
            (name, ddl_type, _converter(ddl_type, field.type, text))
            for name, ddl_type, field in zip(parsed.names, parsed.types, self.schema)
        ]
        self._required = {c: "key column" for c in key_columns}
        if time_column:
            self._required.setdefault(time_column, "event-time column")
        #: how a block of JSON lines can be read at once (None: only line by line)
        self._fast = self._fast_plan()
        self._has_time = any(pa.types.is_timestamp(f.type) for f in self.schema)
        #: whether the last block read at once had its timestamps as ISO text
        self._times_as_text = False

    @overload
    def parse(self, lines: Iterable[str | None]) -> tuple[pa.RecordBatch, list[dict[str, str]]]: ...
    @overload
    def parse(
        self, lines: Iterable[str | None], with_raw: Literal[True]
    ) -> tuple[pa.RecordBatch, list[dict[str, str]], list[str]]: ...
    def parse(self, lines: Iterable[str | None], with_raw: bool = False) -> Any:
        """The lines that are events, as one Arrow batch of the schema (in line order), and a
        dead letter ``{"raw": line, "reason": ...}`` for each line that is not one; with
        ``with_raw`` also each event's line (for dead letters made later, such as an event
        time too far ahead). Never raises on a line's content."""
        batch, dead, raws, _ = self.parse_indexed(lines)
        return (batch, dead, raws) if with_raw else (batch, dead)

    def parse_indexed(self, lines: Iterable[str | None]) -> tuple[pa.RecordBatch, list[dict[str, str]], list[str], list[int]]:
        """As :meth:`parse` with ``with_raw``, and each event's index among ``lines`` (a
        source that adds columns of its own to an event, such as a Kafka record's offset,
        finds its record by it)."""
        lines = lines if isinstance(lines, list) else list(lines)
        if self._fast is not None and len(lines) >= FAST_MIN_LINES:
            done = self._parse_block(lines)
            if done is not None:
                return done
        return self._parse_each(lines)

    def _parse_each(self, lines: list[str | None]) -> tuple[pa.RecordBatch, list[dict[str, str]], list[str], list[int]]:
        """Line by line: the rules themselves (module docs)."""
        rows: list[list] = []
        raws: list[str] = []
        kept_at: list[int] = []
        dead: list[dict[str, str]] = []
        for at, line in enumerate(lines):
            if line is None:
                continue
            line = line.rstrip("\r\n")
            if not line.strip():
                continue  # a blank line is not a record
            if self.max_line_length is not None and len(line) > self.max_line_length:
                dead.append({
                    "raw": line[:_KEPT_OF_LONG_LINE] + "...",
                    "reason": f"line longer than {self.max_line_length} characters (the source's max_line_length)",
                })
                continue
            try:
                values = self.parse_line(line)
            except Rejected as exc:
                dead.append({"raw": line, "reason": str(exc)})
                continue
            except Exception as exc:  # noqa: BLE001 - no line may stop the job (module docs)
                dead.append({"raw": line, "reason": f"cannot read the line: {type(exc).__name__}: {_short.repr(str(exc))}"})
                continue
            rows.append(values)
            raws.append(line)
            kept_at.append(at)
        try:
            batch = self._batch(rows)
        except Exception:  # noqa: BLE001 - a value Arrow refuses after all: find its line
            kept = []
            for values, line, i in zip(rows, raws, kept_at):
                try:
                    self._batch([values])
                except Exception as exc:  # noqa: BLE001
                    dead.append({"raw": line, "reason": f"cannot store the line's values: {type(exc).__name__}: {exc}"})
                else:
                    kept.append((values, line, i))
            rows, raws, kept_at = [v for v, _, _ in kept], [line for _, line, _ in kept], [i for _, _, i in kept]
            batch = self._batch(rows)
        return batch, dead, raws, kept_at

    def _fast_plan(self) -> list[tuple[str, pa.DataType, pa.DataType]] | None:
        """Per column: its name, the type Arrow's JSON reader reads it as, and its own type;
        None when some column is of a type only the line-by-line reading handles exactly."""
        if self.max_line_length is not None:
            return None
        plan = []
        for f in self.schema:
            t = f.type
            if pa.types.is_string(t) or pa.types.is_boolean(t) or pa.types.is_float64(t):
                plan.append((f.name, t, t))
            elif pa.types.is_integer(t) and pa.types.is_signed_integer(t):
                plan.append((f.name, pa.int64(), t))  # range-checked here: Arrow would say less
            elif pa.types.is_timestamp(t) and t.unit == "us":
                plan.append((f.name, pa.int64(), t))  # epoch ms; ISO text on a second attempt
            else:
                return None
        return plan

    def _parse_block(self, lines: list[str | None]) -> tuple[pa.RecordBatch, list[dict[str, str]], list[str], list[int]] | None:
        """Every line at once with Arrow's JSON reader, or None when the block must be read
        line by line: something Arrow refuses or reads otherwise than :meth:`parse_line`, a
        null key or event time, a value out of range."""
        kept = [i for i, line in enumerate(lines) if line is not None and line.strip()]
        chosen = [lines[i] for i in kept]
        if not chosen:
            return None
        if max(map(len, chosen)) > _FAST_MAX_LINE:  # type: ignore[arg-type]
            return None
        text = "\n".join(chosen)  # type: ignore[arg-type]
        # a line break inside a value, a byte-order mark: read otherwise line by line
        if text.count("\n") != len(chosen) - 1 or "\r" in text or "\ufeff" in text:
            return None
        if self.format == "json" and text.count("[") + text.count("{") > len(chosen) and any(
            line.count("[") + line.count("{") > MAX_JSON_DEPTH for line in chosen  # type: ignore[union-attr]
        ):
            return None
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate
            return None
        batch = self._read_at_once(data, len(chosen))
        return None if batch is None else (batch, [], chosen, kept)  # type: ignore[return-value]

    def parse_values(self, values: list[bytes]) -> pa.RecordBatch | None:
        """Records' values (UTF-8 bytes, each one line, none empty: a Kafka topic's), all at
        once, when every one of them is an event; None when some value must be read as text
        line by line (the same checks as a block of lines, on the bytes, without making a
        string of each value first)."""
        if self._fast is None or len(values) < FAST_MIN_LINES or None in values or b"" in values:
            return None
        if max(map(len, values)) > _FAST_MAX_LINE:  # bytes: at least as many as characters
            return None
        data = b"\n".join(values)
        if self.format == "json" and data.count(b"[") + data.count(b"{") > len(values) and any(
            v.count(b"[") + v.count(b"{") > MAX_JSON_DEPTH for v in values
        ):
            return None
        return self._read_joined(data, len(values))

    def parse_column(self, lines: pa.Array) -> pa.RecordBatch | None:
        """Lines as Arrow holds them (a file's, read by Spark), all at once, when every one of
        them is an event; None when some line must be read as text line by line. The lines are
        joined in Arrow, never made Python strings: a blank line, a null, a long line or JSON
        that may nest too deeply send the block to :meth:`parse_indexed`."""
        n = len(lines)
        if self._fast is None or n < FAST_MIN_LINES or lines.null_count or not pa.types.is_string(lines.type):
            return None
        # Arrow's whitespace is Python's and more: a line Python finds blank is blank here
        if pc.any(pc.or_(pc.utf8_is_space(lines), pc.equal(lines, ""))).as_py():
            return None
        if pc.max(pc.binary_length(lines)).as_py() > _FAST_MAX_LINE:
            return None
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), lines), "\n")
        data = joined[0].as_buffer().to_pybytes()
        if self.format == "json" and data.count(b"[") + data.count(b"{") > n:
            brackets = pc.add(pc.count_substring(lines, "["), pc.count_substring(lines, "{"))
            if pc.max(brackets).as_py() > MAX_JSON_DEPTH:  # maybe nested too deeply: line by line
                return None
        return self._read_joined(data, n)

    def _read_joined(self, data: bytes, rows: int) -> pa.RecordBatch | None:
        """``rows`` records joined by line breaks, read at once (:meth:`_read_at_once`) unless
        one holds a line break, a ``\\r``, a byte-order mark or invalid UTF-8 (then None)."""
        if data.count(b"\n") != rows - 1 or b"\r" in data:
            return None
        if not data.isascii():
            try:  # a byte-order mark or invalid UTF-8 is read line by line (invalid bytes replaced)
                if "\ufeff" in data.decode("utf-8"):
                    return None
            except UnicodeDecodeError:
                return None
        return self._read_at_once(data, rows)

    def _read_at_once(self, data: bytes, rows: int) -> pa.RecordBatch | None:
        if self.format == "csv":
            columns = self._read_csv_block(data, rows)
            return None if columns is None else pa.RecordBatch.from_arrays(columns, schema=self.schema)
        for times_as_text in ((self._times_as_text, not self._times_as_text) if self._has_time else (False,)):
            columns = self._read_block(data, rows, times_as_text)
            if columns is not None:
                self._times_as_text = times_as_text
                return pa.RecordBatch.from_arrays(columns, schema=self.schema)
        return None

    def _read_block(self, data: bytes, rows: int, times_as_text: bool) -> list[pa.Array] | None:
        assert self._fast is not None
        fields = [
            (name, pa.string() if times_as_text and pa.types.is_timestamp(own) else read, own)
            for name, read, own in self._fast
        ]
        try:
            table = pa_json.read_json(
                io.BytesIO(data),
                read_options=pa_json.ReadOptions(use_threads=False, block_size=len(data) + 1),
                parse_options=pa_json.ParseOptions(
                    explicit_schema=pa.schema([(n, t) for n, t, _ in fields]), unexpected_field_behavior="ignore"),
            )
        except (pa.ArrowException, ValueError):
            return None
        if table.num_rows != rows:
            return None
        columns = []
        for name, read, own in fields:
            col = table.column(name).combine_chunks()
            if col.null_count and name in self._required:
                return None
            if pa.types.is_timestamp(own):
                col = self._block_times(col, own)
                if col is None:
                    return None
            elif pa.types.is_floating(own) and (pc.any(pc.invert(pc.is_finite(col))).as_py() or _negative_zero(col)):
                # Arrow reads a number too large for a double as infinity (Python refuses it),
                # and the integer -0 as -0.0 (Python: 0, so 0.0)
                return None
            elif pa.types.is_integer(own) and own != read:
                bounds = pc.min_max(col)
                top = 1 << (own.bit_width - 1)
                if bounds["min"].is_valid and not (-top <= bounds["min"].as_py() and bounds["max"].as_py() < top):
                    return None
                col = col.cast(own)
            columns.append(col)
        return columns

    def _read_csv_block(self, data: bytes, rows: int) -> list[pa.Array] | None:
        """A block of CSV lines: every field as text (Arrow splits quoted fields as Python's
        ``csv`` module does), then each column checked and converted whole."""
        assert self._fast is not None
        if b"\x00" in data:  # Python's csv module refuses a NUL
            return None
        names = [name for name, _, _ in self._fast]
        try:
            table = pa_csv.read_csv(
                io.BytesIO(data),
                read_options=pa_csv.ReadOptions(column_names=names, use_threads=False, block_size=len(data) + 1),
                convert_options=pa_csv.ConvertOptions(
                    column_types={n: pa.string() for n in names}, null_values=[""], strings_can_be_null=True,
                    quoted_strings_can_be_null=True),
            )
        except (pa.ArrowException, ValueError):
            return None
        if table.num_rows != rows:
            return None
        # quotes only around whole fields, none inside one: the text is the fields, their
        # quotes, the commas and the line breaks, byte for byte (else read line by line)
        text_bytes = sum(pc.sum(pc.binary_length(c)).as_py() or 0 for c in table.columns)
        if text_bytes + data.count(b'"') + rows * len(names) - 1 != len(data):
            return None
        columns = []
        for (name, _, own), col in zip(self._fast, table.columns):
            col = col.combine_chunks()
            if col.null_count and name in self._required:
                return None
            col = _csv_column(col, own)
            if col is None:
                return None
            columns.append(col)
        return columns

    @staticmethod
    def _block_times(col: pa.Array, own: pa.DataType) -> pa.Array | None:
        if pa.types.is_string(col.type):  # ISO text, as the line-by-line reading takes it
            return _text_times(col, own, epoch_text=False)
        return _epoch_ms_times(col, own)

    def _batch(self, rows: list[list]) -> pa.RecordBatch:
        columns = list(zip(*rows)) if rows else [() for _ in self.schema]
        arrays = [pa.array(list(col), type=field.type) for col, field in zip(columns, self.schema)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def parse_line(self, line: str) -> list:
        """One line's values in schema order; raises :class:`Rejected` with the reason."""
        raw = self._fields_json(line) if self.format == "json" else self._fields_csv(line)
        values: list[Any] = []
        for name, ddl_type, convert in self._convert:
            value = raw.get(name)
            if value is None or (self.format == "csv" and value == ""):
                role = self._required.get(name)
                if role is not None:
                    what = "is missing" if name not in raw else ("is empty" if self.format == "csv" else "is null")
                    raise Rejected(f"{role} {name!r} {what}")
                values.append(None)
                continue
            try:
                values.append(convert(value))
            except Rejected as exc:
                got = _short.repr(value) if self.format == "csv" else f"{_json_type(value)} {_json_text(value)}"
                raise Rejected(f"column {name!r} ({ddl_type}): {exc}, got {got}") from None
        return values

    def _fields_json(self, line: str) -> dict:
        if line.count("[") + line.count("{") > MAX_JSON_DEPTH and _json_depth(line) > MAX_JSON_DEPTH:
            raise Rejected(f"not valid JSON here: nested deeper than {MAX_JSON_DEPTH} levels")
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            where = "the end of the line" if exc.pos >= len(line) else f"character {exc.pos + 1}"
            raise Rejected(f"not valid JSON: {exc.msg} at {where}") from None
        except RecursionError:
            raise Rejected("not valid JSON here: nested too deeply") from None
        except ValueError as exc:  # e.g. an integer of more than 4300 digits, even in an ignored field
            raise Rejected(f"not valid JSON here: {exc}") from None
        if not isinstance(value, dict):
            raise Rejected(f"expected a JSON object, got {_json_type(value)}")
        return value

    def _fields_csv(self, line: str) -> dict:
        try:
            fields = next(csv.reader([line]))
        except csv.Error as exc:
            raise Rejected(f"not valid CSV: {exc}") from None
        if len(fields) != len(self.names):
            raise Rejected(
                f"expected {len(self.names)} comma-separated fields ({', '.join(self.names)}), got {len(fields)}"
            )
        return dict(zip(self.names, fields))
