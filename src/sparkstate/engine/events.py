"""Moving events to the stateful operator in bulk.

Spark's ``transformWithStateInPandas`` regroups its input row by row in Python, which costs
more than the user's own code. So events travel *packed*: each Arrow batch is sorted by key
group and each group's slice becomes one row ``(kg, part, seq, ts, blob)``, where ``blob`` is
an Arrow IPC stream and ``ts`` the largest event time in it (Spark's watermark is computed on
``ts``, which gives the same watermark as on the events themselves). sparkstate's own sources
produce packed rows directly; any other streaming DataFrame is packed by a ``mapInArrow``
step. ``(part, seq)`` restores arrival order in the operator: a key's events keep the order of
their source partition, and partitions follow each other in index order.

Files are the exception: Spark's file source packs a micro-batch's files into partitions
largest first, so partition order is not the files' order. Rows read from files carry their
file (:data:`FILE_COLUMNS`: path, modification time, the split's start), and their blobs an
*order key* (:func:`file_order`) in their schema metadata: the operator takes blobs by
``(order key, part, seq)``, so a key's events arrive in the order a user expects of a batch's
files: by modification time, then path, each file's lines in order. Blobs without an order
key (every other source) sort as before.

The key group of a key is ``hash(key) mod key_groups`` with pandas' stable ``hash_array``
(SipHash for strings), computed here in Python so that the harness and the savepoint tools
compute the same groups without Spark. Timestamp columns become epoch milliseconds (ints) on
the way, the convention of the API.

Text sources (socket, files) are parsed in the same ``mapInArrow`` step. The lines that are
not events, and the records no key's state may take (:meth:`Packer.pack`: a null key, an event
time outside what the packed rows hold, or one that runs too far ahead of processing time),
travel as *dead-letter rows*: packed rows of key group 0 without event time whose
blob holds ``(raw, reason)`` rows (marked in its schema metadata) instead of events. They
change no key's state and no watermark; :func:`unpack_events` hands them to the operator
beside the events, and the operator emits them to the ``dead_letters`` side output.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from operator import methodcaller
from typing import Any, overload

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sparkstate.api.functions import Event
from sparkstate.api.keys import ComputedKey, KeyNotComputed
from sparkstate.api.schema import Schema
from sparkstate.api.time import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS, TimestampAssigner, epoch_millis
from sparkstate.engine.combine import COMBINED_METADATA, PARTIALS_METADATA, LocalCombiner
from sparkstate.errors import KeyColumnError

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
#: Schema metadata of a blob read from a file: where its rows come in the batch (:func:`file_order`)
ORDER_METADATA = b"sparkstate_order"
#: The columns a packing step's input may carry with each row's file: its path, modification
#: time (a timestamp) and the start of its split in bytes (Spark's ``_metadata`` fields)
FILE_COLUMNS = ("__sparkstate_file", "__sparkstate_file_mtime", "__sparkstate_file_start")


def file_order(path: str, mtime_ms: int, start: int) -> bytes:
    """A key that sorts (as bytes) like ``(mtime_ms, path, start)``: the order of a batch's
    files (oldest first, then by path) and of a file's splits."""
    return b"%020d\x00%s\x00%020d" % (max(0, mtime_ms), path.encode("utf-8", "surrogatepass"), max(0, start))
DEAD_LETTER_ARROW_SCHEMA = pa.schema([("raw", pa.string()), ("reason", pa.string())], metadata=DEAD_LETTER_METADATA)

#: Event time of the row a bounded source appends after its last event. It lifts Spark's
#: watermark to (about) the maximum, which fires every pending event-time timer, as Flink's
#: final ``Long.MAX_VALUE`` watermark does. It carries no events (``blob`` is null).
END_OF_INPUT_MS = 9223200000000  # 2262-04-10T00:00:00Z: the latest time pandas (ns) can hold
assert MAX_EVENT_TIME_MS < END_OF_INPUT_MS, "no event may reach the end-of-input marker's time"

#: The key group a packer without key columns (a broadcast input) gives its events: not a
#: key group but "every key group"; the query replicates such rows to each one. (Its dead
#: letters keep key group 0: one group reports them.)
EVERY_KEY_GROUP = -1

_HASH_MIX = np.uint64(0x9E3779B97F4A7C15)

#: a record a source rejected: ``{"raw": the text, "reason": why}``
DeadLetter = dict[str, str]


