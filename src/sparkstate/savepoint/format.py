"""The savepoint format (version 2): a job's keyed state, timers, watermark and source offsets
at one committed micro-batch, in files that do not depend on Spark's state store.

A savepoint is a directory::

    _savepoint.json          what the savepoint holds (see docs/guides/savepoints.md): the job, its
                             state descriptors, key columns and key groups, the batch, the
                             watermark, the source offsets, versions, and a SHA-256 per file
    state/kg-00042.parquet   one file per key group that holds state: one row per record

A *record* is what a key group keeps per key (or, for window jobs, per window):
``{state name: value, TIMERS_FIELD: {(domain, ts)}, HELD_FIELD: watermark}``. A file's
columns are:

* ``__key``: the record's key; ``__key_text`` (string): the same key as JSON text, for people
  and for lookups;
* one column per state name (null where the record has no value);
* ``__timers`` (list of ``{domain, timestamp}``) and ``__held`` (int64, null when absent).

The key column and each state column has an *encoding*, in its field's metadata
(``encoding``): ``arrow`` when every present value is one ``int`` (in int64), ``float``,
``str``, ``bool`` or ``bytes`` type, stored as that Arrow type so that any Parquet reader
reads it; else ``json``, each value as tagged JSON text (``values.py``: containers, tuples,
dates, decimals, dataclasses...), with the classes it names in the field's ``classes``; and
only for values that have no safe encoding, ``pickle``, which a reader unpickles only when
the savepoint is trusted (``values.Decoder``). Version 1 pickled every key and every column
that was not ``arrow``: reading its records needs that trust.

Invariants: a file holds the records of exactly one key group; a record appears in one file
only; a state name is a column in every file of the savepoint, whatever its encoding there.
Everything here is plain Python and pyarrow: reading a savepoint needs no Spark.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sparkstate.api.state import HELD_FIELD, TIMERS_FIELD, Record
from sparkstate.engine.keygroups import dumps_state
from sparkstate.errors import SavepointError
from sparkstate.savepoint.values import Decoder, Unencodable, encode

FORMAT_VERSION = 2
METADATA_FILE = "_savepoint.json"
STATE_DIR = "state"
KEY_COLUMN = "__key"
KEY_TEXT_COLUMN = "__key_text"
TIMERS_COLUMN = "__timers"
HELD_COLUMN = "__held"
RESERVED_COLUMNS = (KEY_COLUMN, KEY_TEXT_COLUMN, TIMERS_COLUMN, HELD_COLUMN)
ENCODING = b"encoding"
#: a ``json`` column's field metadata: the classes its values name (a JSON list)
CLASSES = b"classes"
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
    """A value with no safe encoding, pickled; a class defined in ``__main__`` (a script's)
    goes by value through cloudpickle, as in the state store (``engine/keygroups.py``), so the
    savepoint can be read where that script is not the main module (Spark's executors)."""
    data = dumps_state(value)
    if b"__main__" in data:
        import cloudpickle

        data = cloudpickle.dumps(value, protocol=PICKLE_PROTOCOL)
    return data


def _column(values: list[Any], name: str) -> tuple[pa.Field, pa.Array]:
    """A column's field and array: typed Arrow when every present value is of one simple type,
    else tagged JSON, else (a value with no safe encoding) pickled values. ``None`` in
    ``values`` is an absent value; ``_PRESENT_NONE`` a stored ``None``."""
    present = [v for v in values if v is not None]
    kinds = {type(v) for v in present}
    if len(kinds) == 1:
        (kind,) = kinds
        arrow = _ARROW_TYPES.get(kind)
        if arrow is not None and (kind is not int or all(_INT64[0] <= v <= _INT64[1] for v in present)):
            try:
                array = pa.array(values, arrow)
            except (pa.ArrowInvalid, UnicodeEncodeError):
                pass  # a string Arrow cannot hold (a lone surrogate): JSON escapes it
            else:
                return pa.field(name, arrow, metadata={ENCODING: b"arrow"}), array
    classes: set[str] = set()
    try:
        texts = [None if v is None else encode(None if v is _PRESENT_NONE else v, classes) for v in values]
    except Unencodable:
        blobs = [None if v is None else dumps(None if v is _PRESENT_NONE else v) for v in values]
        return pa.field(name, pa.binary(), metadata={ENCODING: b"pickle"}), pa.array(blobs, pa.binary())
    metadata = {ENCODING: b"json"}
    if classes:
        metadata[CLASSES] = json.dumps(sorted(classes)).encode()
    return pa.field(name, pa.string(), metadata=metadata), pa.array(texts, pa.string())


class _PresentNone:
    """Stands for a state whose stored value is ``None`` while a table is built (a typed
    column could not tell it from an absent value, so such a column is JSON)."""


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
        field, array = _column(cells, name)
        fields.append(field)
        arrays.append(array)
    # an empty timer set is kept as an empty list (not null): the round trip is exact
    timers = [None if (t := rec.get(TIMERS_FIELD)) is None else [{"domain": d, "timestamp": ts} for d, ts in sorted(t)]
              for rec in recs]
    key_field, key_array = _column([_PRESENT_NONE if key is None else key for key in keys], KEY_COLUMN)
    schema = pa.schema([
        key_field, pa.field(KEY_TEXT_COLUMN, pa.string()), *fields,
        pa.field(TIMERS_COLUMN, TIMER_TYPE), pa.field(HELD_COLUMN, pa.int64()),
    ])
    return pa.Table.from_arrays(
        [key_array, pa.array([key_text(key) for key in keys], pa.string()), *arrays,
         pa.array(timers, TIMER_TYPE), pa.array([rec.get(HELD_FIELD) for rec in recs], pa.int64())],
        schema=schema,
    )


def state_names(table: pa.Table) -> list[str]:
    """The state columns of a key group's table."""
    return [n for n in table.column_names if n not in RESERVED_COLUMNS]


def encoding_of(table: pa.Table | pa.Schema, name: str) -> str:
    """A column's encoding: ``arrow``, ``json`` or ``pickle`` (version 1's binary keys are pickled)."""
    schema = table if isinstance(table, pa.Schema) else table.schema
    field = schema.field(name)
    encoding = (field.metadata or {}).get(ENCODING)
    if encoding is None:
        return "pickle" if name == KEY_COLUMN else "arrow"
    return encoding.decode()


def column_classes(schema: pa.Schema) -> set[str]:
    """The classes the JSON columns of a file's schema name."""
    out: set[str] = set()
    for field in schema:
        names = (field.metadata or {}).get(CLASSES)
        if names:
            out.update(json.loads(names))
    return out


def pickled_columns(schema: pa.Schema) -> list[str]:
    """The columns of a file that hold pickled values (the key column as ``__key``)."""
    return [f.name for f in schema
            if f.name not in (KEY_TEXT_COLUMN, TIMERS_COLUMN, HELD_COLUMN) and encoding_of(schema, f.name) == "pickle"]


def column_what(name: str) -> str:
    """A key or state column as messages name it: ``the keys``, ``state 'total'``."""
    return "the keys" if name == KEY_COLUMN else f"state {name!r}"


def decode_column(table: pa.Table, name: str, decoder: Decoder) -> list[Any]:
    """The values of column ``name`` in the table's row order (``MISSING`` where absent)."""
    values = table.column(name).to_pylist()
    encoding = encoding_of(table, name)
    if encoding == "json":
        decode = decoder.decode
        return [MISSING if v is None else decode(v) for v in values]
    if encoding == "pickle":
        unpickle = decoder.unpickler(column_what(name), shown=name != KEY_COLUMN)
        return [MISSING if v is None else unpickle(v) for v in values]
    if encoding != "arrow":
        raise SavepointError(f"{decoder.where}: column {name!r} has the encoding {encoding!r}, which this sparkstate "
                             "does not know: the savepoint is damaged, or written by a newer sparkstate")
    return [MISSING if v is None else v for v in values]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: where a record holds no value of a state
MISSING: Any = _Missing()


def table_to_records(table: pa.Table, decoder: Decoder | None = None) -> list[tuple[Any, Record]]:
    """A key group's table back to ``(key, record)`` pairs (``decoder``: by default, classes
    this process has imported, and no pickled values)."""
    decoder = decoder or Decoder(imported=True)
    keys = decode_column(table, KEY_COLUMN, decoder)
    records: list[Record] = [{} for _ in keys]
    for name in state_names(table):
        column = table.column(name)
        if column.null_count == 0 and encoding_of(table, name) == "arrow":
            for rec, value in zip(records, column.to_pylist()):  # every record holds it: no checks
                rec[name] = value
            continue
        for rec, value in zip(records, decode_column(table, name, decoder)):
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


def read_schema(data: bytes) -> pa.Schema:
    """A key group's file's schema (its footer only)."""
    return pq.read_schema(pa.BufferReader(data))
