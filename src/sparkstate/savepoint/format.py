"""The savepoint format (version 1): a job's keyed state, timers, watermark and source offsets
at one committed micro-batch, in files that do not depend on Spark's state store.

A savepoint is a directory::

    _savepoint.json          what the savepoint holds (see docs/savepoints.md): the job, its
                             state descriptors, key columns and key groups, the batch, the
                             watermark, the source offsets, versions, and a SHA-256 per file
    state/kg-00042.parquet   one file per key group that holds state: one row per record

A *record* is what a key group keeps per key (or, for window jobs, per window):
``{state name: value, TIMERS_FIELD: {(domain, ts)}, HELD_FIELD: watermark}``. A file's
columns are:

* ``__key`` (binary): the record's key, pickled (exact, whatever its type);
  ``__key_text`` (string): the same key as JSON text, for people and for lookups;
* one column per state name (null where the record has no value). A column whose values are
  all ``int`` (in int64), ``float``, ``str``, ``bool`` or ``bytes`` is stored as that Arrow
  type, so any Parquet reader can read it; any other column holds pickled values. The field's
  metadata says which (``encoding``: ``arrow`` or ``pickle``);
* ``__timers`` (list of ``{domain, timestamp}``) and ``__held`` (int64, null when absent).

Invariants: a file holds the records of exactly one key group; a record appears in one file
only; a state name is a column in every file of the savepoint, whatever its encoding there.
Everything here is plain Python and pyarrow: reading a savepoint needs no Spark.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sparkstate.api.state import HELD_FIELD, TIMERS_FIELD, Record
from sparkstate.engine.keygroups import dumps_state

FORMAT_VERSION = 1
METADATA_FILE = "_savepoint.json"
STATE_DIR = "state"
KEY_COLUMN = "__key"
KEY_TEXT_COLUMN = "__key_text"
TIMERS_COLUMN = "__timers"
HELD_COLUMN = "__held"
RESERVED_COLUMNS = (KEY_COLUMN, KEY_TEXT_COLUMN, TIMERS_COLUMN, HELD_COLUMN)
ENCODING = b"encoding"
PICKLE_PROTOCOL = 5
TIMER_TYPE = pa.list_(pa.struct([("domain", pa.int8()), ("timestamp", pa.int64())]))

_INT64 = (-(2**63), 2**63 - 1)
_ARROW_TYPES: dict[type, pa.DataType] = {
    float: pa.float64(), str: pa.string(), bool: pa.bool_(), bytes: pa.binary(), int: pa.int64(),
}


def group_file(key_group: int) -> str:
    """The path of a key group's file, relative to the savepoint directory."""
    return f"{STATE_DIR}/kg-{key_group:05d}.parquet"


def key_text(key: Any) -> str:
    """A record key as JSON text (``"m000042"``, ``7``, ``["a", 1]``); other types by ``repr``."""
    if type(key) is str:
        return _encode_str(key)  # what the encoder does for a str, without its set-up per call
    try:
        return _JSON.encode(key)
    except (TypeError, ValueError):
        return repr(key)


#: ``json.dumps(key, ensure_ascii=False)`` builds an encoder per call; one shared is the same
_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=True)
_encode_str = json.encoder.encode_basestring  # type: ignore[attr-defined]


def dumps(value: Any) -> bytes:
    """A key or value pickled; a class defined in ``__main__`` (a script's) goes by value
    through cloudpickle, as in the state store (``engine/keygroups.py``), so the savepoint
    can be read where that script is not the main module (Spark's executors). Plain pickle
    would refer to such a class by name when the process that takes the savepoint defined it.
    """
    data = dumps_state(value)
    if b"__main__" in data:
        import cloudpickle

        data = cloudpickle.dumps(value, protocol=PICKLE_PROTOCOL)
    return data


def _state_column(values: list[Any]) -> tuple[pa.Array, str]:
    """A state's column: typed Arrow when every present value is of one simple type, else
    pickled values (``None`` in ``values`` is an absent value)."""
    present = [v for v in values if v is not None]
    kinds = {type(v) for v in present}
    if len(kinds) == 1:
        (kind,) = kinds
        arrow = _ARROW_TYPES.get(kind)
        if arrow is not None and (kind is not int or all(_INT64[0] <= v <= _INT64[1] for v in present)):
            return pa.array(values, arrow), "arrow"
    blobs = [None if v is None else dumps(None if v is _PRESENT_NONE else v) for v in values]
    return pa.array(blobs, pa.binary()), "pickle"