def _hash_column(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if pa.types.is_timestamp(col.type):
        col = _to_millis(col)
    if col.null_count and (pa.types.is_integer(col.type) or pa.types.is_boolean(col.type)):
        # numpy would turn the column into floats, whose hashes differ from the ints': every key
        # of a batch holding a null would move to another group. Nulls never reach a key's state
        # (the packer makes them dead letters); here they only must not move the other keys.
        col = pc.fill_null(col, False if pa.types.is_boolean(col.type) else 0)
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


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_time(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC text (the number itself when no datetime holds it)."""
    try:
        return (_EPOCH + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except OverflowError:
        return f"{ms} ms since the epoch"


def span_text(ms: int) -> str:
    """A duration in ms as short text: ``90 s``, ``2 h 5 min``, ``3 days``."""
    for unit, size in (("days", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms >= size:
            whole, rest = divmod(ms, size)
            return f"{whole} {unit}" if not rest or unit in ("days", "s") else f"{whole} {unit} {span_text(rest)}"
    return f"{ms} ms"


def null_key_reason(key_columns: Sequence[str]) -> str:
    """Why an event whose key is null is a dead letter."""
    return f"key column(s) {list(key_columns)} null: an event without its key reaches no key's state"


def event_time_reason(t: int, now: int | None = None, max_ahead_ms: int | None = None) -> str | None:
    """Why an event of time ``t`` (epoch ms) is a dead letter, or None when it is not: a time
    outside ``[MIN_EVENT_TIME_MS, MAX_EVENT_TIME_MS]``, or more than ``max_ahead_ms`` ahead of
    the processing time ``now`` (``JobSettings.max_event_time_ahead``)."""
    if t < MIN_EVENT_TIME_MS or t > MAX_EVENT_TIME_MS:
        edge = "before 1677-09-22" if t < MIN_EVENT_TIME_MS else "after 2262-04-09"
        return (
            f"event time {iso_time(t)} is {edge}, outside the event times sparkstate can hold "
            "(Spark hands them to pandas in nanoseconds); is it in micro- or nanoseconds, not milliseconds?"
        )
    if max_ahead_ms is not None and now is not None and t > now + max_ahead_ms:
        return (
            f"event time {iso_time(t)} is {span_text(t - now)} ahead of processing time {iso_time(now)}, more than "
            f"max_event_time_ahead ({span_text(max_ahead_ms)}): it would move the watermark past the events still "
            "to come (a wrong clock or unit?); raise max_event_time_ahead if such times are real"
        )
    return None


class UnreadableTime:
    """What a failing timestamp assigner gave instead of a time: the reason, for the dead letter."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


@overload
def timestamp_reader(column: str | None, assigner: TimestampAssigner) -> Callable[[Event], Any]: ...
@overload
def timestamp_reader(column: str | None, assigner: None = None) -> Callable[[Event], Any] | None: ...
def timestamp_reader(column: str | None, assigner: TimestampAssigner | None = None) -> Callable[[Event], Any] | None:
    """A function from an event dict to its raw event time (a column's value, or what the
    timestamp assigner returns; an assigner's exception becomes an :class:`UnreadableTime`)."""
    if assigner is None:
        return methodcaller("get", column) if column else None

    def read(ev: Event) -> Any:
        try:
            return assigner(ev)
        except Exception as exc:
            return UnreadableTime(f"timestamp assigner failed: {type(exc).__name__}: {exc}")

    return read


def dead_letter_text(ev: Any) -> str:
    """An event as JSON text for the dead-letter output (non-JSON values as their str)."""
    try:
        return json.dumps(ev, default=str, sort_keys=True)
    except (TypeError, ValueError):
        return repr(ev)


def admit(
    events: Sequence[Event], key_columns: Sequence[str], read_time: Callable[[Event], Any] | None,
    now: int | None = None, max_ahead_ms: int | None = None,
) -> tuple[list[Event], list[DeadLetter]]:
    """The events a key's state may take, and a dead letter for each other one (the rules of
    :meth:`Packer.pack`, for event dicts: the harness's way in)."""
    kept: list[Event] = []
    dead: list[DeadLetter] = []
    for ev in events:
        reason = None
        if isinstance(ev, dict) and any(c in ev and ev[c] is None for c in key_columns):
            reason = null_key_reason(key_columns)
        elif read_time is not None and isinstance(ev, dict):
            t = read_time(ev)
            t = epoch_millis(t) if isinstance(t, datetime) else t
            if type(t) is int:
                reason = event_time_reason(t, now, max_ahead_ms)
        if reason is None:
            kept.append(ev)
        else:
            dead.append({"raw": dead_letter_text(ev), "reason": reason})
    return kept, dead


def with_computed_keys(events: list[Event], keys: Sequence[ComputedKey]) -> tuple[list[Event], list[DeadLetter]]:
    """``events`` with each computed key's value added under its name (``api/keys.py``), and a
    dead letter for each event whose key could not be computed."""
    if not keys:
        return events, []
    kept: list[Event] = []
    dead: list[DeadLetter] = []
    for ev in events:
        if not isinstance(ev, dict):
            kept.append(ev)
            continue
        try:
            kept.append({**ev, **{k.name: k.value(ev) for k in keys}})
        except KeyNotComputed as exc:
            dead.append({"raw": dead_letter_text(ev), "reason": str(exc)})
    return kept, dead


def with_computed_columns(
    body: pa.RecordBatch, keys: Sequence[ComputedKey],
) -> tuple[pa.RecordBatch, dict[int, str], list[Event]]:
    """``body`` (timestamps already epoch ms) with a column per computed key, its function run
    per event on the event as a dict, as the harness runs it; row index -> reason for the
    events whose key could not be computed (null there, and dead letters); and the events as
    those dicts, the computed keys included (what a window combiner adds, made once)."""
    rows = body.to_pylist()
    failed: dict[int, str] = {}
    for k in keys:
        values = []
        for i, row in enumerate(rows):
            try:
                values.append(k.value(row))
            except KeyNotComputed as exc:
                failed.setdefault(i, str(exc))
                values.append(None)
        kind = Schema.of(f"{k.name} {k.type}").arrow.field(0).type if k.type is not None else None
        try:
            column = pa.array(values, type=kind)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            what = f"values that are not {k.type}" if kind is not None else "values of more than one type"
            raise KeyColumnError(
                f"the computed key {k.name!r} returned {what} ({exc}); return one type (int, float, str or bool) "
                "for every event"
            ) from exc
        body = body.append_column(k.name, column)
        for row, value in zip(rows, values):
            row[k.name] = value
    return body, failed, rows


class Packer:
    """Packs Arrow batches of events into rows of ``PACKED_ARROW_SCHEMA``.

    Events no key's state may take become dead letters on the way (see :meth:`pack`); with
    ``max_ahead_ms`` (``JobSettings.max_event_time_ahead``) that includes events more than that
    far ahead of the batch's processing time.
    """

    def __init__(
        self, key_columns: Sequence[str], key_groups: int, time_column: str | None,
        timestamp_assigner: TimestampAssigner | None = None, max_ahead_ms: int | None = None,
        computed_keys: Sequence[ComputedKey] = (), combiner: LocalCombiner | None = None,
    ) -> None:
        self.key_columns = list(key_columns)
        #: window jobs: combines events per key and window before the shuffle (``engine/combine.py``)
        self.combiner = combiner
        #: computed key columns, added to each batch before anything else (``api/keys.py``)
        self.computed_keys = tuple(computed_keys)
        self.key_groups = key_groups
        self.time_column = time_column
        self.timestamp_assigner = timestamp_assigner
        self.max_ahead_ms = max_ahead_ms

    def _event_times(self, body: pa.RecordBatch) -> np.ndarray | None:
        """Each event's time in ms (int64 min where it has none), or None without event time."""
        none = np.iinfo(np.int64).min
        if self.timestamp_assigner is not None:
            read = timestamp_reader(None, self.timestamp_assigner)
            times = []
            for ev in body.to_pylist():
                t = read(ev)
                if isinstance(t, datetime):
                    t = epoch_millis(t)
                if type(t) is not int:
                    t = none  # unreadable: a dead letter downstream
                elif not -(2**63) < t < 2**63:
                    t = 2**63 - 1 if t > 0 else -(2**63) + 1  # beyond int64: out of range all the same
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

    def _rejected(self, body: pa.RecordBatch, times: np.ndarray | None, now: int | None) -> dict[int, str]:
        """Row index -> why that event is a dead letter (null key, event time out of range or
        too far ahead of ``now``)."""
        reasons: dict[int, str] = {}
        for c in self.key_columns:
            col = body.column(c)
            if col.null_count:
                for i in np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False)):
                    reasons[int(i)] = null_key_reason(self.key_columns)
        if times is not None:
            known = times != np.iinfo(np.int64).min
            suspect = known & ((times < MIN_EVENT_TIME_MS) | (times > MAX_EVENT_TIME_MS))
            if self.max_ahead_ms is not None and now is not None:
                suspect |= known & (times > now + self.max_ahead_ms)
            for i in np.flatnonzero(suspect):
                reason = event_time_reason(int(times[i]), now, self.max_ahead_ms)
                if reason is not None:
                    reasons.setdefault(int(i), reason)
        return reasons

    def pack(
        self, batch: pa.RecordBatch, part: int, seq: int, now: int | None = None,
        raws: Sequence[str] | None = None, dead: Sequence[DeadLetter] = (), order: bytes | None = None,
    ) -> pa.RecordBatch | None:
        """One input batch as packed rows (None when it leaves none).

        Events with a null key, or an event time outside ``[MIN_EVENT_TIME_MS,
        MAX_EVENT_TIME_MS]`` or more than ``max_ahead_ms`` ahead of ``now`` (the batch's
        processing time, epoch ms), become dead letters: ``raws`` (when given) is each event's
        text as read, else the event is written as JSON. They, and ``dead`` (records the
        caller rejected before), follow the events as one dead-letter row. ``order``: the
        rows' :func:`file_order` key, when they come from one file.
        """
        body = self._prepare(batch) if batch.num_rows else batch
        failed: dict[int, str] = {}
        rows: list[Event] | None = None
        if self.computed_keys and body.num_rows:
            body, failed, rows = with_computed_columns(body, self.computed_keys)
        times = self._event_times(body) if batch.num_rows else None
        dead = list(dead)
        rejected = {**self._rejected(body, times, now), **failed} if batch.num_rows else {}
        if rejected:
            bad = np.zeros(body.num_rows, dtype=bool)
            bad[list(rejected)] = True
            for i, reason in sorted(rejected.items()):
                raw = raws[i] if raws is not None else dead_letter_text(body.slice(i, 1).to_pylist()[0])
                dead.append({"raw": raw, "reason": reason})
            body = body.filter(pa.array(~bad))
            times = times[~bad] if times is not None else None
            rows = [r for r, b in zip(rows, bad) if not b] if rows is not None else None
        packed = None
        hashes = None
        if self.combiner is not None and body.num_rows and times is not None:
            hashes = hash_keys([body.column(c) for c in self.key_columns])
        hot = self._hot(hashes) if hashes is not None else None
        if hot is not None:
            # the hot keys' events with an event time are combined; the rest travel as events
            assert self.combiner is not None and times is not None and hashes is not None
            take = hot & (times != np.iinfo(np.int64).min)
            keep = ~take
            timed = body.filter(pa.array(take))
            if take.any():
                partials, latest = self.combiner.split(
                    timed, times[take], [r for r, t in zip(rows, take) if t] if rows is not None else None)
                at = {ORDER_METADATA: order} if order is not None else {}
                packed = pa.concat_batches([
                    self._pack_events(partials.replace_schema_metadata({**PARTIALS_METADATA, **at}), latest, part, seq),
                    self._pack_events(timed.replace_schema_metadata({**COMBINED_METADATA, **at}), None, part, seq),
                ])
            body, times, hashes = body.filter(pa.array(keep)), times[keep], hashes[keep]
        if order is not None and body.num_rows:
            body = body.replace_schema_metadata({ORDER_METADATA: order})
        if body.num_rows:
            events = self._pack_events(body, times, part, seq, hashes)
            packed = events if packed is None else pa.concat_batches([packed, events])
        if dead:
            row = dead_letter_row(dead, part, seq, order)
            packed = row if packed is None else pa.concat_batches([packed, row])
        return packed

    def _hot(self, hashes: np.ndarray) -> np.ndarray | None:
        """Which of a batch's events, whose keys hash to ``hashes``, are of a key that is
        combined (:meth:`LocalCombiner.hot`: a key with a large share of the events); None
        when no key is."""
        assert self.combiner is not None
        _, inverse, counts = np.unique(hashes, return_inverse=True, return_counts=True)
        keys = self.combiner.hot(counts, len(hashes))
        return keys[inverse] if keys.any() else None

    def _pack_events(
        self, body: pa.RecordBatch, times: np.ndarray | None, part: int, seq: int, hashes: np.ndarray | None = None,
    ) -> pa.RecordBatch:
        if not self.key_columns:  # an unkeyed (broadcast) input: one row for every key group
            kgs = np.full(body.num_rows, EVERY_KEY_GROUP, dtype=np.int32)
        else:
            if hashes is None:
                hashes = hash_keys([body.column(c) for c in self.key_columns])
            kgs = (hashes % np.uint64(self.key_groups)).astype(np.int32)
        ordered = len(kgs) < 2 or bool((kgs[1:] >= kgs[:-1]).all())  # one hot group, say: no copy
        order = None if ordered else np.argsort(kgs, kind="stable")
        if order is not None:
            kgs = kgs[order]
            body = body.take(pa.array(order))  # keeps the schema's metadata (a file's order key)
        starts = np.flatnonzero(np.r_[True, kgs[1:] != kgs[:-1]])
        ends = np.r_[starts[1:], len(kgs)]
        blobs = [_ipc(body.slice(s, e - s)) for s, e in zip(starts, ends)]
        n = len(blobs)
        ts_type = pa.timestamp("us", tz="UTC")
        if times is not None:
            times = times[order] if order is not None else times
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
        """Batches of events; a column :data:`NOW_COLUMN`, when there, is the batch's
        processing time, and :data:`FILE_COLUMNS` each row's file (taken off before packing)."""
        seq = 0
        for batch in batches:
            batch, now = take_now(batch)
            for piece, order in by_file(batch):
                packed = self.pack(piece, part, seq, now, order=order)
                if packed is not None:
                    seq += 1
                    yield packed

    def pack_lines(self, parser: Any, batches: Iterable[pa.RecordBatch], part: int) -> Iterator[pa.RecordBatch]:
        """Batches of text lines (first column) parsed by ``parser`` (a ``LineParser``) and
        packed; the lines that are not events follow their batch as a dead-letter row."""
        seq = 0
        for batch in batches:
            batch, now = take_now(batch)
            for piece, order in by_file(batch):
                packed, _ = self.pack_text(parser, piece.column(0), part, seq, now, order)
                seq += 1
                if packed is not None:
                    yield packed

    def pack_text(
        self, parser: Any, lines: pa.Array, part: int, seq: int, now: int | None = None, order: bytes | None = None,
    ) -> tuple[pa.RecordBatch | None, int]:
        """Lines (an Arrow string array) parsed by ``parser`` (a ``LineParser``) and packed, the
        lines that are not events following as a dead-letter row; and how many records the
        lines held (events and dead letters: every line but the blank ones). ``now`` is the
        batch's processing time, ``order`` the lines' :func:`file_order` key (or None)."""
        events = parser.parse_column(lines)  # every line an event, read without Python strings
        if events is not None:
            dead, raws = [], _Lines(lines)
        else:
            events, dead, raws = parser.parse(lines.to_pylist(), with_raw=True)
        return self.pack(events, part, seq, now, raws, dead, order), events.num_rows + len(dead)


