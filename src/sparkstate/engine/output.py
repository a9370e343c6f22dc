"""Output rows to Arrow and back, the same way in the harness and on Spark.

A function's rows (dicts, tuples or dataclass instances) become Arrow columns of the job's
output schema; a value that does not fit its column fails here, naming the column, the row and
the value. Reading back, timestamps become epoch milliseconds and maps become dicts, so the
harness and Spark's in-memory sink return identical rows.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sparkstate.api.schema import Schema
from sparkstate.engine.events import has_map
from sparkstate.errors import OutputSchemaError


def _column(values: list[Any], target: pa.DataType) -> pa.Array:
    if pa.types.is_timestamp(target):
        sample = next((v for v in values if v is not None), None)
        if isinstance(sample, int) and not isinstance(sample, bool):  # epoch ms, the API's convention
            return pa.array(values, pa.int64()).cast(pa.timestamp("ms", tz=target.tz)).cast(target)
    return pa.array(values, type=target)


def _culprit(values: list[Any], target: pa.DataType) -> tuple[int, Any]:
    """The first value that does not fit alone, or else the first of another type than the first."""
    first = next((type(v) for v in values if v is not None), None)
    odd = None
    for i, v in enumerate(values):
        if v is None:
            continue
        try:
            _column([v], target)
        except Exception:
            return i, v
        if odd is None and type(v) is not first:
            odd = (i, v)
    return odd or (0, values[0] if values else None)


def arrow_table(rows: list[Any], schema: Schema, arrow: pa.Schema) -> pa.Table:
    """Rows as an Arrow table of ``arrow`` (the output schema's Arrow form)."""
    cols = schema.columns(rows)
    arrays = []
    for field in arrow:
        values = cols[field.name]
        try:
            arrays.append(_column(values, field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as exc:
            i, bad = _culprit(values, field.type)
            raise OutputSchemaError(
                f"output column {field.name!r} is {schema.types[schema.names.index(field.name)]} "
                f"but row {i} has {type(bad).__name__} {bad!r} ({exc})"
            ) from None
    return pa.Table.from_arrays(arrays, schema=arrow)


def python_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Arrow rows as dicts, with timestamps as epoch milliseconds and maps as dicts."""
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type):
            ms = table.column(i).cast(pa.timestamp("ms", tz=f.type.tz), safe=False).cast(pa.int64())
            table = table.set_column(i, f.name, ms)
    rows: list[dict[str, Any]] = (
        table.to_pylist(maps_as_pydicts="strict") if any(has_map(f.type) for f in table.schema) else table.to_pylist()
    )
    return rows
