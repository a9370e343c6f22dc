"""Output rows as Kafka records: each row a JSON object as the record's value, and its key.

Kept apart from the sink's transaction protocol (``protocol.py``) because it is the sink's hot
loop: every row of every micro-batch passes through :func:`encode`. A table whose columns are
all strings, integers, finite floats, booleans, timestamps, dates or nulls is encoded a column
at a time (Arrow's string kernels join each row's JSON text); any other table (nested values,
decimals, binary, a NaN or infinity that makes a row a dead letter) row by row with Python's
JSON encoder. Both give the same bytes: the column-wise encoder writes each value as that
encoder does (``float.__repr__``, ``isoformat``, the same string escapes).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparkstate.connectors.database.arrow import json_default, json_ready

#: a string value that JSON must escape (the rest is written as it is: ``ensure_ascii=False``)
_NEEDS_ESCAPE = r'["\\\x00-\x1f]'


def encode(data: pa.Table, key: tuple[str, ...]) -> tuple[list[bytes], list[bytes | None], list[dict]]:
    """Each row as a JSON record value, its key, and the rows that cannot be records (NaN or
    infinity, which JSON has not) as dead letters ``{"raw", "reason"}``; their value is None."""
    fast = _encode_columns(data, key)
    if fast is not None:
        return fast
    return _encode_rows(data, key)


def _fragment(column: pa.ChunkedArray) -> pa.Array | None:
    """Each value of ``column`` as JSON text (nulls ``null``), or None when the type is one
    only the row-by-row encoder writes (or a value is NaN or infinity)."""
    col = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    t = col.type
    if pa.types.is_null(t):
        return pa.array(["null"] * len(col), pa.string())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        col = col.cast(pa.string())
        if pc.any(pc.match_substring_regex(col, _NEEDS_ESCAPE)).as_py():
            text = pa.array([None if v is None else encode_basestring(v) for v in col.to_pylist()], pa.string())
        else:
            text = pc.binary_join_element_wise('"', col, '"', "")
    elif pa.types.is_integer(t):
        text = col.cast(pa.string())
    elif pa.types.is_boolean(t):
        text = pc.if_else(col, "true", "false")
    elif pa.types.is_floating(t) and not pa.types.is_float16(t):
        if pc.any(pc.invert(pc.is_finite(col))).as_py():
            return None  # a dead letter: the row-by-row encoder says which and why
        text = pa.array([None if v is None else v.__repr__() for v in col.to_pylist()], pa.string())
    elif (pa.types.is_timestamp(t) and t.unit != "ns") or pa.types.is_date(t):
        text = pa.array([None if v is None else '"' + v.isoformat() + '"' for v in col.to_pylist()], pa.string())
    else:
        return None
    return pc.fill_null(text, "null")


def _objects(data: pa.Table, names: list[str]) -> pa.Array | None:
    """Each row of columns ``names`` as a JSON object's text, or None (see :func:`_fragment`)."""
    parts: list[Any] = []
    for i, name in enumerate(names):
        text = _fragment(data.column(name))
        if text is None:
            return None
        parts += [("{" if i == 0 else ",") + encode_basestring(name) + ":", text]
    parts.append("}")
    if len(names) == 0:
        return pa.array(["{}"] * data.num_rows, pa.string())
    return pc.binary_join_element_wise(*parts, "")


def _encode_columns(data: pa.Table, key: tuple[str, ...]) -> tuple[list[bytes], list[bytes | None], list[dict]] | None:
    names = data.column_names
    if len(set(names)) != len(names) or data.num_rows == 0:
        return None
    values = _objects(data, names)
    if values is None:
        return None
    keys: list[bytes | None]
    if not key:
        keys = [None] * data.num_rows
    elif len(key) == 1:
        col = data.column(key[0])
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type) or pa.types.is_integer(col.type):
            keys = col.cast(pa.string()).cast(pa.binary()).to_pylist()
        elif any(is_(col.type) for is_ in (pa.types.is_floating, pa.types.is_boolean, pa.types.is_timestamp,
                                           pa.types.is_date, pa.types.is_null)):
            keys = [_key_bytes(v) for v in col.to_pylist()]
        else:
            return None
    else:
        objects = _objects(data, list(key))
        if objects is None:
            return None
        keys = objects.cast(pa.binary()).to_pylist()
    return values.cast(pa.binary()).to_pylist(), keys, []


def _encode_rows(data: pa.Table, key: tuple[str, ...]) -> tuple[list[bytes], list[bytes | None], list[dict]]:
    """Row by row with Python's JSON encoder (any column type; dead letters for NaN and infinity)."""
    columns = {name: data.column(name).to_pylist() for name in data.column_names}
    for name in data.column_names:
        ready = json_ready(data.schema.field(name).type)
        if ready is not None:
            columns[name] = [None if v is None else ready(v) for v in columns[name]]
    names = data.column_names
    values: list[bytes] = []
    keys: list[bytes | None] = []
    dead: list[dict] = []
    dumps = json.JSONEncoder(default=json_default, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
    for i, row in enumerate(zip(*(columns[n] for n in names))):
        record = dict(zip(names, row))
        try:
            values.append(dumps(record).encode("utf-8", "backslashreplace"))
        except ValueError as exc:
            lenient = json.dumps(record, default=json_default, ensure_ascii=False)
            dead.append({"raw": lenient, "reason": f"row {i} cannot be a JSON record: {exc}"})
            values.append(b"")
            keys.append(None)
            continue
        if not key:
            keys.append(None)
        elif len(key) == 1:
            keys.append(_key_bytes(record[key[0]]))
        else:
            keys.append(dumps({c: record[c] for c in key}).encode("utf-8", "backslashreplace"))
    return values, keys, dead


def _key_bytes(value: Any) -> bytes | None:
    """One key column's value as a record key: its text (an instant in ISO 8601)."""
    if value is None or isinstance(value, bytes):
        return value
    return (value.isoformat() if hasattr(value, "isoformat") else str(value)).encode("utf-8", "backslashreplace")