class _Lines(Sequence[str]):
    """An Arrow column's lines, each made a string when asked for (a dead letter made later,
    such as an event time too far ahead, quotes its line)."""

    def __init__(self, lines: pa.Array) -> None:
        self._lines = lines

    def __len__(self) -> int:
        return len(self._lines)

    def __getitem__(self, i: Any) -> Any:
        return self._lines[i].to_pylist() if isinstance(i, slice) else self._lines[i].as_py()


#: The column a packing step's input may carry with the batch's processing time (Spark's
#: ``current_timestamp()``, which a streaming query fixes per micro-batch and logs with its
#: offsets, so a replayed batch sees the same time).
NOW_COLUMN = "__sparkstate_now"


def take_now(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, int | None]:
    """``batch`` without :data:`NOW_COLUMN`, and that column's time in epoch ms (None: no column)."""
    i = batch.schema.get_field_index(NOW_COLUMN)
    if i < 0:
        return batch, None
    col = batch.column(i)
    now = None
    if batch.num_rows and col.null_count < batch.num_rows:
        value = pc.max(_to_millis(col) if pa.types.is_timestamp(col.type) else col).as_py()
        now = int(value) if value is not None else None
    return batch.remove_column(i), now


def by_file(batch: pa.RecordBatch) -> Iterator[tuple[pa.RecordBatch, bytes | None]]:
    """``batch`` without :data:`FILE_COLUMNS`, in runs of rows of one file split each with its
    :func:`file_order` key (a Spark partition reads its splits one after another); the whole
    batch and None when it has no such columns."""
    if batch.schema.get_field_index(FILE_COLUMNS[0]) < 0:
        yield batch, None
        return
    paths, mtimes, starts = (batch.column(batch.schema.get_field_index(c)) for c in FILE_COLUMNS)
    body = batch.drop_columns(list(FILE_COLUMNS))
    if not batch.num_rows:
        return
    mtime_ms = _to_millis(mtimes) if pa.types.is_timestamp(mtimes.type) else mtimes
    n = batch.num_rows
    if paths[0] == paths[n - 1] and starts[0] == starts[n - 1]:
        bounds = [0, n]  # a split's rows are contiguous: one split from the first row to the last
    else:
        moved = pc.or_(pc.not_equal(paths.slice(1), paths.slice(0, n - 1)), pc.not_equal(starts.slice(1), starts.slice(0, n - 1)))
        bounds = [0, *(np.flatnonzero(moved.to_numpy(zero_copy_only=False)) + 1).tolist(), n]
    for lo, hi in zip(bounds, bounds[1:]):
        yield body.slice(lo, hi - lo), file_order(paths[lo].as_py(), int(mtime_ms[lo].as_py() or 0), int(starts[lo].as_py() or 0))


