"""Moving events to the stateful operator in bulk.

Spark's ``transformWithStateInPandas`` regroups its input row by row in Python, which costs
more than the user's own code. So events travel *packed*: each Arrow batch is sorted by key
group and each group's slice becomes one row ``(kg, part, seq, ts, blob)``, where ``blob`` is
an Arrow IPC stream and ``ts`` the largest event time in it (Spark's watermark is computed on
``ts``, which gives the same watermark as on the events themselves). sparkstate's own sources
produce packed rows directly; any other streaming DataFrame is packed by a ``mapInArrow``
step. ``(part, seq)`` restores arrival order in the operator: a key's events keep the order of
their source partition, and partitions follow each other in index order.

The key group of a key is ``hash(key) mod key_groups`` with pandas' stable ``hash_array``
(SipHash for strings), computed here in Python so that the harness and the savepoint tools
compute the same groups without Spark. Timestamp columns become epoch milliseconds (ints) on
the way, the convention of the API.

Text sources (socket, files) are parsed in the same ``mapInArrow`` step. The lines that are
not events travel as *dead-letter rows*: packed rows of key group 0 without event time whose
blob holds ``(raw, reason)`` rows (marked in its schema metadata) instead of events. They
change no key's state and no watermark; :func:`unpack_events` hands them to the operator
beside the events, and the operator emits them to the ``dead_letters`` side output.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sparkstate.api.functions import Event
from sparkstate.api.time import TimestampAssigner, epoch_millis
from sparkstate.engine.operator import timestamp_reader

PACKED_SCHEMA = "kg int, part int, seq int, ts timestamp, blob binary"
PACKED_ARROW_SCHEMA = pa.schema(
    [
        ("kg", pa.int32()),
        ("part", pa.int32()),
        ("seq", pa.int32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("blob", pa.binary()),
    ]
)

#: Schema metadata that marks a packed blob of dead letters (``raw, reason``), not events.
DEAD_LETTER_METADATA = {b"sparkstate": b"dead_letters"}
DEAD_LETTER_ARROW_SCHEMA = pa.schema([("raw", pa.string()), ("reason", pa.string())], metadata=DEAD_LETTER_METADATA)

#: Event time of the row a bounded source appends after its last event. It lifts Spark's
#: watermark to (about) the maximum, which fires every pending event-time timer, as Flink's
#: final ``Long.MAX_VALUE`` watermark does. It carries no events (``blob`` is null).
END_OF_INPUT_MS = 9223200000000  # 2262-04-10T00:00:00Z: the latest time pandas (ns) can hold

_HASH_MIX = np.uint64(0x9E3779B97F4A7C15)

#: a record a source rejected: ``{"raw": the text, "reason": why}``
DeadLetter = dict[str, str]


def _hash_column(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if pa.types.is_timestamp(col.type):
        col = _to_millis(col)
    values = col.to_numpy(zero_copy_only=False)
    if values.dtype.kind in "iub":
        values = values.astype(np.int64)
    hashes: np.ndarray = pd.util.hash_array(values, categorize=False)
    return hashes


def hash_keys(columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """Stable 64-bit hashes of keys given column by column (one column per key field)."""
    h = _hash_column(columns[0])
    for col in columns[1:]:
        h = (h * _HASH_MIX) ^ _hash_column(col)
    return h


def key_group_of(key: Any, key_groups: int, arrow_types: Sequence[pa.DataType] | None = None) -> int:
    """The key group of one key (a scalar, or a tuple for several key columns)."""
    parts = key if isinstance(key, tuple) else (key,)
    types = arrow_types or [None] * len(parts)
    cols = [pa.array([p], type=t) for p, t in zip(parts, types)]
    return int(hash_keys(cols)[0] % np.uint64(key_groups))


def _to_millis(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    tz = col.type.tz
    return pc.cast(col, pa.timestamp("ms", tz=tz), safe=False).cast(pa.int64())


def _ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    data: bytes = sink.getvalue().to_pybytes()
    return data


class Packer:
    """Packs Arrow batches of events into rows of ``PACKED_ARROW_SCHEMA``."""

    def __init__(
        self, key_columns: Sequence[str], key_groups: int, time_column: str | None,
        timestamp_assigner: TimestampAssigner | None = None,
    ) -> None:
        self.key_columns = list(key_columns)
        self.key_groups = key_groups
        self.time_column = time_column
        self.timestamp_assigner = timestamp_assigner

    def _event_times(self, body: pa.RecordBatch) -> np.ndarray | None:
        """Each event's time in ms (int64 min where it has none), or None without event time."""
        none = np.iinfo(np.int64).min
        if self.timestamp_assigner is not None:
            read = timestamp_reader(None, self.timestamp_assigner)
            times = []
            for ev in body.to_pylist():
                t = read(ev)
                if type(t) is not int:
                    t = epoch_millis(t) if isinstance(t, datetime) else none  # unreadable: a dead letter downstream
                times.append(t)
            return np.array(times, dtype=np.int64)
        if self.time_column is None:
            return None
        col = body.column(self.time_column)
        stamps: np.ndarray = (pc.fill_null(col, none).to_numpy() if col.null_count else col.to_numpy()).astype(np.int64)
        return stamps

    def _prepare(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        arrays = [_to_millis(c) if pa.types.is_timestamp(c.type) else c for c in batch.columns]
        return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)

    def pack(self, batch: pa.RecordBatch, part: int, seq: int) -> pa.RecordBatch | None:
        """One input batch as packed rows (None for an empty batch)."""
        if batch.num_rows == 0:
            return None
        kgs = (hash_keys([batch.column(c) for c in self.key_columns]) % np.uint64(self.key_groups)).astype(np.int32)
        body = self._prepare(batch)
        order = np.argsort(kgs, kind="stable")
        kgs = kgs[order]
        body = body.take(pa.array(order))
        starts = np.flatnonzero(np.r_[True, kgs[1:] != kgs[:-1]])
        ends = np.r_[starts[1:], len(kgs)]
        blobs = [_ipc(body.slice(s, e - s)) for s, e in zip(starts, ends)]
        n = len(blobs)
        ts_type = pa.timestamp("us", tz="UTC")
        times = self._event_times(body)
        if times is not None:
            none = np.iinfo(np.int64).min
            latest = np.maximum.reduceat(times, starts)
            valid = latest != none
            ts = pa.array(np.where(valid, latest, 0) * 1000, ts_type, mask=~valid)
        else:
            ts = pa.nulls(n, ts_type)
        return pa.RecordBatch.from_arrays(
            [
                pa.array(kgs[starts], pa.int32()),
                pa.array(np.full(n, part, dtype=np.int32)),
                pa.array(np.full(n, seq, dtype=np.int32)),
                ts,
                pa.array(blobs, pa.binary()),
            ],
            schema=PACKED_ARROW_SCHEMA,
        )

    def pack_all(self, batches: Iterable[pa.RecordBatch], part: int) -> Iterator[pa.RecordBatch]:
        seq = 0
        for batch in batches:
            packed = self.pack(batch, part, seq)
            if packed is not None:
                seq += 1
                yield packed

    def pack_lines(self, parser: Any, batches: Iterable[pa.RecordBatch], part: int) -> Iterator[pa.RecordBatch]:
        """Batches of text lines (first column) parsed by ``parser`` (a ``LineParser``) and
        packed; the lines that are not events follow their batch as a dead-letter row."""
        for seq, batch in enumerate(batches):
            events, dead = parser.parse(batch.column(0).to_pylist())
            packed = self.pack(events, part, seq)
            if packed is not None:
                yield packed
            if dead:
                yield dead_letter_row(dead, part, seq)