class _PresentNone:
    """Stands for a state whose stored value is ``None`` while a table is built (a typed
    column could not tell it from an absent value, so such a column is pickled)."""


_PRESENT_NONE = _PresentNone()
_ABSENT = object()


def records_to_table(records: Sequence[tuple[Any, Record]], states: Sequence[str]) -> pa.Table:
    """One key group's records as a table of the format above; fields of a record that are
    not in ``states`` (a state no longer declared) are left out."""
    # column by column: a savepoint of millions of keys spends its time here
    keys = [key for key, _ in records]
    recs = [rec for _, rec in records]
    fields, arrays = [], []
    for name in states:
        cells = [None if (v := rec.get(name, _ABSENT)) is _ABSENT else (_PRESENT_NONE if v is None else v)
                 for rec in recs]
        array, encoding = _state_column(cells)
        fields.append(pa.field(name, array.type, metadata={ENCODING: encoding.encode()}))
        arrays.append(array)
    # an empty timer set is kept as an empty list (not null): the round trip is exact
    timers = [None if (t := rec.get(TIMERS_FIELD)) is None else [{"domain": d, "timestamp": ts} for d, ts in sorted(t)]
              for rec in recs]
    schema = pa.schema([
        pa.field(KEY_COLUMN, pa.binary()), pa.field(KEY_TEXT_COLUMN, pa.string()), *fields,
        pa.field(TIMERS_COLUMN, TIMER_TYPE), pa.field(HELD_COLUMN, pa.int64()),
    ])
    return pa.Table.from_arrays(
        [pa.array([dumps(key) for key in keys], pa.binary()),
         pa.array([key_text(key) for key in keys], pa.string()), *arrays,
         pa.array(timers, TIMER_TYPE), pa.array([rec.get(HELD_FIELD) for rec in recs], pa.int64())],
        schema=schema,
    )


def state_names(table: pa.Table) -> list[str]:
    """The state columns of a key group's table."""
    return [n for n in table.column_names if n not in RESERVED_COLUMNS]


def decode_state_column(table: pa.Table, name: str) -> list[Any]:
    """The values of state ``name`` in the table's row order (``MISSING`` where absent)."""
    field = table.schema.field(name)
    values = table.column(name).to_pylist()
    if (field.metadata or {}).get(ENCODING) == b"pickle":
        return [MISSING if v is None else pickle.loads(v) for v in values]
    return [MISSING if v is None else v for v in values]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: where a record holds no value of a state
MISSING: Any = _Missing()


def table_to_records(table: pa.Table) -> list[tuple[Any, Record]]:
    """A key group's table back to ``(key, record)`` pairs."""
    keys = list(map(pickle.loads, table.column(KEY_COLUMN).to_pylist()))
    records: list[Record] = [{} for _ in keys]
    for name in state_names(table):
        column = table.column(name)
        if column.null_count == 0 and (table.schema.field(name).metadata or {}).get(ENCODING) != b"pickle":
            for rec, value in zip(records, column.to_pylist()):  # every record holds it: no checks
                rec[name] = value
            continue
        for rec, value in zip(records, decode_state_column(table, name)):
            if value is not MISSING:
                rec[name] = value
    timers = table.column(TIMERS_COLUMN)
    if timers.null_count < len(timers):
        for rec, ts in zip(records, timers.to_pylist()):
            if ts is not None:
                rec[TIMERS_FIELD] = {(t["domain"], t["timestamp"]) for t in ts}
    held = table.column(HELD_COLUMN)
    if held.null_count < len(held):
        for rec, h in zip(records, held.to_pylist()):
            if h is not None:
                rec[HELD_FIELD] = h
    return list(zip(keys, records))


def table_bytes(table: pa.Table) -> bytes:
    """A key group's table as Parquet bytes."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", compression_level=1)
    return bytes(sink.getvalue().to_pybytes())


def read_table(data: bytes) -> pa.Table:
    return pq.read_table(pa.BufferReader(data))