def dead_letter_row(dead: list[DeadLetter], part: int, seq: int, order: bytes | None = None) -> pa.RecordBatch:
    """Records a source rejected (``{"raw", "reason"}`` dicts) as one packed row: key group 0,
    no event time, the blob marked as dead letters (see the module docs), with its file's
    order key when it has one."""
    rows = [{"raw": _utf8(d.get("raw")), "reason": _utf8(d.get("reason"))} for d in dead]
    schema = DEAD_LETTER_ARROW_SCHEMA if order is None else DEAD_LETTER_ARROW_SCHEMA.with_metadata(
        {**DEAD_LETTER_ARROW_SCHEMA.metadata, ORDER_METADATA: order})
    blob = _ipc(pa.RecordBatch.from_pylist(rows, schema=schema))
    return pa.RecordBatch.from_pylist(
        [{"kg": 0, "part": part, "seq": seq, "ts": None, "blob": blob}], schema=PACKED_ARROW_SCHEMA
    )


def _utf8(text: Any) -> str:
    """Text Arrow can store: a lone surrogate (``"\\ud800"`` decoded from JSON) cannot be
    UTF-8, so it is written as its escape."""
    value = "" if text is None else str(text)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


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

    __slots__ = ("names", "_lists", "_table", "dead_letters", "partials", "combined")

    def __init__(self, names: Sequence[str], columns: Sequence[list[Any]] = (), table: pa.Table | None = None) -> None:
        self.names = tuple(names)
        self._table = table
        self._lists: list[list[Any] | None] = list(columns) if table is None else [None] * len(self.names)
        #: records the source rejected in this batch (``{"raw", "reason"}``), for the operator
        self.dead_letters: list[DeadLetter] = []
        #: combined window inputs (``engine/combine.py``), each as ``(events before it, an
        #: Arrow table per packed blob on Spark or a list of partials in the harness)``; and
        #: the events they hold (Arrow tables, or lists of event dicts), for late data only
        self.partials: list[Any] = []
        self.combined: list[Any] = []

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
    partials: list[Any]
    combined: list[Any]