def dead_letter_row(dead: list[DeadLetter], part: int, seq: int) -> pa.RecordBatch:
    """Records a source rejected (``{"raw", "reason"}`` dicts) as one packed row: key group 0,
    no event time, the blob marked as dead letters (see the module docs)."""
    blob = _ipc(pa.RecordBatch.from_pylist(dead, schema=DEAD_LETTER_ARROW_SCHEMA))
    return pa.RecordBatch.from_pylist(
        [{"kg": 0, "part": part, "seq": seq, "ts": None, "blob": blob}], schema=PACKED_ARROW_SCHEMA
    )


def end_of_input_row(part: int = 0, seq: int = 2**31 - 1) -> pa.RecordBatch:
    """The packed end-of-input marker: no events, event time at the end of time."""
    return pa.RecordBatch.from_pylist(
        [{"kg": 0, "part": part, "seq": seq, "ts": END_OF_INPUT_MS * 1000, "blob": None}], schema=PACKED_ARROW_SCHEMA
    )


_MAKERS: dict[tuple[str, ...], Callable[..., Event]] = {}


def _dict_maker(names: tuple[str, ...]) -> Callable[..., Event]:
    """A function of one positional argument per column returning the event dict.

    Generated once per column list: a dict display with constant keys builds an event about
    twice as fast as ``dict(zip(names, values))``.
    """
    maker = _MAKERS.get(names)
    if maker is None:
        args = ", ".join(f"v{i}" for i in range(len(names)))
        body = ", ".join(f"{name!r}: v{i}" for i, name in enumerate(names))
        maker = eval(f"lambda {args}: {{{body}}}")  # noqa: S307 - names are repr()-quoted
        _MAKERS[names] = maker
    return maker


