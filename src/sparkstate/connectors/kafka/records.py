"""Output rows as Kafka records: each row a JSON object as the record's value, and its key.

Kept apart from the sink's transaction protocol (``protocol.py``) because it is the sink's hot
loop: every row of every micro-batch passes through :func:`encode`.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from sparkstate.connectors.database.arrow import json_default, json_ready


def encode(data: pa.Table, key: tuple[str, ...]) -> tuple[list[bytes], list[bytes | None], list[dict]]:
    """Each row as a JSON record value, its key, and the rows that cannot be records (NaN or
    infinity, which JSON has not) as dead letters ``{"raw", "reason"}``; their value is None."""
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