def unpack_events(packed: Iterable[tuple[int, int, bytes | None]]) -> EventColumns | EventList:
    """``(part, seq, blob)`` rows back to events, in arrival order: columns when every blob
    has the same columns (always, for one source), else a list of event dicts. Dead-letter
    blobs are not events: their rows go to the result's ``dead_letters``; blobs of partials
    (``engine/combine.py``) to its ``partials``, each with the number of events that arrived
    before it, and the events they combine to its ``combined``, in arrival order."""
    opened = []
    for part, seq, blob in packed:
        if blob is not None:
            table = pa.ipc.open_stream(blob).read_all()
            meta = table.schema.metadata or {}
            opened.append((meta.get(ORDER_METADATA, b""), part, seq, table, meta.get(b"sparkstate")))
    tables, dead, partials, combined = [], [], [], []
    arrived = 0  # events before the next blob: where a blob of partials merges among them
    for *_, table, mark in sorted(opened, key=lambda r: r[:3]):
        if mark == DEAD_LETTER_METADATA[b"sparkstate"]:
            dead.extend(table.to_pylist())
        elif mark == PARTIALS_METADATA[b"sparkstate"]:
            partials.append((arrived, table))
        elif mark == COMBINED_METADATA[b"sparkstate"]:
            combined.append(table)
        else:
            tables.append(table.replace_schema_metadata(None) if table.schema.metadata else table)
            arrived += table.num_rows
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
    result.partials = partials
    result.combined = combined
    return result
