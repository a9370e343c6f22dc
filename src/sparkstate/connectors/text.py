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

This module does not import pyspark: the packing step runs it in Spark's Python workers, and
the unit tests run it without Spark.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import reprlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa

from sparkstate.api.schema import Schema
from sparkstate.api.time import epoch_micros
from sparkstate.errors import JobDefinitionError

FORMATS = ("json", "csv")

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60

_INT_BITS = {"tinyint": 8, "byte": 8, "smallint": 16, "short": 16, "int": 32, "integer": 32, "bigint": 64, "long": 64}
_FLOATS = ("double", "float", "real")


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
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _timestamp(value: Any, text: bool) -> int:
    """Epoch microseconds (Spark's timestamps) from epoch ms or ISO 8601 text."""
    if text and value.lstrip("-").isdigit():
        value = int(value)
    if type(value) is int:
        return value * 1000
    if isinstance(value, str):
        try:
            return epoch_micros(dt.datetime.fromisoformat(value))
        except ValueError:
            raise Rejected("expected epoch milliseconds or ISO 8601 text") from None
    raise Rejected("expected epoch milliseconds or ISO 8601 text")


def _converter(ddl_type: str, arrow: pa.DataType, text: bool) -> Callable[[Any], Any]:
    """A function that checks one value of a column (decoded JSON, or CSV text when ``text``)
    and returns it as Arrow takes it, raising :class:`Rejected` with what is wrong."""
    kind = ddl_type.strip().lower()
    if kind in ("string", "varchar", "char") or kind.startswith(("varchar(", "char(")):
        def string(v: Any) -> str:
            if type(v) is not str:
                raise Rejected("expected a string")
            return v
        return string
    if kind in _INT_BITS:
        top = 1 << (_INT_BITS[kind] - 1)

        def integer(v: Any) -> int:
            if text:
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
        self, schema: str, format: str = "json", key_columns: Sequence[str] = (), time_column: str | None = None
    ) -> None:
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

    def parse(self, lines: Iterable[str | None]) -> tuple[pa.RecordBatch, list[dict[str, str]]]:
        """The lines that are events, as one Arrow batch of the schema (in line order), and a
        dead letter ``{"raw": line, "reason": ...}`` for each line that is not one."""
        columns: list[list] = [[] for _ in self._convert]
        dead: list[dict[str, str]] = []
        for line in lines:
            if line is None:
                continue
            line = line.rstrip("\r\n")
            if not line.strip():
                continue  # a blank line is not a record
            try:
                values = self.parse_line(line)
            except Rejected as exc:
                dead.append({"raw": line, "reason": str(exc)})
                continue
            for col, value in zip(columns, values):
                col.append(value)
        arrays = [pa.array(col, type=field.type) for col, field in zip(columns, self.schema)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema), dead

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
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            where = "the end of the line" if exc.pos >= len(line) else f"character {exc.pos + 1}"
            raise Rejected(f"not valid JSON: {exc.msg} at {where}") from None
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
