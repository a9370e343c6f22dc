"""Output schemas without pyspark: a DDL string, a dataclass, or a pyspark ``StructType``.

Only names and DDL type strings are needed here (to turn emitted rows into columns); the
Spark runtime turns the DDL into a real ``StructType``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import types
import typing
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparkstate.errors import JobDefinitionError, OutputSchemaError

_PY_TO_DDL = {
    str: "string",
    int: "bigint",
    float: "double",
    bool: "boolean",
    bytes: "binary",
    _dt.datetime: "timestamp",
    _dt.date: "date",
}


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


_SIMPLE_ARROW = {
    "string": pa.string(),
    "varchar": pa.string(),
    "char": pa.string(),
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "real": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ltz": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}


def arrow_type(ddl_type: str) -> pa.DataType:
    """The Arrow type Spark uses for a DDL type (``bigint``, ``map<string,double>``, ``decimal(10,2)``...)."""
    t = ddl_type.strip()
    low = t.lower()
    if low.split("(")[0] in ("varchar", "char"):
        return pa.string()
    if low in _SIMPLE_ARROW:
        return _SIMPLE_ARROW[low]
    if low.startswith("decimal"):
        p, _, sc = low[low.index("(") + 1 : low.rindex(")")].partition(",") if "(" in low else ("10", "", "0")
        return pa.decimal128(int(p), int(sc or 0))
    if low.startswith("array<") and low.endswith(">"):
        return pa.list_(arrow_type(t[6:-1]))
    if low.startswith("map<") and low.endswith(">"):
        k, v = _split_top_level(t[4:-1])
        return pa.map_(arrow_type(k), arrow_type(v))
    if low.startswith("struct<") and low.endswith(">"):
        fields = []
        for part in _split_top_level(t[7:-1]):
            name, _, rest = part.partition(":")
            fields.append(pa.field(name.strip().strip("`"), arrow_type(rest)))
        return pa.struct(fields)
    raise JobDefinitionError(f"unsupported type {ddl_type!r} in a schema")


@dataclass(frozen=True)
class Schema:
    """Column names and DDL types of a function's output rows."""

    names: tuple[str, ...]
    types: tuple[str, ...]

    @property
    def ddl(self) -> str:
        return ", ".join(f"`{n}` {t}" for n, t in zip(self.names, self.types))

    @property
    def arrow(self) -> pa.Schema:
        """The Arrow schema Spark uses for rows of this schema."""
        return pa.schema([pa.field(n, arrow_type(t)) for n, t in zip(self.names, self.types)])

    @property
    def timestamp_columns(self) -> tuple[str, ...]:
        return tuple(n for n, t in zip(self.names, self.types) if t.lower().startswith("timestamp"))

    @staticmethod
    def of(spec: Any) -> Schema:
        """Build from a DDL string (``"merchant_id string, total double"``), a dataclass or a StructType."""
        if isinstance(spec, Schema):
            return spec
        if isinstance(spec, str):
            return Schema._from_ddl(spec)
        if isinstance(spec, type) and dataclasses.is_dataclass(spec):
            return Schema._from_dataclass(spec)
        fields = getattr(spec, "fields", None)
        if fields is not None and all(hasattr(f, "name") and hasattr(f, "dataType") for f in fields):
            return Schema(
                tuple(f.name for f in fields), tuple(f.dataType.simpleString() for f in fields)
            )
        raise JobDefinitionError(
            f"output_schema must be a DDL string, a dataclass or a pyspark StructType, got {spec!r}"
        )

    @staticmethod
    def _from_ddl(ddl: str) -> Schema:
        names, types = [], []
        for part in _split_top_level(ddl):
            if part.startswith("`"):
                end = part.find("`", 1)
                name, rest = part[1:end], part[end + 1 :]
            else:
                name, _, rest = part.partition(" ")
            rest = rest.strip()
            if rest.startswith(":"):
                rest = rest[1:].strip()
            if not name or not rest:
                raise JobDefinitionError(f"cannot read output schema field {part!r} in {ddl!r}; expected 'name type'")
            names.append(name)
            types.append(rest)
        if not names:
            raise JobDefinitionError(f"output schema {ddl!r} has no fields")
        if len(set(names)) != len(names):
            raise JobDefinitionError(f"output schema {ddl!r} repeats a field name")
        return Schema(tuple(names), tuple(types))

    @staticmethod
    def _from_dataclass(cls: type) -> Schema:
        hints = typing.get_type_hints(cls)
        names, ddl_types = [], []
        for f in dataclasses.fields(cls):
            tp = hints.get(f.name, f.type)
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
                tp = args[0]
            ddl = _PY_TO_DDL.get(tp)
            if ddl is None:
                raise JobDefinitionError(
                    f"output dataclass {cls.__name__}.{f.name}: no Spark type for {tp!r}; "
                    f"use one of {sorted(t.__name__ for t in _PY_TO_DDL)} or a DDL string schema"
                )
            names.append(f.name)
            ddl_types.append(ddl)
        return Schema(tuple(names), tuple(ddl_types))

    def row_to_dict(self, row: Any) -> dict[str, Any]:
        """One emitted row (dict, tuple or dataclass instance) as a dict of this schema's fields."""
        names = self.names
        if isinstance(row, dict):
            try:
                return {n: row[n] for n in names}
            except KeyError as exc:
                raise OutputSchemaError(
                    f"output row {row!r} has no field {exc.args[0]!r}; the output schema is ({self.ddl})"
                ) from None
        if isinstance(row, (tuple, list)):
            if len(row) != len(names):
                raise OutputSchemaError(
                    f"output row {row!r} has {len(row)} values; the output schema ({self.ddl}) has {len(names)}"
                )
            return dict(zip(names, row))
        if dataclasses.is_dataclass(row) and not isinstance(row, type):
            return {n: getattr(row, n) for n in names}
        raise OutputSchemaError(
            f"output rows must be dicts, tuples or dataclass instances, got {type(row).__name__} {row!r}"
        )

    def columns(self, rows: list[Any]) -> dict[str, list[Any]]:
        """Rows turned into one list per field (fast paths for all-dict and all-tuple rows)."""
        names = self.names
        if not rows:
            return {n: [] for n in names}
        first = rows[0]
        try:
            if type(first) is dict:
                return {n: [r[n] for r in rows] for n in names}
            if type(first) is tuple and len(first) == len(names):
                if set(map(len, rows)) == {len(names)}:  # zip would cut longer rows silently
                    return {n: list(c) for n, c in zip(names, zip(*rows))}
        except (KeyError, TypeError, IndexError):
            pass  # mixed or malformed rows: the slow path names the bad one
        dicts = [self.row_to_dict(r) for r in rows]
        return {n: [d[n] for d in dicts] for n in names}