def has_map(t: pa.DataType) -> bool:
    """True when ``t`` is or contains a map (which Arrow turns into lists of pairs by default)."""
    if pa.types.is_map(t):
        return True
    return any(has_map(t.field(i).type) for i in range(t.num_fields)) if pa.types.is_nested(t) else False


def _pylist(col: pa.ChunkedArray) -> list[Any]:
    values: list[Any]
    # numpy's tolist is about twice as fast as Arrow's to_pylist for null-free numbers
    if col.null_count == 0 and (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        values = col.to_numpy().tolist()
    # maps_as_pydicts makes to_pylist about 10x slower, even on strings: only where needed
    else:
        values = col.to_pylist(maps_as_pydicts="strict") if has_map(col.type) else col.to_pylist()
    return values


class EventColumns:
    """A micro-batch's events column by column, in arrival order; iterating gives event dicts.

    Functions see one dict per event, made as they iterate; built-in window aggregates read
    just the columns they need (:meth:`column`) and make no dicts at all. Columns of an Arrow
    table become Python lists when first read, so columns nobody reads cost nothing.
    """

    __slots__ = ("names", "_lists", "_table", "dead_letters")

    def __init__(self, names: Sequence[str], columns: Sequence[list[Any]] = (), table: pa.Table | None = None) -> None:
        self.names = tuple(names)
        self._table = table
        self._lists: list[list[Any] | None] = list(columns) if table is None else [None] * len(self.names)
        #: records the source rejected in this batch (``{"raw", "reason"}``), for the operator
        self.dead_letters: list[DeadLetter] = []

    @staticmethod
    def of(events: Iterable[Event]) -> EventColumns:
        """Event dicts as columns (the first event's keys; a missing value reads as None)."""
        rows = events if isinstance(events, list) else list(events)
        names = tuple(rows[0]) if rows and isinstance(rows[0], dict) else ()
        return EventColumns(names, [[ev.get(n) for ev in rows] for n in names])

    @property
    def columns(self) -> list[list[Any]]:
        return [self._list(i) for i in range(len(self.names))]

    def _list(self, i: int) -> list[Any]:
        values = self._lists[i]
        if values is None:
            table = self._table
            assert table is not None  # a column not given is read from the table, once
            values = self._lists[i] = _pylist(table.column(i))
        return values

    def __len__(self) -> int:
        if self._table is not None:
            rows: int = self._table.num_rows
            return rows
        first = self._lists[0] if self._lists else None  # given columns: lists, never None
        return len(first) if first is not None else 0

    def __iter__(self) -> Iterator[Event]:
        return map(_dict_maker(self.names), *self.columns) if self.names else iter(())

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (list, EventColumns)) else NotImplemented

    def column(self, name: str) -> list[Any] | None:
        """The values of column ``name``, or None when the events have no such column."""
        try:
            return self._list(self.names.index(name))
        except ValueError:
            return None

    def row(self, i: int) -> Event:
        """Event ``i`` as a dict."""
        return {n: c[i] for n, c in zip(self.names, self.columns)}


class EventList(list[Event]):
    """Event dicts of a batch whose blobs had different columns, with the batch's dead letters."""

    dead_letters: list[DeadLetter]


def unpack_events(packed: Iterable[tuple[int, int, bytes | None]]) -> EventColumns | EventList:
    """``(part, seq, blob)`` rows back to events, in arrival order: columns when every blob
    has the same columns (always, for one source), else a list of event dicts. Dead-letter
    blobs are not events: their rows go to the result's ``dead_letters``."""
    tables, dead = [], []
    for _, _, blob in sorted(packed, key=lambda r: (r[0], r[1])):
        if blob is None:
            continue
        table = pa.ipc.open_stream(blob).read_all()
        if (table.schema.metadata or {}).get(b"sparkstate") == DEAD_LETTER_METADATA[b"sparkstate"]:
            dead.extend(table.to_pylist())
        else:
            tables.append(table)
    first = tables[0].schema if tables else None
    result: EventColumns | EventList
    if first is None:
        result = EventColumns((), [])
    elif all(t.schema.equals(first) for t in tables[1:]):
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        result = EventColumns(table.column_names, table=table)
    else:
        result = EventList()
        for table in tables:
            result.extend(map(_dict_maker(tuple(table.column_names)), *[_pylist(c) for c in table.columns]))
    result.dead_letters = dead
    return result
