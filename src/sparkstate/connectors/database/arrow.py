"""Arrow values as the databases store them: nested values as JSON text, instants as UTC
wall-clock time. Shared by the dialects (loading rows) and the protocol (a batch's rows)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa


def is_nested(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) or pa.types.is_map(t) or pa.types.is_list(t) or pa.types.is_large_list(t)


def json_ready(t: pa.DataType) -> Callable[[Any], Any] | None:
    """What turns Arrow's Python value of type ``t`` into JSON-ready values (maps as dicts,
    at any depth), or None when ``to_pylist`` already gives them. Arrow's own
    ``maps_as_pydicts`` is about four times slower than converting the pairs here."""
    if pa.types.is_map(t):
        item = json_ready(t.item_type)
        if item is None:
            return dict
        return lambda v: {k: None if x is None else item(x) for k, x in v}
    if pa.types.is_struct(t):
        fields = [(t.field(i).name, json_ready(t.field(i).type)) for i in range(t.num_fields)]
        if all(f is None for _, f in fields):
            return None
        return lambda v: {n: v[n] if f is None or v[n] is None else f(v[n]) for n, f in fields}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = json_ready(t.value_type)
        if inner is None:
            return None
        return lambda v: [None if x is None else inner(x) for x in v]
    return None


def utc_wall_clock(column: Any) -> Any:
    """A timestamp column with a time zone as the same instants without one (UTC wall-clock
    time): Arrow formats those about 20 times faster, and the stored values are UTC anyway."""
    t = column.type
    return column.cast(pa.timestamp(t.unit)) if pa.types.is_timestamp(t) and t.tz else column


def json_default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)  # Decimal and anything else exact as text


def nested_as_json(data: pa.Table, refused: dict[int, str] | None = None) -> pa.Table:
    """``data`` with its nested columns (structs, maps, lists) as JSON text.

    JSON has no NaN or infinity: a value holding one is refused (its row's index goes into
    ``refused`` with the reason, and its cell is left null) rather than written as text that
    no JSON reader accepts.
    """
    for i, f in enumerate(data.schema):
        if is_nested(f.type):
            values = data.column(i).to_pylist()
            ready = json_ready(f.type)
            if ready is not None:
                values = [None if v is None else ready(v) for v in values]
            # one encoder, not one a value
            encode = json.JSONEncoder(default=json_default, ensure_ascii=False, allow_nan=False).encode
            texts = []
            for row, v in enumerate(values):
                try:
                    texts.append(None if v is None else encode(v))
                except ValueError:  # NaN or infinity
                    texts.append(None)
                    if refused is not None:
                        refused.setdefault(row, f"column {f.name} holds NaN or infinity, which JSON cannot represent")
            data = data.set_column(i, f.name, pa.array(texts, pa.string()))
    return data
